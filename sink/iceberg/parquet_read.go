package iceberg

import (
	"errors"
	"fmt"
	"io"
	"math/big"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/parquet-go/parquet-go"
)

// parquetFile opens a data file of the table for reading.
func parquetFile(fs icebergio.IO, path string) (*parquet.File, func(), error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("iceberg: open %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	ra, ok := f.(io.ReaderAt)
	if !ok {
		f.Close()
		return nil, nil, fmt.Errorf("iceberg: %s cannot be read at offsets", path)
	}
	pf, err := parquet.OpenFile(ra, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("iceberg: read parquet %s: %w", path, err)
	}
	return pf, func() { f.Close() }, nil
}

// fileColumn is where a field's values are in a data file: its leaf
// column and, for a list, the nodes from the field down to the leaf.
type fileColumn struct {
	leaf  int
	nodes []nodeKind // nil for a flat column
}

// nodeKind is a node's repetition in a file's schema.
type nodeKind byte

const (
	nodeRequired nodeKind = iota
	nodeOptional
	nodeRepeated
)

// columnFor finds field f in a data file: by field id first, by name for
// files written without ids.
func columnFor(pf *parquet.File, f iceberg.NestedField) (fileColumn, bool) {
	root := pf.Schema()
	var top parquet.Field
	for _, field := range root.Fields() {
		if field.ID() == f.ID {
			top = field
			break
		}
	}
	if top == nil {
		for _, field := range root.Fields() {
			if field.Name() == f.Name {
				top = field
				break
			}
		}
	}
	if top == nil {
		return fileColumn{}, false
	}
	path := []string{top.Name()}
	var nodes []nodeKind
	var n parquet.Node = top
	for {
		switch {
		case n.Repeated():
			nodes = append(nodes, nodeRepeated)
		case n.Optional():
			nodes = append(nodes, nodeOptional)
		default:
			nodes = append(nodes, nodeRequired)
		}
		if n.Leaf() {
			break
		}
		children := n.Fields()
		if len(children) != 1 {
			return fileColumn{}, false // a struct: cdcd writes none
		}
		path = append(path, children[0].Name())
		n = children[0]
	}
	col, ok := root.Lookup(path...)
	if !ok {
		return fileColumn{}, false
	}
	fc := fileColumn{leaf: col.ColumnIndex}
	if len(nodes) > 1 {
		fc.nodes = nodes
	}
	return fc, true
}

// rowReader streams a data file's rows, the values of fields in fields'
// order, one page per column in memory at a time: a compaction merges many
// files and an index rebuild reads large ones, so nothing may hold a whole
// row group's columns. A column the file lacks (it predates the column)
// reads as its initial-default (defaults.go), NULL when it has none.
type rowReader struct {
	pf      *parquet.File
	fields  []iceberg.NestedField
	cols    []fileColumn // where each field is; leaf -1 when missing
	missing []any        // the value of a field the file lacks
	leaves  []iceberg.Type
	maxDef  []int
	rg      int   // next row group
	left    int64 // rows left in the current row group
	streams []*columnStream
	pos     int64 // position of the next row
	lv      []leveled
}

func newRowReader(pf *parquet.File, fields []iceberg.NestedField) (*rowReader, error) {
	r := &rowReader{pf: pf, fields: fields, cols: make([]fileColumn, len(fields)),
		leaves: make([]iceberg.Type, len(fields)), maxDef: make([]int, len(fields)), streams: make([]*columnStream, len(fields)),
		missing: initialValues(fields)}
	for i, f := range fields {
		fc, ok := columnFor(pf, f)
		if !ok {
			r.cols[i] = fileColumn{leaf: -1}
			continue
		}
		l, list := f.Type.(*iceberg.ListType)
		if list != (fc.nodes != nil) {
			return nil, fmt.Errorf("iceberg: column %q: the data file's column does not have the shape of %s", f.Name, f.Type)
		}
		r.cols[i] = fc
		r.leaves[i] = f.Type
		if list {
			var leaf iceberg.Type = l
			for list {
				leaf = l.Element
				l, list = leaf.(*iceberg.ListType)
			}
			r.leaves[i] = leaf
			for _, k := range fc.nodes {
				if k != nodeRequired {
					r.maxDef[i]++
				}
			}
		}
	}
	return r, nil
}

// next fills vals (len(fields)) with the next row and returns its
// position; ok is false after the last row.
func (r *rowReader) next(vals []any) (pos int64, ok bool, err error) {
	if !r.nextGroup() {
		return 0, false, nil
	}
	for i, st := range r.streams {
		if st == nil {
			vals[i] = r.missing[i]
			continue
		}
		var v any
		if r.cols[i].nodes == nil {
			var pv parquet.Value
			if pv, err = st.next(); err == nil {
				v = fromParquet(r.leaves[i], pv) // copies: the page is released later
			}
		} else {
			v, err = r.nested(i, st)
		}
		if err != nil {
			return 0, false, fmt.Errorf("iceberg: column %q: %w", r.fields[i].Name, err)
		}
		vals[i] = v
	}
	r.left--
	pos = r.pos
	r.pos++
	return pos, true, nil
}

// nextGroup opens the next row group when the current one has no rows
// left; false after the last.
func (r *rowReader) nextGroup() bool {
	for r.left == 0 {
		r.closeStreams()
		if r.rg >= len(r.pf.RowGroups()) {
			return false
		}
		rg := r.pf.RowGroups()[r.rg]
		r.rg++
		r.left = rg.NumRows()
		for i, fc := range r.cols {
			if fc.leaf >= 0 {
				r.streams[i] = &columnStream{pages: rg.ColumnChunks()[fc.leaf].Pages()}
			}
		}
	}
	return true
}

// nested reads the leaf values of one row of list column i (a value at
// repetition level 0 and those after it above 0) and assembles them.
func (r *rowReader) nested(i int, st *columnStream) (any, error) {
	r.lv = r.lv[:0]
	for {
		pv, ok, err := st.peek()
		if err != nil {
			return nil, err
		}
		if !ok || (len(r.lv) > 0 && pv.RepetitionLevel() == 0) {
			break
		}
		st.i++
		lv := leveled{rep: pv.RepetitionLevel(), def: pv.DefinitionLevel()}
		if lv.def == r.maxDef[i] {
			lv.v = fromParquet(r.leaves[i], pv)
		}
		r.lv = append(r.lv, lv)
	}
	if len(r.lv) == 0 {
		return nil, io.ErrUnexpectedEOF
	}
	if r.lv[0].rep != 0 {
		return nil, fmt.Errorf("row %d starts at repetition level %d", r.pos, r.lv[0].rep)
	}
	k := 0
	v, err := assemble(r.lv, &k, r.cols[i].nodes, 0, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("row %d: %w", r.pos, err)
	}
	if k != len(r.lv) {
		return nil, fmt.Errorf("row %d: %d leaf values left over", r.pos, len(r.lv)-k)
	}
	return v, nil
}

func (r *rowReader) closeStreams() {
	for i, st := range r.streams {
		if st != nil {
			st.close()
			r.streams[i] = nil
		}
	}
}

// close releases the pages in use.
func (r *rowReader) close() { r.closeStreams() }

// columnStream reads one column chunk value by value, a page at a time.
type columnStream struct {
	pages parquet.Pages
	page  parquet.Page // the page buf's values come from
	vr    parquet.ValueReader
	done  bool // vr is exhausted (its page is released on the next fill)
	eof   bool // no pages left
	buf   []parquet.Value
	n, i  int
}

func (s *columnStream) next() (parquet.Value, error) {
	v, ok, err := s.peek()
	if err != nil {
		return parquet.Value{}, err
	}
	if !ok {
		return parquet.Value{}, io.ErrUnexpectedEOF // fewer values than the row group has rows
	}
	s.i++
	return v, nil
}

// peek returns the next value without consuming it; ok is false at the
// end of the column chunk.
func (s *columnStream) peek() (parquet.Value, bool, error) {
	for s.i >= s.n {
		if s.eof {
			return parquet.Value{}, false, nil
		}
		if err := s.fill(); err != nil {
			return parquet.Value{}, false, err
		}
	}
	return s.buf[s.i], true, nil
}

func (s *columnStream) fill() error {
	if s.buf == nil {
		s.buf = make([]parquet.Value, 256)
	}
	if s.done {
		s.release()
	}
	if s.vr == nil {
		p, err := s.pages.ReadPage()
		if errors.Is(err, io.EOF) {
			s.eof = true
			s.n, s.i = 0, 0
			return nil
		}
		if err != nil {
			return err
		}
		s.page, s.vr = p, p.Values()
	}
	n, err := s.vr.ReadValues(s.buf)
	s.n, s.i = n, 0
	switch {
	case errors.Is(err, io.EOF):
		s.done = true
	case err != nil:
		return err
	}
	return nil
}

func (s *columnStream) release() {
	if s.page != nil {
		parquet.Release(s.page)
	}
	s.page, s.vr, s.done = nil, nil, false
}

func (s *columnStream) close() {
	s.release()
	s.pages.Close()
}

// readColumns calls fn(position, values) for every row of the file, with the
// values of fields (in cdcd's Go representation) in fields' order; vals is
// reused between calls. A field the file lacks reads as NULL.
func readColumns(pf *parquet.File, fields []iceberg.NestedField, fn func(pos int64, vals []any) error) error {
	r, err := newRowReader(pf, fields)
	if err != nil {
		return err
	}
	defer r.close()
	vals := make([]any, len(fields))
	for {
		pos, ok, err := r.next(vals)
		if err != nil || !ok {
			return err
		}
		if err := fn(pos, vals); err != nil {
			return err
		}
	}
}

// leveled is one leaf value of a nested column with its levels.
type leveled struct {
	rep, def int
	v        any // the converted value when def is the column's maximum
}

// assemble rebuilds the value at nodes[k] from vals[*i:], consuming its
// leaf values; def and depth count the defined and the repeated nodes
// above it. A list is a node followed by its repeated group and element.
func assemble(vals []leveled, i *int, nodes []nodeKind, k, def, depth int) (any, error) {
	if *i >= len(vals) {
		return nil, errors.New("levels end inside a value")
	}
	cur := vals[*i]
	switch nodes[k] {
	case nodeOptional:
		if cur.def <= def {
			*i++
			return nil, nil // NULL here
		}
		def++
	case nodeRepeated:
		return nil, errors.New("a repeated node outside a list")
	}
	if k == len(nodes)-1 {
		*i++
		return cur.v, nil
	}
	if nodes[k+1] != nodeRepeated || k+2 >= len(nodes) {
		return nil, errors.New("nesting other than a list")
	}
	if cur.def <= def {
		*i++
		return []any{}, nil // the list is there, its repeated group is not
	}
	out := []any{}
	for {
		e, err := assemble(vals, i, nodes, k+2, def+1, depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
		if *i >= len(vals) || vals[*i].rep <= depth {
			return out, nil
		}
	}
}

// fromParquet converts a parquet value to cdcd's Go representation of typ.
func fromParquet(typ iceberg.Type, v parquet.Value) any {
	if v.IsNull() {
		return nil
	}
	switch t := typ.(type) {
	case iceberg.BooleanType:
		return v.Boolean()
	case iceberg.Int32Type:
		return int64(v.Int32())
	case iceberg.Int64Type, iceberg.TimeType, iceberg.TimestampType, iceberg.TimestampTzType:
		return v.Int64()
	case iceberg.Float32Type:
		return v.Float()
	case iceberg.Float64Type:
		return v.Double()
	case iceberg.DateType:
		return v.Int32()
	case iceberg.StringType:
		return string(v.ByteArray())
	case iceberg.BinaryType:
		return append([]byte{}, v.ByteArray()...)
	case iceberg.UUIDType:
		return [16]byte(v.ByteArray())
	case iceberg.DecimalType:
		// By the file's physical type: other writers (iceberg-go's arrow
		// writer, Spark) store any precision as fixed-length bytes.
		var u *big.Int
		switch v.Kind() {
		case parquet.Int32:
			u = big.NewInt(int64(v.Int32()))
		case parquet.Int64:
			u = big.NewInt(v.Int64())
		default:
			b := v.ByteArray()
			u = new(big.Int).SetBytes(b)
			if len(b) > 0 && b[0]&0x80 != 0 {
				u.Sub(u, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
			}
		}
		return formatUnscaled(u, t.Scale())
	}
	return nil
}

// formatUnscaled renders unscaled u at scale as decimal text.
func formatUnscaled(u *big.Int, scale int) string {
	s := new(big.Int).Abs(u).String()
	if scale > 0 {
		for len(s) <= scale {
			s = "0" + s
		}
		s = s[:len(s)-scale] + "." + s[len(s)-scale:]
	}
	if u.Sign() < 0 {
		s = "-" + s
	}
	return s
}

// readRowsAt returns the rows at the given positions of a data file, with
// the values of fields in fields' order.
func readRowsAt(pf *parquet.File, fields []iceberg.NestedField, positions map[int64]bool) (map[int64][]any, error) {
	out := make(map[int64][]any, len(positions))
	err := readColumns(pf, fields, func(pos int64, vals []any) error {
		if positions[pos] {
			out[pos] = append([]any(nil), vals...)
		}
		return nil
	})
	return out, err
}

// flatColumns says whether every field is a flat column of the file.
func flatColumns(pf *parquet.File, fields []iceberg.NestedField) bool {
	for _, f := range fields {
		if fc, ok := columnFor(pf, f); !ok || fc.nodes != nil {
			return false
		}
	}
	return true
}

// readRaw calls fn(position, values) for every row of a file whose fields
// are all flat columns (flatColumns), with the values as stored, valid
// until fn returns (the page they point into is released after).
//
// It takes the rows every column has buffered at once: a value read stays
// valid until its column's buffer is filled again, which happens only once
// all of them were used, and a row costs one copy per value, not a call
// through peek and next (cdcd reconcile reads millions of rows).
func readRaw(pf *parquet.File, fields []iceberg.NestedField, fn func(pos int64, vals []parquet.Value) error) error {
	r, err := newRowReader(pf, fields)
	if err != nil {
		return err
	}
	defer r.close()
	vals := make([]parquet.Value, len(fields))
	for r.nextGroup() {
		n := r.left
		for i, st := range r.streams {
			for st.i >= st.n {
				if st.eof { // fewer values than the row group has rows
					return fmt.Errorf("iceberg: column %q: %w", r.fields[i].Name, io.ErrUnexpectedEOF)
				}
				if err := st.fill(); err != nil {
					return fmt.Errorf("iceberg: column %q: %w", r.fields[i].Name, err)
				}
			}
			n = min(n, int64(st.n-st.i))
		}
		for range n {
			for i, st := range r.streams {
				vals[i] = st.buf[st.i]
				st.i++
			}
			pos := r.pos
			r.pos++
			if err := fn(pos, vals); err != nil {
				return err
			}
		}
		r.left -= n
	}
	return nil
}
