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

// leafFor finds the leaf column of field f in a data file: by field id
// first, by name for files written without ids.
func leafFor(pf *parquet.File, f iceberg.NestedField) (int, bool) {
	for _, field := range pf.Schema().Fields() {
		if field.ID() == f.ID {
			if col, ok := pf.Schema().Lookup(field.Name()); ok {
				return col.ColumnIndex, true
			}
		}
	}
	if col, ok := pf.Schema().Lookup(f.Name); ok {
		return col.ColumnIndex, true
	}
	return 0, false
}

// rowReader streams a data file's rows, the values of fields in fields'
// order, one page per column in memory at a time: a compaction merges many
// files and an index rebuild reads large ones, so nothing may hold a whole
// row group's columns. A column the file lacks (it predates the column)
// reads as NULL.
type rowReader struct {
	pf      *parquet.File
	fields  []iceberg.NestedField
	leaves  []int // leaf column per field; -1 when missing
	rg      int   // next row group
	left    int64 // rows left in the current row group
	streams []*columnStream
	pos     int64 // position of the next row
}

func newRowReader(pf *parquet.File, fields []iceberg.NestedField) *rowReader {
	r := &rowReader{pf: pf, fields: fields, leaves: make([]int, len(fields)), streams: make([]*columnStream, len(fields))}
	for i, f := range fields {
		r.leaves[i] = -1
		if leaf, ok := leafFor(pf, f); ok {
			r.leaves[i] = leaf
		}
	}
	return r
}

// next fills vals (len(fields)) with the next row and returns its
// position; ok is false after the last row.
func (r *rowReader) next(vals []any) (pos int64, ok bool, err error) {
	for r.left == 0 {
		r.closeStreams()
		if r.rg >= len(r.pf.RowGroups()) {
			return 0, false, nil
		}
		rg := r.pf.RowGroups()[r.rg]
		r.rg++
		r.left = rg.NumRows()
		for i, leaf := range r.leaves {
			if leaf >= 0 {
				r.streams[i] = &columnStream{pages: rg.ColumnChunks()[leaf].Pages()}
			}
		}
	}
	for i, st := range r.streams {
		if st == nil {
			vals[i] = nil
			continue
		}
		v, err := st.next()
		if err != nil {
			return 0, false, fmt.Errorf("iceberg: column %q: %w", r.fields[i].Name, err)
		}
		vals[i] = fromParquet(r.fields[i].Type, v) // copies: the page is released later
	}
	r.left--
	pos = r.pos
	r.pos++
	return pos, true, nil
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
	buf   []parquet.Value
	n, i  int
}

func (s *columnStream) next() (parquet.Value, error) {
	for s.i >= s.n {
		if err := s.fill(); err != nil {
			return parquet.Value{}, err
		}
	}
	v := s.buf[s.i]
	s.i++
	return v, nil
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
			return io.ErrUnexpectedEOF // fewer values than the row group has rows
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
	r := newRowReader(pf, fields)
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
		var u *big.Int
		switch p := t.Precision(); {
		case p <= 9:
			u = big.NewInt(int64(v.Int32()))
		case p <= 18:
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
