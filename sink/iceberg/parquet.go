package iceberg

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/klauspost/compress/s2"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/snappy"

	"github.com/cdcd-dev/cdcd/schema"
)

// Data files are written with parquet-go (measured faster here than
// arrow-go's pqarrow for the same rows), with Iceberg field ids embedded,
// then registered through their footer: arrow-go parses the footer bytes
// and iceberg-go's DataFileFromMetadata derives the column statistics.

// pqColumn is one Iceberg field as a Parquet leaf column. Every field
// cdcd writes has exactly one leaf: a primitive, or a list (of lists) of a
// primitive, written with the standard 3-level LIST structure
//
//	<optional|required> group <name> (LIST) {   field id: the column's
//	  repeated group list {
//	    <optional|required> <element> element;  field id: the element's
//	  }
//	}
//
// A list's values take repetition and definition levels (see appendNested).
type pqColumn struct {
	name     string
	typ      iceberg.Type
	required bool
	leaf     int  // column index in parquet-go's (name-sorted) leaf order
	list     bool // typ is a list: values are nested
}

// fileSchema writes rows of one Iceberg schema.
type fileSchema struct {
	ice   *iceberg.Schema
	pq    *parquet.Schema
	cols  []pqColumn // in Iceberg field order
	order []int      // indexes into cols in leaf order, the order parquet-go wants a row's values in
	// plan, when set, writes the files with pqWriter instead of
	// parquet-go's writer (commit files of flat primitive columns).
	plan *pqPlan
}

// newFileSchema is the schema of sc's Parquet files compressed with
// parquet-go's Snappy codec (s2's "better" encoder): the files that stay,
// the compactor's and the delete files.
func newFileSchema(sc *iceberg.Schema) (*fileSchema, error) {
	return newFileSchemaCodec(sc, &snappy.Codec{})
}

// newCommitFileSchema is the schema of a commit's data files, compressed
// with Snappy's fast encoder (commitCodec).
// Their columns all flat primitives, pqWriter writes them (pqwrite.go).
func newCommitFileSchema(sc *iceberg.Schema) (*fileSchema, error) {
	fs, err := newFileSchemaCodec(sc, &commitCodec{})
	if err != nil || !pqWriterOn {
		return fs, err
	}
	if fs.plan, err = newPQPlan(fs); err != nil {
		return nil, err
	}
	return fs, nil
}

// pqWriterOn: commit files are written by pqWriter where it can (a
// variable for tests and benchmarks that compare with parquet-go's).
var pqWriterOn = true

// commitCodec writes Snappy's block format with s2's standard encoder,
// which any Snappy decoder reads, instead of the "better" encoder of
// parquet-go's codec: about twice as fast for files about 9% larger
// (BENCHMARKS.md). A commit's data files are small files the compactor
// rewrites (with the better encoder) into the files that stay, so the
// sink's hot path pays for speed, not for size.
type commitCodec struct{ snappy.Codec }

func (*commitCodec) Encode(dst, src []byte) ([]byte, error) { return s2.EncodeSnappy(dst, src), nil }

func newFileSchemaCodec(sc *iceberg.Schema, codec compress.Codec) (*fileSchema, error) {
	group := parquet.Group{}
	fields := sc.Fields()
	for _, f := range fields {
		node, err := parquetField(f.Type, f.Required, f.ID, codec)
		if err != nil {
			return nil, fmt.Errorf("iceberg: column %q: %w", f.Name, err)
		}
		group[f.Name] = node
	}
	pq := parquet.NewSchema("table", group)
	fs := &fileSchema{ice: sc, pq: pq}
	for _, f := range fields {
		leaf, ok := pq.Lookup(leafPath(f.Name, f.Type)...)
		if !ok {
			return nil, fmt.Errorf("iceberg: column %q missing from the parquet schema", f.Name)
		}
		_, list := f.Type.(*iceberg.ListType)
		fs.cols = append(fs.cols, pqColumn{name: f.Name, typ: f.Type, required: f.Required, leaf: leaf.ColumnIndex, list: list})
	}
	fs.order = make([]int, len(fs.cols))
	for i := range fs.cols {
		fs.order[i] = i
	}
	sort.Slice(fs.order, func(i, j int) bool { return fs.cols[fs.order[i]].leaf < fs.cols[fs.order[j]].leaf })
	// Every field is one leaf, so a field's leaf index is its place in
	// leaf order: the writer's batches (dataFileWriter.pending) and the
	// codec's (rowCodec.out) are indexed by either.
	for li, fi := range fs.order {
		if fs.cols[fi].leaf != li {
			return nil, fmt.Errorf("iceberg: column %q is leaf %d of the parquet schema, want %d", fs.cols[fi].name, fs.cols[fi].leaf, li)
		}
	}
	return fs, nil
}

// parquetField is the node of a field (or list element) with Iceberg id id.
func parquetField(t iceberg.Type, required bool, id int, codec compress.Codec) (parquet.Node, error) {
	var node parquet.Node
	if l, ok := t.(*iceberg.ListType); ok {
		elem, err := parquetField(l.Element, l.ElementRequired, l.ElementID, codec)
		if err != nil {
			return nil, err
		}
		node = parquet.List(elem)
	} else {
		leaf, err := parquetNode(t)
		if err != nil {
			return nil, err
		}
		if id == posDeletePathID {
			// Exact bounds (paths are short): a compaction drops a
			// position-delete file once no live data file is between them.
			leaf = parquet.String()
		}
		node = parquet.Compressed(leaf, codec)
	}
	if !required {
		node = parquet.Optional(node)
	}
	return parquet.FieldID(node, id), nil
}

// posDeletePathID is the field id of a position-delete file's file_path.
var posDeletePathID = func() int {
	f, _ := iceberg.PositionalDeleteSchema.FindFieldByName("file_path")
	return f.ID
}()

// leafPath is the path of a field's leaf column: the name, then "list",
// "element" for each level of list.
func leafPath(name string, t iceberg.Type) []string {
	path := []string{name}
	for {
		l, ok := t.(*iceberg.ListType)
		if !ok {
			return path
		}
		path = append(path, "list", "element")
		t = l.Element
	}
}

func parquetNode(t iceberg.Type) (parquet.Node, error) {
	switch t := t.(type) {
	case iceberg.BooleanType:
		return parquet.Leaf(parquet.BooleanType), nil
	case iceberg.Int32Type:
		return parquet.Int(32), nil
	case iceberg.Int64Type:
		return parquet.Int(64), nil
	case iceberg.Float32Type:
		return parquet.Leaf(parquet.FloatType), nil
	case iceberg.Float64Type:
		return parquet.Leaf(parquet.DoubleType), nil
	case iceberg.DecimalType:
		return parquet.Decimal(t.Scale(), t.Precision(), decimalPhysical(t.Precision())), nil
	case iceberg.StringType:
		return boundedNode(parquet.String(), true), nil
	case iceberg.BinaryType:
		return boundedNode(parquet.Leaf(parquet.ByteArrayType), false), nil
	case iceberg.UUIDType:
		return parquet.UUID(), nil
	case iceberg.DateType:
		return parquet.Date(), nil
	case iceberg.TimeType:
		return parquet.Time(parquet.Microsecond), nil
	case iceberg.TimestampType:
		return parquet.TimestampAdjusted(parquet.Microsecond, false), nil
	case iceberg.TimestampTzType:
		return parquet.TimestampAdjusted(parquet.Microsecond, true), nil
	}
	return nil, fmt.Errorf("no parquet mapping for Iceberg type %s", t)
}

// decimalBytes is the fixed length of a decimal of precision p stored as
// FIXED_LEN_BYTE_ARRAY (precisions above 18), as the Iceberg spec requires.
func decimalBytes(p int) int {
	n := 1
	for ; ; n++ {
		// max digits that fit in n bytes of two's complement
		if float64(p) <= float64(8*n-1)*0.30102999566398 {
			return n
		}
	}
}

func decimalPhysical(p int) parquet.Type {
	switch {
	case p <= 9:
		return parquet.Int32Type
	case p <= 18:
		return parquet.Int64Type
	}
	return parquet.FixedLenByteArrayType(decimalBytes(p))
}

// value converts cdcd's Go value v for flat column c into a parquet value.
func (c *pqColumn) value(v any) (parquet.Value, error) {
	def := 1
	if c.required {
		def = 0
	}
	if v == nil {
		if c.required {
			return parquet.Value{}, fmt.Errorf("column %q is required but the value is NULL", c.name)
		}
		return parquet.NullValue().Level(0, 0, c.leaf), nil
	}
	pv, err := primitiveValue(c.typ, v)
	if err != nil {
		return parquet.Value{}, c.valueError(err)
	}
	return pv.Level(0, def, c.leaf), nil
}

// appendTo appends the values of v, column c's value in a row, to row.
func (c *pqColumn) appendTo(row parquet.Row, v any) (parquet.Row, error) {
	if !c.list {
		pv, err := c.value(v)
		return append(row, pv), err
	}
	row, err := c.appendNested(row, c.typ, c.required, v, 0, 0, 0)
	if err != nil {
		return row, c.valueError(err)
	}
	return row, nil
}

// valueError names the column in err; a value refused for good (one with
// no short upper bound) pauses the table.
func (c *pqColumn) valueError(err error) error {
	err = fmt.Errorf("column %q: %w", c.name, err)
	if errors.Is(err, errUnboundable) {
		return refuse(unboundableFix, err)
	}
	return err
}

// appendNested appends the leaf values of v, a value of type t (the
// column's, or a list element's) whose first leaf value gets repetition
// level rep. def counts the defined optional and repeated nodes above t's
// node, depth the repeated ones (the "list" groups).
//
// The levels, as the Dremel encoding has them: a NULL at an optional node
// is one null leaf value with the definition level of its parent; an empty
// list is one null leaf value whose definition level says the list is
// there but its repeated group is not; an element after the first of its
// list repeats at that list's depth. For an optional list<optional int>:
// NULL is (r0,d0), [] is (r0,d1), [NULL] is (r0,d2), [1, NULL, 3] is
// 1(r0,d3) null(r1,d2) 3(r1,d3).
func (c *pqColumn) appendNested(row parquet.Row, t iceberg.Type, required bool, v any, rep, def, depth int) (parquet.Row, error) {
	if v == nil {
		if required {
			if depth > 0 {
				return row, errors.New("a list element is NULL but the elements are required")
			}
			return row, errors.New("the column is required but the value is NULL")
		}
		return append(row, parquet.NullValue().Level(rep, def, c.leaf)), nil
	}
	if !required {
		def++
	}
	l, ok := t.(*iceberg.ListType)
	if !ok {
		pv, err := primitiveValue(t, v)
		if err != nil {
			return row, err
		}
		return append(row, pv.Level(rep, def, c.leaf)), nil
	}
	elems, ok := v.([]any)
	if !ok {
		return row, fmt.Errorf("value %T for %s", v, t)
	}
	if len(elems) == 0 {
		return append(row, parquet.NullValue().Level(rep, def, c.leaf)), nil
	}
	var err error
	for i, e := range elems {
		r := rep
		if i > 0 {
			r = depth + 1
		}
		if row, err = c.appendNested(row, l.Element, l.ElementRequired, e, r, def+1, depth+1); err != nil {
			return row, err
		}
	}
	return row, nil
}

// primitiveValue converts cdcd's Go value v (never nil) of a primitive
// Iceberg type into a parquet value (levels unset).
func primitiveValue(typ iceberg.Type, v any) (parquet.Value, error) {
	bad := func() (parquet.Value, error) {
		return parquet.Value{}, fmt.Errorf("value %T for a %s column", v, typ)
	}
	switch t := typ.(type) {
	case iceberg.BooleanType:
		b, ok := v.(bool)
		if !ok {
			return bad()
		}
		return parquet.BooleanValue(b), nil
	case iceberg.Int32Type:
		switch n := v.(type) {
		case int64:
			return parquet.Int32Value(int32(n)), nil
		case int32:
			return parquet.Int32Value(n), nil
		}
		return bad()
	case iceberg.Int64Type:
		n, ok := v.(int64)
		if !ok {
			return bad()
		}
		return parquet.Int64Value(n), nil
	case iceberg.Float32Type:
		f, ok := v.(float32)
		if !ok {
			return bad()
		}
		return parquet.FloatValue(f), nil
	case iceberg.Float64Type:
		switch f := v.(type) {
		case float64:
			return parquet.DoubleValue(f), nil
		case float32:
			return parquet.DoubleValue(float64(f)), nil
		}
		return bad()
	case iceberg.DecimalType:
		s, ok := v.(string)
		if !ok {
			return bad()
		}
		if p := t.Precision(); p <= 18 {
			if n, ok := unscaledInt64(s, t.Scale()); ok {
				if p <= 9 {
					return parquet.Int32Value(int32(n)), nil
				}
				return parquet.Int64Value(n), nil
			}
		}
		u, err := unscaledDecimal(s, t.Scale())
		if err != nil {
			return parquet.Value{}, err
		}
		switch p := t.Precision(); {
		case p <= 9:
			return parquet.Int32Value(int32(u.Int64())), nil
		case p <= 18:
			return parquet.Int64Value(u.Int64()), nil
		default:
			return parquet.FixedLenByteArrayValue(fixedTwosComplement(u, decimalBytes(p))), nil
		}
	case iceberg.StringType:
		switch s := v.(type) {
		case string:
			// The writer copies the bytes into its page buffer and never
			// writes to them: no copy of the string is needed.
			b := unsafe.Slice(unsafe.StringData(s), len(s))
			if err := checkBoundable(b); err != nil {
				return parquet.Value{}, err
			}
			return parquet.ByteArrayValue(b), nil
		case schema.IntervalValue:
			// Intervals are ISO 8601 text (icebergType).
			return parquet.ByteArrayValue([]byte(s.String())), nil
		}
		return bad()
	case iceberg.BinaryType:
		b, ok := v.([]byte)
		if !ok {
			return bad()
		}
		if err := checkBoundable(b); err != nil {
			return parquet.Value{}, err
		}
		return parquet.ByteArrayValue(b), nil
	case iceberg.UUIDType:
		u, ok := v.([16]byte)
		if !ok {
			return bad()
		}
		return parquet.FixedLenByteArrayValue(u[:]), nil
	case iceberg.DateType:
		d, ok := v.(int32)
		if !ok {
			return bad()
		}
		return parquet.Int32Value(d), nil
	case iceberg.TimeType, iceberg.TimestampType, iceberg.TimestampTzType:
		n, ok := v.(int64)
		if !ok {
			return bad()
		}
		return parquet.Int64Value(n), nil
	}
	return parquet.Value{}, fmt.Errorf("no parquet conversion for %s", typ)
}

// unscaledDecimal parses exact decimal text at scale (never rounding).
func unscaledDecimal(s string, scale int) (*big.Int, error) {
	neg := strings.HasPrefix(s, "-")
	t := strings.TrimLeft(s, "+-")
	ip, frac, _ := strings.Cut(t, ".")
	frac = strings.TrimRight(frac, "0")
	if len(frac) > scale {
		return nil, fmt.Errorf("decimal %q has more than %d fractional digits", s, scale)
	}
	u, ok := new(big.Int).SetString(ip+frac+strings.Repeat("0", scale-len(frac)), 10)
	if !ok {
		return nil, fmt.Errorf("decimal %q is not a number", s)
	}
	if neg {
		u.Neg(u)
	}
	return u, nil
}

// unscaledInt64 is unscaledDecimal for the plain decimal texts whose
// unscaled value has at most 18 digits, without a big.Int; false for
// anything else (unscaledDecimal then decides). The same as schema's
// encoder's fast path.
func unscaledInt64(s string, scale int) (int64, bool) {
	i, neg := 0, false
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		neg, i = s[i] == '-', i+1
	}
	var v int64
	digits, frac, dot := 0, 0, false
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.' && !dot:
			dot = true
		case c >= '0' && c <= '9':
			if dot {
				frac++
			}
			digits++
			v = v*10 + int64(c-'0')
		default:
			return 0, false
		}
	}
	if digits == 0 || frac > scale || digits+scale-frac > 18 {
		return 0, false
	}
	for ; frac < scale; frac++ {
		v *= 10
	}
	if neg {
		v = -v
	}
	return v, true
}

// fixedTwosComplement renders u big-endian in exactly n bytes.
func fixedTwosComplement(u *big.Int, n int) []byte {
	b := make([]byte, n)
	if u.Sign() >= 0 {
		u.FillBytes(b)
		return b
	}
	m := new(big.Int).Add(u, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	m.FillBytes(b)
	return b
}

// dataFileWriter writes one Parquet data file and, on finish, returns its
// DataFile. newDataFileWriter buffers the file in memory (small files: a
// delete file); streamDataFile writes it to its place as it goes, so a
// large file (a compaction's, a big commit's) never sits in memory whole.
type dataFileWriter struct {
	fs   *fileSchema
	buf  bytes.Buffer // in memory; or, streaming, the writer's sink:
	out  icebergio.FileWriter
	tail *tailWriter
	path string
	w    *parquet.Writer
	pw   *pqWriter // instead of w: fs.plan's files
	rows int64
	// Rows go to parquet-go a column at a time: pending[leaf] holds the
	// values of leaf column leaf of the npending rows not yet handed over,
	// and writePending hands each column's to its ColumnWriter (cols) in
	// one call, every writeBatchRows rows or writeBatchBytes of byte-array
	// values (pendingBytes); parquet-go's row API (WriteRows) would copy
	// every value once more, row by row into per-column slices of its own.
	// groupRows counts the rows handed over into the open row group, which
	// writePending closes at rowGroupRows (parquet-go counts only rows that
	// come through WriteRows).
	cols         []*parquet.ColumnWriter
	pending      [][]parquet.Value
	npending     int
	pendingBytes int
	groupRows    int
	starts       []int // add's scratch: each leaf's values before the row
}

// writeBatchRows and writeBatchBytes bound the rows handed to parquet-go
// at once. parquet-go closes a page only between calls that hand it
// values (WriteRowValues; its WriteRows cuts a call into chunks of 64
// rows), so the bytes of one batch are what a page can hold beyond its
// target size; readers refuse page headers over 4 MiB (arrow-go), so a
// batch of large values is cut short. At 64 rows a file is byte for byte
// the one parquet-go's WriteRows makes of the same batches
// (TestColumnWritesMatchWriteRows).
const (
	writeBatchRows  = 64
	writeBatchBytes = 64 << 10
)

// rowGroupRows bounds a row group. The row groups' offsets become the data
// file's split offsets (iceberg-go reads them from the footer), so a reader
// can split a large file — a compaction's — into ranges read in parallel
// (see readSplitTargetSize); and the writer holds one row group's column
// chunks in memory, so smaller groups cost less memory.
const rowGroupRows = 128 << 10

// writerOptions configure every data file: pages of about 256 KiB (a page
// holds at least one value, so one larger value makes a page of its own);
// row groups of rowGroupRows; the column index keeps the bounds the pages
// give (parquet-go would cut them to 16 bytes, and its cut maximum of an
// all-0xFF prefix is below the value: see parquet_bounds.go); no
// statistics in the page headers. Those are superseded by the column
// index (which holds the same bounds a page, and is what engines that skip
// pages read); iceberg-go's scan (arrow-go) does not use them. parquet-go
// computed every page's bounds twice to write them (once for the header,
// once for the column index and the chunk's statistics), a min/max pass
// over every text value, about 1% of the sink's CPU in a load
// (docs/internals.md, session 16). The column chunk statistics (Iceberg's
// bounds) and the column index are unchanged (TestNoPageHeaderStatistics).
var writerOptions = []parquet.WriterOption{
	parquet.PageBufferSize(256 << 10),
	parquet.MaxRowsPerRowGroup(rowGroupRows),
	parquet.ColumnIndexSizeLimit(func([]string) int { return maxUpperBound }),
	parquet.DataPageStatistics(false),
}

func newDataFileWriter(fs *fileSchema) *dataFileWriter {
	d := &dataFileWriter{fs: fs}
	d.open(&d.buf)
	return d
}

// open starts the Parquet writer into out and the column batches.
func (d *dataFileWriter) open(out io.Writer) {
	n := len(d.fs.cols)
	if d.fs.plan != nil {
		d.pw = newPQWriter(d.fs.plan, out)
	} else {
		d.w = parquet.NewWriter(out, append([]parquet.WriterOption{d.fs.pq}, writerOptions...)...)
		d.cols = d.w.ColumnWriters()
		n = len(d.cols)
	}
	d.pending = make([][]parquet.Value, n)
	for i := range d.pending {
		d.pending[i] = make([]parquet.Value, 0, writeBatchRows)
	}
	d.starts = make([]int, n)
}

// streamDataFile creates path and writes the file into it as rows come.
// On failure call abort, which removes what was written.
func streamDataFile(fs *fileSchema, wfs icebergio.WriteFileIO, path string) (*dataFileWriter, error) {
	out, err := wfs.Create(path)
	if err != nil {
		return nil, fmt.Errorf("iceberg: create %s: %w", path, err)
	}
	d := &dataFileWriter{fs: fs, out: out, tail: &tailWriter{w: out, keep: tailKeep, last: takeTail()}, path: path}
	d.open(d.tail)
	return d, nil
}

// abort gives up a streamed file and removes it.
func (d *dataFileWriter) abort(wfs icebergio.WriteFileIO) {
	d.pw.release()
	d.pw = nil
	if d.out != nil {
		_ = d.out.Close()
		_ = wfs.Remove(d.path)
		d.out = nil
	}
	d.tail.giveBack()
}

// tailWriter counts what passes to w and keeps the last bytes, where a
// Parquet file's footer is (one longer than that is read back: readFooter).
type tailWriter struct {
	w    io.Writer
	n    int64
	keep int    // tailKeep
	last []byte // the last keep to 2*keep bytes, ending at n
}

// tailKeep is what a tailWriter keeps at least (a variable for tests). A
// commit's data file has a footer of a few KB (about 4 KB for 35,000 rows
// of the benchmark's 8 columns), a compacted 128 MiB file one of tens of
// KB; a longer one is read back from storage. It was 1 MiB: every data
// file a commit wrote kept up to 2 MiB of its own bytes (all of a load
// commit's file) and grew that copy by doubling, 2 MB live and about as
// much garbage a file, twice over once a commit's ranges are written at
// once (writeRows).
var tailKeep = 128 << 10

// tails are tailWriters' buffers (2*tailKeep bytes), kept from file to
// file: a file's tail grew by doubling to its 256 KiB anew for every data
// file (53 of the 890 MB a 1M-row load allocated).
var tails sync.Pool

// takeTail returns an empty tail buffer, a kept one if any.
func takeTail() []byte {
	if b, ok := tails.Get().(*[]byte); ok && cap(*b) >= 2*tailKeep {
		return (*b)[:0]
	}
	return make([]byte, 0, 2*tailKeep)
}

// giveBack hands the tail's buffer back once nothing reads it (the
// footer was parsed: arrow-go's Thrift reader copies what it keeps).
func (t *tailWriter) giveBack() {
	if t == nil || t.last == nil {
		return
	}
	b := t.last[:0]
	t.last = nil
	tails.Put(&b)
}

func (t *tailWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	t.n += int64(n)
	p = p[:n]
	switch {
	case len(p) >= t.keep: // a large page: keep its end only
		t.last = append(t.last[:0], p[len(p)-t.keep:]...)
	case len(t.last)+len(p) > 2*t.keep:
		t.last = append(t.last[:0], t.last[len(t.last)+len(p)-t.keep:]...)
		t.last = append(t.last, p...)
	default:
		t.last = append(t.last, p...)
	}
	return n, err
}

// add writes one row, given in Iceberg field order. The row's values are
// handed to parquet-go with the next rows (at the latest by finish): a
// value that refers to memory (a text, a binary) must not change until
// then. A value parquet-go refuses may so fail a later add or finish.
func (d *dataFileWriter) add(vals []any) error {
	for leaf, p := range d.pending {
		d.starts[leaf] = len(p)
	}
	for i := range d.fs.cols {
		c := &d.fs.cols[i]
		p, err := c.appendTo(d.pending[c.leaf], vals[i])
		d.pending[c.leaf] = p
		if err != nil {
			for leaf, n := range d.starts {
				d.pending[leaf] = d.pending[leaf][:n]
			}
			return err
		}
	}
	for leaf, p := range d.pending {
		for _, v := range p[d.starts[leaf]:] {
			if k := v.Kind(); k == parquet.ByteArray || k == parquet.FixedLenByteArray {
				d.pendingBytes += len(v.ByteArray())
			}
		}
	}
	return d.added()
}

// added counts the row whose values were appended to pending.
func (d *dataFileWriter) added() error {
	d.npending++
	d.rows++
	if d.npending >= writeBatchRows || d.pendingBytes >= writeBatchBytes || d.groupRows+d.npending >= rowGroupRows {
		return d.writePending()
	}
	return nil
}

// writePending hands the pending rows to parquet-go, each column's values
// to its ColumnWriter, which copies them into its column buffer (and cuts
// a page when the buffer is over the page size); then closes the row
// group when it holds rowGroupRows rows.
func (d *dataFileWriter) writePending() error {
	if d.npending == 0 {
		return nil
	}
	for leaf, p := range d.pending {
		var err error
		if d.pw != nil {
			err = d.pw.writeBatch(leaf, p)
		} else {
			_, err = d.cols[leaf].WriteRowValues(p)
		}
		d.pending[leaf] = p[:0]
		if err != nil {
			return fmt.Errorf("iceberg: write parquet column %d: %w", leaf, err)
		}
	}
	d.groupRows += d.npending
	d.npending, d.pendingBytes = 0, 0
	if d.groupRows >= rowGroupRows {
		rows := d.groupRows
		d.groupRows = 0
		if d.pw != nil {
			if err := d.pw.flushRowGroup(rows); err != nil {
				return fmt.Errorf("iceberg: write parquet row group: %w", err)
			}
			return nil
		}
		if err := d.w.Flush(); err != nil {
			return fmt.Errorf("iceberg: write parquet row group: %w", err)
		}
	}
	return nil
}

// size is the bytes written so far (a lower bound before the last pages flush).
func (d *dataFileWriter) size() int {
	if d.tail != nil {
		return int(d.tail.n)
	}
	return d.buf.Len()
}

// finish closes the file, stores it at path and builds its DataFile with
// column statistics read from the footer.
func (d *dataFileWriter) finish(wfs icebergio.WriteFileIO, path string, tbl *table.Table, partition map[int]any) (iceberg.DataFile, error) {
	return d.finishAs(wfs, path, tbl, iceberg.EntryContentData, nil, partition)
}

// finishAs is finish for any content kind (data or position deletes). A
// streamed file that cannot be finished is removed.
func (d *dataFileWriter) finishAs(wfs icebergio.WriteFileIO, path string, tbl *table.Table, content iceberg.ManifestEntryContent, ref *string, partition ...map[int]any) (_ iceberg.DataFile, err error) {
	var part map[int]any
	if len(partition) > 0 {
		part = partition[0]
	}
	if err := d.writePending(); err != nil {
		d.abort(wfs)
		return nil, err
	}
	if err := d.close(); err != nil {
		d.abort(wfs)
		return nil, fmt.Errorf("iceberg: close parquet: %w", err)
	}
	stored := false // path holds the file: remove it on failure
	defer func() {
		if err != nil && stored {
			_ = wfs.Remove(path)
		}
	}()
	var footer []byte
	var size int64
	if d.out != nil {
		if path != d.path {
			d.abort(wfs)
			return nil, fmt.Errorf("iceberg: data file streamed to %s finished as %s", d.path, path)
		}
		err = d.out.Close()
		d.out, stored = nil, true
		if err != nil {
			return nil, fmt.Errorf("iceberg: store %s: %w", path, err)
		}
		size = d.tail.n
		footer, err = parquetFooter(d.tail.last, size)
		if errors.Is(err, errFooterBeyondTail) {
			footer, err = readFooter(wfs, path, size)
		}
	} else {
		size = int64(d.buf.Len())
		footer, err = parquetFooter(d.buf.Bytes(), size)
	}
	if err != nil {
		return nil, fmt.Errorf("iceberg: %s: %w", path, err)
	}
	md, err := metadata.NewFileMetaData(footer, nil)
	d.tail.giveBack() // footer is read: md holds copies
	if err != nil {
		return nil, fmt.Errorf("iceberg: parse parquet footer of %s: %w", path, err)
	}
	if d.tail == nil {
		stored = true
		if err := wfs.WriteFile(path, d.buf.Bytes()); err != nil {
			return nil, fmt.Errorf("iceberg: store %s: %w", path, err)
		}
	}
	props := tbl.Properties()
	if content == iceberg.EntryContentPosDeletes {
		// Exact file_path bounds: a compaction removes a delete file once
		// no live data file falls between them (see obsoletePosDeletes).
		props = maps.Clone(props)
		if props == nil {
			props = iceberg.Properties{}
		}
		props[table.MetricsModeColumnConfPrefix+".file_path"] = "full"
	}
	args := table.DataFileArgs{
		Schema: d.fs.ice, Spec: tbl.Spec(), Format: iceberg.ParquetFile, Metadata: md,
		FilePath: path, FileSize: size, Content: content,
		PartitionValues: part, Properties: props,
		FormatVersion: tbl.Metadata().Version(), ReferencedDataFile: ref,
	}
	if content == iceberg.EntryContentData {
		args.SortOrderID = tbl.SortOrder().OrderID()
	}
	return table.DataFileFromMetadata(args)
}

// close writes the rest of the file: the last row group, the footer.
func (d *dataFileWriter) close() error {
	if d.pw == nil {
		return d.w.Close()
	}
	err := d.pw.close(d.groupRows)
	d.groupRows = 0
	d.pw.release()
	d.pw = nil
	return err
}

// errFooterBeyondTail: the footer starts before the bytes at hand.
var errFooterBeyondTail = errors.New("parquet footer starts before the bytes kept")

// parquetFooter returns the Thrift footer of a complete Parquet file of
// size bytes, given the file or its tail.
func parquetFooter(tail []byte, size int64) ([]byte, error) {
	if len(tail) < 8 || size < 12 || string(tail[len(tail)-4:]) != "PAR1" {
		return nil, errors.New("not a complete parquet file")
	}
	n := int64(binary.LittleEndian.Uint32(tail[len(tail)-8:]))
	if n <= 0 || n > size-12 {
		return nil, fmt.Errorf("bad parquet footer length %d in a file of %d bytes", n, size)
	}
	if n > int64(len(tail))-8 {
		return nil, errFooterBeyondTail
	}
	return tail[int64(len(tail))-8-n : len(tail)-8], nil
}

// readFooter reads the footer of the Parquet file at path, of size bytes.
func readFooter(fs icebergio.IO, path string, size int64) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var end [8]byte
	if _, err := f.ReadAt(end[:], size-8); err != nil {
		return nil, fmt.Errorf("read parquet footer length: %w", err)
	}
	footer, err := parquetFooter(end[:], size)
	if !errors.Is(err, errFooterBeyondTail) {
		return footer, err
	}
	n := int64(binary.LittleEndian.Uint32(end[:4]))
	footer = make([]byte, n)
	if _, err := f.ReadAt(footer, size-8-n); err != nil {
		return nil, fmt.Errorf("read parquet footer: %w", err)
	}
	return footer, nil
}
