package iceberg

import (
	"errors"
	"fmt"
	"io"

	"github.com/apache/iceberg-go"
	"github.com/parquet-go/parquet-go"
)

// columnStream yields one column chunk's values in row order, a page at a
// time, so a compaction's k-way merge holds about one page per column of
// each input file instead of whole decoded row groups (with many small
// input files those reached hundreds of MB).
type columnStream struct {
	pages parquet.Pages // nil: a column the file predates (all null)
	typ   iceberg.Type
	buf   []parquet.Value
	vals  []any // the converted values of buf not yet taken
	i     int
	page  parquet.Page
	vr    parquet.ValueReader
}

func newColumnStream(cc parquet.ColumnChunk, typ iceberg.Type) *columnStream {
	s := &columnStream{typ: typ, buf: make([]parquet.Value, 256)}
	if cc != nil {
		s.pages = cc.Pages()
	}
	return s
}

// next returns the column's next value.
func (s *columnStream) next() (any, error) {
	if s.pages == nil {
		return nil, nil
	}
	for s.i >= len(s.vals) {
		if s.vr == nil {
			p, err := s.pages.ReadPage()
			if errors.Is(err, io.EOF) {
				return nil, errors.New("column chunk has fewer values than rows")
			}
			if err != nil {
				return nil, err
			}
			s.page, s.vr = p, p.Values()
		}
		k, err := s.vr.ReadValues(s.buf)
		// Convert before the page is released: values may point into it.
		s.vals, s.i = s.vals[:0], 0
		for _, v := range s.buf[:k] {
			s.vals = append(s.vals, fromParquet(s.typ, v))
		}
		if err != nil {
			parquet.Release(s.page)
			s.page, s.vr = nil, nil
			if !errors.Is(err, io.EOF) {
				return nil, err
			}
		}
	}
	v := s.vals[s.i]
	s.i++
	return v, nil
}

func (s *columnStream) close() {
	if s.page != nil {
		parquet.Release(s.page)
		s.page, s.vr = nil, nil
	}
	if s.pages != nil {
		s.pages.Close()
	}
}

// openRowGroup starts a stream per field over a row group.
func openRowGroup(pf *parquet.File, rg parquet.RowGroup, fields []iceberg.NestedField) []*columnStream {
	out := make([]*columnStream, len(fields))
	for fi, f := range fields {
		var cc parquet.ColumnChunk
		if leaf, ok := leafFor(pf, f); ok {
			cc = rg.ColumnChunks()[leaf]
		}
		out[fi] = newColumnStream(cc, f.Type)
	}
	return out
}

// readRow fills vals with the next row of streams.
func readRow(streams []*columnStream, fields []iceberg.NestedField, vals []any) error {
	for fi, s := range streams {
		v, err := s.next()
		if err != nil {
			return fmt.Errorf("iceberg: compaction read %q: %w", fields[fi].Name, err)
		}
		vals[fi] = v
	}
	return nil
}

func closeStreams(streams []*columnStream) {
	for _, s := range streams {
		s.close()
	}
}
