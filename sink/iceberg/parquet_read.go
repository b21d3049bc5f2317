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

// readColumns calls fn(position, values) for every row of the file, with the
// values of fields (in cdcd's Go representation) in fields' order.
func readColumns(pf *parquet.File, fields []iceberg.NestedField, fn func(pos int64, vals []any) error) error {
	leaves := make([]int, len(fields))
	for i, f := range fields {
		leaf, ok := leafFor(pf, f)
		switch {
		case ok:
		case !f.Required:
			// Added after the file was written: NULL in its rows, as
			// Iceberg reads an optional column a file lacks.
			leaf = -1
		default:
			return fmt.Errorf("iceberg: data file lacks column %q", f.Name)
		}
		leaves[i] = leaf
	}
	var base int64
	for _, rg := range pf.RowGroups() {
		n := rg.NumRows()
		cols := make([][]any, len(fields))
		for i, leaf := range leaves {
			if leaf < 0 {
				cols[i] = make([]any, n)
				continue
			}
			vals, err := readChunk(rg.ColumnChunks()[leaf], fields[i].Type, n)
			if err != nil {
				return fmt.Errorf("iceberg: column %q: %w", fields[i].Name, err)
			}
			cols[i] = vals
		}
		row := make([]any, len(fields))
		for r := int64(0); r < n; r++ {
			for i := range cols {
				row[i] = cols[i][r]
			}
			if err := fn(base+r, row); err != nil {
				return err
			}
		}
		base += n
	}
	return nil
}

func readChunk(cc parquet.ColumnChunk, typ iceberg.Type, n int64) ([]any, error) {
	out := make([]any, 0, n)
	pages := cc.Pages()
	defer pages.Close()
	buf := make([]parquet.Value, 1024)
	for {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		vr := p.Values()
		for {
			k, err := vr.ReadValues(buf)
			for _, v := range buf[:k] {
				out = append(out, fromParquet(typ, v))
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				parquet.Release(p)
				return nil, err
			}
		}
		parquet.Release(p)
	}
	if int64(len(out)) != n {
		return nil, fmt.Errorf("read %d values for %d rows", len(out), n)
	}
	return out, nil
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
