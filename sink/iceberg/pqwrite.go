package iceberg

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"

	"github.com/apache/iceberg-go"
	"github.com/klauspost/compress/s2"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// A commit's data files whose columns are all flat primitives (no list,
// no fixed-length byte array: uuids and decimals over 18 digits) are
// written by pqWriter, an encoder of our own, instead of parquet-go's
// writer. It takes the same column batches (dataFileWriter.pending, the
// rowCodec's or the generic path's parquet.Values) and writes what
// parquet-go writes for them, minus its generality: one PLAIN data page
// (v2) after another, Snappy (s2's standard encoder: commitCodec) on the
// values, definition levels RLE/bit-packed and uncompressed, a CRC a page,
// the column chunk statistics (Iceberg's bounds: min/max in Parquet's
// orderings, byte arrays cut to statsPrefix as boundedPage cuts them,
// null count), the column and offset indexes, row groups of
// rowGroupRows, and the footer: parquet-go's format structs, its Thrift
// encoder, and the schema elements parquet-go writes for the file schema
// (taken from an empty file it writes, so field ids and logical and
// converted types are its own). Per value it is an append of the value's
// bytes and a compare or two; parquet-go copied each value into its
// column buffer, again into a page, computed bounds per page twice, and
// allocated its buffers anew per file (pqWriters are pooled).
//
// The file layout, as parquet-go lays it out:
//
//	"PAR1"
//	row group 0: column 0's pages, column 1's pages, ...   (page: header, def levels, snappy values)
//	row group 1: ...
//	column indexes (row group by row group, column by column)
//	offset indexes (the same order)
//	footer (FileMetaData, Thrift compact), its length (uint32 LE), "PAR1"

// pqPageSize is the uncompressed bytes a page holds before it is cut
// (writerOptions' PageBufferSize: a page is cut after the batch that
// fills it).
const pqPageSize = 256 << 10

// pqPlan is how pqWriter writes the files of one file schema: nil when it
// cannot (fileSchema.plan).
type pqPlan struct {
	leaves    []pqLeaf // in leaf order
	schema    []format.SchemaElement
	orders    []format.ColumnOrder
	createdBy string
}

// pqLeaf is one leaf column.
type pqLeaf struct {
	kind     parquet.Kind
	required bool
	bounded  bool // byte arrays: bounds cut to statsPrefix
	text     bool // ... at a character boundary
	path     []string
}

// newPQPlan is the plan of fs's files, or nil when a column is not a flat
// primitive pqWriter writes. The schema elements are parquet-go's own,
// read back from an empty file it writes for fs.
func newPQPlan(fs *fileSchema) (*pqPlan, error) {
	p := &pqPlan{}
	for _, fi := range fs.order {
		c := &fs.cols[fi]
		if c.list {
			return nil, nil
		}
		leaf := pqLeaf{required: c.required, path: []string{c.name}}
		switch c.typ.(type) {
		case iceberg.BooleanType:
			leaf.kind = parquet.Boolean
		case iceberg.Int32Type, iceberg.DateType:
			leaf.kind = parquet.Int32
		case iceberg.Int64Type, iceberg.TimeType, iceberg.TimestampType, iceberg.TimestampTzType:
			leaf.kind = parquet.Int64
		case iceberg.Float32Type:
			leaf.kind = parquet.Float
		case iceberg.Float64Type:
			leaf.kind = parquet.Double
		case iceberg.StringType:
			leaf.kind, leaf.bounded, leaf.text = parquet.ByteArray, true, true
		case iceberg.BinaryType:
			leaf.kind, leaf.bounded = parquet.ByteArray, true
		case iceberg.DecimalType:
			switch decimalPhysical(c.typ.(iceberg.DecimalType).Precision()) {
			case parquet.Int32Type:
				leaf.kind = parquet.Int32
			case parquet.Int64Type:
				leaf.kind = parquet.Int64
			default:
				return nil, nil
			}
		default:
			return nil, nil
		}
		p.leaves = append(p.leaves, leaf)
	}
	var buf bytes.Buffer
	w := parquet.NewWriter(&buf, append([]parquet.WriterOption{fs.pq}, writerOptions...)...)
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("iceberg: parquet schema template: %w", err)
	}
	footer, err := parquetFooter(buf.Bytes(), int64(buf.Len()))
	if err != nil {
		return nil, fmt.Errorf("iceberg: parquet schema template: %w", err)
	}
	var md format.FileMetaData
	if err := thrift.Unmarshal(new(thrift.CompactProtocol), footer, &md); err != nil {
		return nil, fmt.Errorf("iceberg: parquet schema template: %w", err)
	}
	if len(md.Schema) != len(p.leaves)+1 {
		return nil, fmt.Errorf("iceberg: parquet schema template has %d elements for %d leaves", len(md.Schema), len(p.leaves))
	}
	for i, l := range p.leaves {
		e := md.Schema[i+1]
		if e.Name != l.path[0] || e.Type.V != format.Type(l.kind) {
			return nil, fmt.Errorf("iceberg: parquet schema template: element %d is %s %v, want %s %v", i+1, e.Name, e.Type.V, l.path[0], l.kind)
		}
	}
	p.schema, p.orders, p.createdBy = md.Schema, md.ColumnOrders, md.CreatedBy
	return p, nil
}

// pqWriter writes one Parquet file (see above). Values are appended to
// the open page of their column; a page is cut after the batch that
// fills it, into the column's chunk of the open row group; a row group
// goes to out whole, column by column, when dataFileWriter closes it.
type pqWriter struct {
	plan   *pqPlan
	out    io.Writer
	off    int64 // bytes written to out
	err    error
	rows   int64
	cols   []pqCol
	groups []pqGroup
	hdr    bytes.Buffer
	enc    *thrift.Encoder
	comp   []byte // compressed values' scratch
	levels []byte // encoded definition levels' scratch
	rowAt  []int  // each column's len(vals) at the open row's start (beginRow)
}

// pqGroup is a written row group and its columns' indexes.
type pqGroup struct {
	rg      format.RowGroup
	colIdx  []format.ColumnIndex
	offsIdx []format.OffsetIndex
}

// pqCol is one column: its open page and the open row group's chunk.
type pqCol struct {
	leaf pqLeaf
	// The open page: PLAIN values (booleans one byte each until the page
	// is cut), one definition level a value (optional columns), the page's
	// bounds: typed, or (byte arrays) the offsets of the values in vals.
	vals         []byte
	defs         []byte
	n, nulls     int
	has          bool // a non-null, non-NaN value bounds the page
	nan          bool // float pages: a NaN was seen (bounds when only NaNs)
	ilo, ihi     int64
	flo, fhi     float64
	blo, bhi     [2]int // byte arrays: [start, end) in vals
	plo, phi     uint64 // byte arrays: the bounds' first 8 bytes (prefix8)
	unencodedLen int64  // byte arrays: the values' bytes in the row group
	// The open row group's chunk: its pages, encoded, and their index.
	chunk      []byte
	firstRows  []int64 // each page's first row in the row group
	pageOffs   []int64 // each page's offset in chunk
	pageSizes  []int32 // each page's bytes with its header
	nullPages  []bool
	nullCounts []int64
	mins, maxs [][]byte
	rowsIn     int64 // rows in the chunk's pages
	uncomp     int64 // bytes, pages uncompressed (headers included)
	nulls64    int64
	statMin    []byte // chunk bounds (PLAIN), nil when none
	statMax    []byte
}

// pqWriters keeps released writers for the next files: a free list, not a
// sync.Pool, whose contents every other collection drops. Under the
// daemon's memory limit the collector runs about as often as a table
// commits (a MariaDB stream's ~80 commits met ~70 collections), so the
// pooled writers were mostly gone by the next commit and every file grew
// its columns' pages and chunks again: 111 of the 1,422 MB the streaming
// phase of `cdcd bench -source mariadb` allocated (BENCHMARKS.md, session
// 30). It holds pqFreeMax writers, each trimmed to pqKeep, so what it
// keeps alive is bounded.
var pqWriters = make(chan *pqWriter, pqFreeMax)

// pqFreeMax is how many released writers pqWriters keeps: as many as a
// table writes at once (maxWriteParts).
const pqFreeMax = maxWriteParts

// newPQWriter starts a file of plan into out, with a pooled writer's buffers.
func newPQWriter(plan *pqPlan, out io.Writer) *pqWriter {
	var w *pqWriter
	select {
	case w = <-pqWriters:
	default:
	}
	if w == nil {
		w = &pqWriter{}
		w.enc = thrift.NewEncoder(new(thrift.CompactProtocol).NewWriter(&w.hdr))
	}
	w.plan, w.out, w.off, w.err, w.rows, w.groups = plan, out, 0, nil, 0, nil
	if cap(w.cols) < len(plan.leaves) {
		w.cols = append(w.cols[:cap(w.cols)], make([]pqCol, len(plan.leaves)-cap(w.cols))...)
	}
	w.cols = w.cols[:len(plan.leaves)]
	for i := range w.cols {
		c := &w.cols[i]
		c.leaf = plan.leaves[i]
		c.resetPage()
		c.resetChunk()
		c.unencodedLen = 0
	}
	w.write([]byte("PAR1"))
	return w
}

// pqKeep bounds what a pooled writer keeps for the next file: its
// buffers' capacity in all (pages, chunks, scratch). A writer that held
// more (a row group of wide values, a page of one large value) gives its
// largest buffers up first. So the pool holds at most pqKeep a writer
// that was in use at once (maxWriteParts a table being written), however
// large the files were: before this bound a writer kept each column's
// chunk up to 16 MiB (and its page buffer, whatever one value had grown
// it to), so a pooled writer of many columns could keep a row group of
// every one, tens of MB, alive until two collections had passed.
const pqKeep = 4 << 20

// pqChunkKeep bounds a column chunk's buffer kept from one row group to
// the next within a file (a row group's chunk is written out whole by
// flushRowGroup and its buffer reused): one row group of large values
// does not hold its memory for the rest of the file.
const pqChunkKeep = 8 << 20

// release hands the writer's buffers back for another file.
func (w *pqWriter) release() {
	if w == nil {
		return
	}
	w.out, w.plan, w.groups = nil, nil, nil
	w.trim()
	select {
	case pqWriters <- w:
	default: // the list is full: the collector takes this one
	}
}

// trim gives up what release must not keep (pqKeep).
func (w *pqWriter) trim() {
	kept := cap(w.comp) + cap(w.levels)
	if kept > pqKeep/2 {
		w.comp, w.levels, kept = nil, nil, 0
	}
	for i := range w.cols {
		c := &w.cols[i]
		c.mins, c.maxs, c.statMin, c.statMax = nil, nil, nil, nil // handed to a footer
		c.firstRows, c.pageOffs, c.pageSizes = nil, nil, nil
		if cap(c.vals) > 2*pqPageSize {
			c.vals = nil // a page of one large value
		}
		if cap(c.defs) > 2*pqPageSize {
			c.defs = nil
		}
		if kept+cap(c.vals)+cap(c.defs) > pqKeep {
			c.vals, c.defs = nil, nil
		}
		kept += cap(c.vals) + cap(c.defs)
	}
	for i := range w.cols { // chunks last: the pages' buffers are the ones every file needs
		c := &w.cols[i]
		if kept+cap(c.chunk) > pqKeep {
			c.chunk = nil
		}
		kept += cap(c.chunk)
	}
}

// pqKept is the bytes a writer's buffers hold (tests: trim's bound).
func (w *pqWriter) pqKept() int {
	n := cap(w.comp) + cap(w.levels)
	for i := range w.cols {
		c := &w.cols[i]
		n += cap(c.vals) + cap(c.defs) + cap(c.chunk) + 8*(cap(c.firstRows)+cap(c.pageOffs)) + 4*cap(c.pageSizes)
	}
	return n
}

func (c *pqCol) resetPage() {
	c.vals, c.defs = c.vals[:0], c.defs[:0]
	c.n, c.nulls, c.has, c.nan = 0, 0, false, false
}

func (c *pqCol) resetChunk() {
	c.chunk = c.chunk[:0]
	c.firstRows, c.pageOffs, c.pageSizes = c.firstRows[:0], c.pageOffs[:0], c.pageSizes[:0]
	c.nullPages, c.nullCounts = nil, nil // kept by the column index
	c.mins, c.maxs = nil, nil
	c.rowsIn, c.uncomp, c.nulls64 = 0, 0, 0
	c.statMin, c.statMax = nil, nil
	c.unencodedLen = 0
}

func (w *pqWriter) write(b []byte) {
	if w.err != nil {
		return
	}
	n, err := w.out.Write(b)
	w.off += int64(n)
	w.err = err
}

// errPQValue: a value whose kind is not its column's (a bug: the codec and
// the generic path make the column's kind).
var errPQValue = errors.New("iceberg: parquet value of the wrong kind for its column")

// writeBatch appends the values of a batch of rows, one per row, to
// column leaf's open page, and cuts the page when it is full.
func (w *pqWriter) writeBatch(leaf int, vals []parquet.Value) error {
	c := &w.cols[leaf]
	for i := range vals {
		v := &vals[i]
		if v.IsNull() {
			if c.leaf.required {
				return fmt.Errorf("iceberg: column %q is required but the value is NULL", c.leaf.path[0])
			}
			c.defs = append(c.defs, 0)
			c.nulls++
			c.n++
			continue
		}
		if v.Kind() != c.leaf.kind {
			return fmt.Errorf("%w: %v in %q (%v)", errPQValue, v.Kind(), c.leaf.path[0], c.leaf.kind)
		}
		if !c.leaf.required {
			c.defs = append(c.defs, 1)
		}
		c.n++
		switch c.leaf.kind {
		case parquet.Int64:
			x := v.Int64()
			c.vals = binary.LittleEndian.AppendUint64(c.vals, uint64(x))
			c.boundInt(x)
		case parquet.Int32:
			x := v.Int32()
			c.vals = binary.LittleEndian.AppendUint32(c.vals, uint32(x))
			c.boundInt(int64(x))
		case parquet.ByteArray:
			b := v.ByteArray()
			c.vals = binary.LittleEndian.AppendUint32(c.vals, uint32(len(b)))
			at := len(c.vals)
			c.vals = append(c.vals, b...)
			c.unencodedLen += int64(len(b))
			c.boundBytes(at, len(c.vals))
		case parquet.Double:
			x := v.Double()
			c.vals = binary.LittleEndian.AppendUint64(c.vals, math.Float64bits(x))
			c.boundFloat(x)
		case parquet.Float:
			x := v.Float()
			c.vals = binary.LittleEndian.AppendUint32(c.vals, math.Float32bits(x))
			c.boundFloat(float64(x))
		case parquet.Boolean:
			x := int64(0)
			if v.Boolean() {
				x = 1
			}
			c.vals = append(c.vals, byte(x))
			c.boundInt(x)
		}
	}
	if len(c.vals)+len(c.defs) >= pqPageSize {
		w.cutPage(c)
	}
	return nil
}

func (c *pqCol) boundInt(x int64) {
	switch {
	case !c.has:
		c.ilo, c.ihi, c.has = x, x, true
	case x < c.ilo:
		c.ilo = x
	case x > c.ihi:
		c.ihi = x
	}
}

// boundFloat leaves NaNs out of the bounds, as parquet-go does (the bounds
// of a page of NaNs only are NaN).
func (c *pqCol) boundFloat(x float64) {
	switch {
	case x != x:
		c.nan = true
	case !c.has:
		c.flo, c.fhi, c.has = x, x, true
	case x < c.flo:
		c.flo = x
	case x > c.fhi:
		c.fhi = x
	}
}

// boundBytes widens the page's bounds to the byte array vals[start:end].
// The bounds' first 8 bytes decide most comparisons (a load's labels, ids
// and hashes differ early): bytes.Compare, a call not inlined twice a
// value, was 0.21 of a 5M-row load's 18.2 CPU-s. Only a value whose 8-byte
// prefix equals a bound's is compared whole.
func (c *pqCol) boundBytes(start, end int) {
	v := c.vals[start:end]
	p := prefix8(v)
	switch {
	case !c.has:
		c.blo, c.bhi, c.has = [2]int{start, end}, [2]int{start, end}, true
		c.plo, c.phi = p, p
	case p < c.plo || p == c.plo && bytes.Compare(v, c.vals[c.blo[0]:c.blo[1]]) < 0:
		c.blo, c.plo = [2]int{start, end}, p
	case p > c.phi || p == c.phi && bytes.Compare(v, c.vals[c.bhi[0]:c.bhi[1]]) > 0:
		c.bhi, c.phi = [2]int{start, end}, p
	}
}

// prefix8 is v's first 8 bytes as a big-endian number, zeros past v's end.
// Two arrays' prefixes order them as bytes.Compare does wherever they
// differ: at the first byte they differ in, either both arrays have a
// byte, or one has ended at or before it (a zero there) and is a proper
// prefix of the other, whose byte there is then not zero. Equal prefixes
// decide nothing ("a" and "a\x00" have the same).
func prefix8(v []byte) uint64 {
	if len(v) >= 8 {
		return binary.BigEndian.Uint64(v)
	}
	var b [8]byte
	copy(b[:], v)
	return binary.BigEndian.Uint64(b[:])
}

// pageBounds are the open page's bounds, PLAIN encoded (fresh slices);
// ok false when the page has none (NULLs only).
func (c *pqCol) pageBounds() (lo, hi []byte, ok bool) {
	switch c.leaf.kind {
	case parquet.Int64:
		if c.has {
			return binary.LittleEndian.AppendUint64(nil, uint64(c.ilo)), binary.LittleEndian.AppendUint64(nil, uint64(c.ihi)), true
		}
	case parquet.Int32:
		if c.has {
			return binary.LittleEndian.AppendUint32(nil, uint32(c.ilo)), binary.LittleEndian.AppendUint32(nil, uint32(c.ihi)), true
		}
	case parquet.Boolean:
		if c.has {
			return []byte{byte(c.ilo)}, []byte{byte(c.ihi)}, true
		}
	case parquet.Double, parquet.Float:
		lo, hi := c.flo, c.fhi
		if !c.has {
			if !c.nan {
				return nil, nil, false
			}
			lo, hi = math.NaN(), math.NaN()
		}
		if c.leaf.kind == parquet.Float {
			return binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(lo))), binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(hi))), true
		}
		return binary.LittleEndian.AppendUint64(nil, math.Float64bits(lo)), binary.LittleEndian.AppendUint64(nil, math.Float64bits(hi)), true
	case parquet.ByteArray:
		if c.has {
			lo, hi := c.vals[c.blo[0]:c.blo[1]], c.vals[c.bhi[0]:c.bhi[1]]
			if c.leaf.bounded && len(lo) > statsPrefix {
				lo = lowerBound(lo, c.leaf.text)
			} else {
				lo = append([]byte{}, lo...)
			}
			if c.leaf.bounded && len(hi) > statsPrefix {
				hi = append([]byte{}, upperBound(hi, c.leaf.text)...)
			} else {
				hi = append([]byte{}, hi...)
			}
			return lo, hi, true
		}
	}
	return nil, nil, false
}

// compareBound orders two PLAIN bounds of kind k (Parquet's orderings:
// signed integers, floats, false before true, unsigned bytes).
func compareBound(k parquet.Kind, a, b []byte) int {
	switch k {
	case parquet.Int64:
		x, y := int64(binary.LittleEndian.Uint64(a)), int64(binary.LittleEndian.Uint64(b))
		return cmpOrdered(x, y)
	case parquet.Int32:
		x, y := int32(binary.LittleEndian.Uint32(a)), int32(binary.LittleEndian.Uint32(b))
		return cmpOrdered(x, y)
	case parquet.Double:
		x, y := math.Float64frombits(binary.LittleEndian.Uint64(a)), math.Float64frombits(binary.LittleEndian.Uint64(b))
		return cmpOrdered(x, y)
	case parquet.Float:
		x, y := math.Float32frombits(binary.LittleEndian.Uint32(a)), math.Float32frombits(binary.LittleEndian.Uint32(b))
		return cmpOrdered(x, y)
	}
	return bytes.Compare(a, b)
}

func cmpOrdered[T int32 | int64 | float32 | float64](x, y T) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// cutPage encodes the open page of c into its chunk.
func (w *pqWriter) cutPage(c *pqCol) {
	if c.n == 0 {
		return
	}
	// Definition levels: RLE/bit-packed hybrid of bit width 1, without
	// the length prefix (a v2 page gives their length in its header).
	w.levels = w.levels[:0]
	if !c.leaf.required {
		switch c.nulls {
		case 0, c.n: // one RLE run
			w.levels = binary.AppendUvarint(w.levels, uint64(c.n)<<1)
			w.levels = append(w.levels, c.defs[0])
		default: // one bit-packed run of groups of 8 levels
			groups := (c.n + 7) / 8
			w.levels = binary.AppendUvarint(w.levels, uint64(groups)<<1|1)
			at := len(w.levels)
			w.levels = append(w.levels, make([]byte, groups)...)
			for i, d := range c.defs {
				w.levels[at+i/8] |= d << (i % 8)
			}
		}
	}
	vals := c.vals
	if c.leaf.kind == parquet.Boolean { // bit-packed, least significant bit first
		packed := make([]byte, (len(vals)+7)/8)
		for i, b := range vals {
			packed[i/8] |= b << (i % 8)
		}
		vals = packed
	}
	w.comp = s2.EncodeSnappy(w.comp[:cap(w.comp)], vals)
	crc := crc32.Update(crc32.ChecksumIEEE(w.levels), crc32.IEEETable, w.comp)
	hdr := format.PageHeader{
		Type:                 format.DataPageV2,
		UncompressedPageSize: int32(len(w.levels) + len(vals)),
		CompressedPageSize:   int32(len(w.levels) + len(w.comp)),
		CRC:                  int32(crc),
		DataPageHeaderV2: thrift.New(format.DataPageHeaderV2{
			NumValues:                  int32(c.n),
			NumNulls:                   int32(c.nulls),
			NumRows:                    int32(c.n),
			Encoding:                   format.Plain,
			DefinitionLevelsByteLength: int32(len(w.levels)),
			IsCompressed:               thrift.New(true),
		}),
	}
	w.hdr.Reset()
	if err := w.enc.Encode(&hdr); err != nil && w.err == nil {
		w.err = fmt.Errorf("iceberg: encode parquet page header: %w", err)
	}
	c.pageOffs = append(c.pageOffs, int64(len(c.chunk)))
	c.firstRows = append(c.firstRows, c.rowsIn)
	c.chunk = append(c.chunk, w.hdr.Bytes()...)
	c.chunk = append(c.chunk, w.levels...)
	c.chunk = append(c.chunk, w.comp...)
	c.pageSizes = append(c.pageSizes, int32(w.hdr.Len())+hdr.CompressedPageSize)
	c.uncomp += int64(w.hdr.Len()) + int64(hdr.UncompressedPageSize)
	c.rowsIn += int64(c.n)
	c.nulls64 += int64(c.nulls)
	lo, hi, ok := c.pageBounds()
	c.nullPages = append(c.nullPages, c.nulls == c.n)
	c.nullCounts = append(c.nullCounts, int64(c.nulls))
	if !ok {
		lo, hi = []byte{}, []byte{}
	}
	c.mins, c.maxs = append(c.mins, lo), append(c.maxs, hi)
	if ok {
		if c.statMin == nil || compareBound(c.leaf.kind, lo, c.statMin) < 0 {
			c.statMin = lo
		}
		if c.statMax == nil || compareBound(c.leaf.kind, hi, c.statMax) > 0 {
			c.statMax = hi
		}
	}
	c.resetPage()
}

// flushRowGroup writes the open row group (rows rows) to out.
func (w *pqWriter) flushRowGroup(rows int) error {
	if rows == 0 {
		return w.err
	}
	g := pqGroup{
		rg:      format.RowGroup{NumRows: int64(rows), FileOffset: w.off, Ordinal: int16(len(w.groups))},
		colIdx:  make([]format.ColumnIndex, len(w.cols)),
		offsIdx: make([]format.OffsetIndex, len(w.cols)),
	}
	g.rg.Columns = make([]format.ColumnChunk, len(w.cols))
	for i := range w.cols {
		c := &w.cols[i]
		w.cutPage(c)
		if c.rowsIn != int64(rows) {
			return fmt.Errorf("iceberg: parquet column %q has %d values for %d rows", c.leaf.path[0], c.rowsIn, rows)
		}
		start := w.off
		encodings := []format.Encoding{format.Plain}
		var hist []int64
		if !c.leaf.required {
			encodings = append(encodings, format.RLE)
			hist = []int64{c.nulls64, c.rowsIn - c.nulls64}
		}
		md := format.ColumnMetaData{
			Type:                  format.Type(c.leaf.kind),
			Encoding:              encodings,
			PathInSchema:          c.leaf.path,
			Codec:                 format.Snappy,
			NumValues:             c.rowsIn,
			TotalUncompressedSize: c.uncomp,
			TotalCompressedSize:   int64(len(c.chunk)),
			DataPageOffset:        start,
			Statistics:            format.Statistics{NullCount: c.nulls64, MinValue: c.statMin, MaxValue: c.statMax},
			EncodingStats:         []format.PageEncodingStats{{PageType: format.DataPageV2, Encoding: format.Plain, Count: int32(len(c.pageOffs))}},
			SizeStatistics:        format.SizeStatistics{DefinitionLevelHistogram: hist},
		}
		if c.leaf.kind == parquet.ByteArray {
			md.SizeStatistics.UnencodedByteArrayDataBytes = c.unencodedLen
		}
		g.rg.Columns[i] = format.ColumnChunk{MetaData: md}
		g.rg.TotalByteSize += c.uncomp
		g.rg.TotalCompressedSize += int64(len(c.chunk))
		locs := make([]format.PageLocation, len(c.pageOffs))
		for p := range locs {
			locs[p] = format.PageLocation{Offset: start + c.pageOffs[p], CompressedPageSize: c.pageSizes[p], FirstRowIndex: c.firstRows[p]}
		}
		g.offsIdx[i] = format.OffsetIndex{PageLocations: locs}
		g.colIdx[i] = format.ColumnIndex{
			NullPages: c.nullPages, MinValues: c.mins, MaxValues: c.maxs,
			BoundaryOrder: boundaryOrder(c.leaf.kind, c.nullPages, c.mins, c.maxs), NullCounts: c.nullCounts,
		}
		w.write(c.chunk)
		c.resetChunk()
		if cap(c.chunk) > pqChunkKeep {
			c.chunk = nil
		}
	}
	w.groups = append(w.groups, g)
	return w.err
}

// boundaryOrder is the column index's order of the pages' bounds.
func boundaryOrder(k parquet.Kind, null []bool, mins, maxs [][]byte) format.BoundaryOrder {
	asc, desc := true, true
	prev := -1
	for i := range mins {
		if null[i] {
			continue
		}
		if prev >= 0 {
			lo, hi := compareBound(k, mins[prev], mins[i]), compareBound(k, maxs[prev], maxs[i])
			asc = asc && lo <= 0 && hi <= 0
			desc = desc && lo >= 0 && hi >= 0
		}
		prev = i
	}
	switch {
	case asc:
		return format.Ascending
	case desc:
		return format.Descending
	}
	return format.Unordered
}

// close writes the open row group (rows rows), the page indexes and the
// footer.
func (w *pqWriter) close(rows int) error {
	if err := w.flushRowGroup(rows); err != nil {
		return err
	}
	for gi := range w.groups {
		g := &w.groups[gi]
		for i := range g.colIdx {
			g.rg.Columns[i].ColumnIndexOffset = w.off
			g.rg.Columns[i].ColumnIndexLength = int32(w.encode(&g.colIdx[i]))
		}
	}
	for gi := range w.groups {
		g := &w.groups[gi]
		for i := range g.offsIdx {
			g.rg.Columns[i].OffsetIndexOffset = w.off
			g.rg.Columns[i].OffsetIndexLength = int32(w.encode(&g.offsIdx[i]))
		}
	}
	md := format.FileMetaData{
		Version: 2, Schema: w.plan.schema, CreatedBy: w.plan.createdBy, ColumnOrders: w.plan.orders,
		KeyValueMetadata: []format.KeyValue{},
	}
	for gi := range w.groups {
		md.NumRows += w.groups[gi].rg.NumRows
		md.RowGroups = append(md.RowGroups, w.groups[gi].rg)
	}
	n := w.encode(&md)
	w.write(binary.LittleEndian.AppendUint32(nil, uint32(n)))
	w.write([]byte("PAR1"))
	return w.err
}

// encode writes v, Thrift compact, to out and returns its length.
func (w *pqWriter) encode(v any) int {
	w.hdr.Reset()
	if err := w.enc.Encode(v); err != nil && w.err == nil {
		w.err = fmt.Errorf("iceberg: encode parquet metadata: %w", err)
	}
	n := w.hdr.Len()
	w.write(w.hdr.Bytes())
	return n
}

// Rows decoded straight into the page buffers (rowCodec.decodePQ): the
// codec appends each leaf's definition level and PLAIN bytes to its
// column's open page as it reads the Avro, with no parquet.Value between;
// the row is then committed (endRow: the value and null counts, the page
// bounds, the page cut) or, when a later column fails to decode, undone
// (undoRow: every column cut back to the lengths beginRow saved). The
// bounds are only ever updated by endRow, from the values the whole row
// appended, so an undone row leaves no trace in them (a byte array's
// bound is an offset into vals, which an undone row's bytes never back).

// beginRow saves each column's page length before a row is appended.
func (w *pqWriter) beginRow() {
	if cap(w.rowAt) < len(w.cols) {
		w.rowAt = make([]int, len(w.cols))
	}
	w.rowAt = w.rowAt[:len(w.cols)]
	for i := range w.cols {
		w.rowAt[i] = len(w.cols[i].vals)
	}
}

// undoRow cuts every column back to where beginRow found it.
func (w *pqWriter) undoRow() {
	for i := range w.cols {
		c := &w.cols[i]
		c.vals = c.vals[:w.rowAt[i]]
		if !c.leaf.required {
			c.defs = c.defs[:c.n]
		}
	}
}

// endRow commits the row appended since beginRow (one value a column):
// counts it, bounds the pages by its values, cuts the full pages.
func (w *pqWriter) endRow() error {
	for i := range w.cols {
		c := &w.cols[i]
		at := w.rowAt[i]
		if !c.leaf.required {
			if len(c.defs) != c.n+1 {
				return w.rowLenError(c, len(c.defs)-c.n)
			}
			if c.defs[c.n] == 0 {
				c.n++
				c.nulls++
				if len(c.vals) != at {
					return w.rowLenError(c, len(c.vals)-at)
				}
				continue
			}
		}
		c.n++
		v := c.vals[at:]
		switch c.leaf.kind {
		case parquet.Int64:
			if len(v) != 8 {
				return w.rowLenError(c, len(v))
			}
			c.boundInt(int64(binary.LittleEndian.Uint64(v)))
		case parquet.Int32:
			if len(v) != 4 {
				return w.rowLenError(c, len(v))
			}
			c.boundInt(int64(int32(binary.LittleEndian.Uint32(v))))
		case parquet.ByteArray:
			if len(v) < 4 || int(binary.LittleEndian.Uint32(v)) != len(v)-4 {
				return w.rowLenError(c, len(v))
			}
			c.unencodedLen += int64(len(v) - 4)
			c.boundBytes(at+4, len(c.vals))
		case parquet.Double:
			if len(v) != 8 {
				return w.rowLenError(c, len(v))
			}
			c.boundFloat(math.Float64frombits(binary.LittleEndian.Uint64(v)))
		case parquet.Float:
			if len(v) != 4 {
				return w.rowLenError(c, len(v))
			}
			c.boundFloat(float64(math.Float32frombits(binary.LittleEndian.Uint32(v))))
		case parquet.Boolean:
			if len(v) != 1 {
				return w.rowLenError(c, len(v))
			}
			c.boundInt(int64(v[0]))
		}
		if len(c.vals)+len(c.defs) >= pqPageSize {
			w.cutPage(c)
		}
	}
	return nil
}

// rowLenError: a row's value is not one value of its column's kind (a
// bug of the codec). The columns before it are committed: the file is
// failed (w.err), it cannot be finished.
func (w *pqWriter) rowLenError(c *pqCol, n int) error {
	err := fmt.Errorf("iceberg: parquet column %q: %d bytes of %v in a row", c.leaf.path[0], n, c.leaf.kind)
	if w.err == nil {
		w.err = err
	}
	return err
}

// appendValue appends v (its level and PLAIN bytes; no bounds, no count:
// endRow) to column leaf's open page within a row (beginRow).
func (w *pqWriter) appendValue(leaf int, v parquet.Value) error {
	c := &w.cols[leaf]
	if v.IsNull() {
		if c.leaf.required {
			return fmt.Errorf("iceberg: column %q is required but the value is NULL", c.leaf.path[0])
		}
		c.defs = append(c.defs, 0)
		return nil
	}
	if v.Kind() != c.leaf.kind {
		return fmt.Errorf("%w: %v in %q (%v)", errPQValue, v.Kind(), c.leaf.path[0], c.leaf.kind)
	}
	if !c.leaf.required {
		c.defs = append(c.defs, 1)
	}
	switch c.leaf.kind {
	case parquet.Int64:
		c.vals = binary.LittleEndian.AppendUint64(c.vals, uint64(v.Int64()))
	case parquet.Int32:
		c.vals = binary.LittleEndian.AppendUint32(c.vals, uint32(v.Int32()))
	case parquet.ByteArray:
		b := v.ByteArray()
		c.vals = binary.LittleEndian.AppendUint32(c.vals, uint32(len(b)))
		c.vals = append(c.vals, b...)
	case parquet.Double:
		c.vals = binary.LittleEndian.AppendUint64(c.vals, math.Float64bits(v.Double()))
	case parquet.Float:
		c.vals = binary.LittleEndian.AppendUint32(c.vals, math.Float32bits(v.Float()))
	case parquet.Boolean:
		x := byte(0)
		if v.Boolean() {
			x = 1
		}
		c.vals = append(c.vals, x)
	}
	return nil
}
