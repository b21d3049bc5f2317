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

// readColumns calls fn(position, values) for every row of the file, with the
// values of fields (in cdcd's Go representation) in fields' order.
func readColumns(pf *parquet.File, fields []iceberg.NestedField, fn func(pos int64, vals []any) error) error {
	cols := make([]fileColumn, len(fields))
	for i, f := range fields {
		fc, ok := columnFor(pf, f)
		if !ok {
			return fmt.Errorf("iceberg: data file lacks column %q", f.Name)
		}
		cols[i] = fc
	}
	var base int64
	for _, rg := range pf.RowGroups() {
		n := rg.NumRows()
		vals := make([][]any, len(fields))
		for i, fc := range cols {
			v, err := readField(rg, fc, fields[i].Type, n)
			if err != nil {
				return fmt.Errorf("iceberg: column %q: %w", fields[i].Name, err)
			}
			vals[i] = v
		}
		row := make([]any, len(fields))
		for r := int64(0); r < n; r++ {
			for i := range vals {
				row[i] = vals[i][r]
			}
			if err := fn(base+r, row); err != nil {
				return err
			}
		}
		base += n
	}
	return nil
}

// readField reads the n values of a field of type typ in a row group.
func readField(rg parquet.RowGroup, fc fileColumn, typ iceberg.Type, n int64) ([]any, error) {
	cc := rg.ColumnChunks()[fc.leaf]
	l, list := typ.(*iceberg.ListType)
	if list != (fc.nodes != nil) {
		return nil, fmt.Errorf("the data file's column does not have the shape of %s", typ)
	}
	if !list {
		return readChunk(cc, typ, n)
	}
	var leaf iceberg.Type = l
	for list {
		leaf = l.Element
		l, list = leaf.(*iceberg.ListType)
	}
	return readNestedChunk(cc, fc.nodes, leaf, n)
}

func readChunk(cc parquet.ColumnChunk, typ iceberg.Type, n int64) ([]any, error) {
	out := make([]any, 0, n)
	err := readValues(cc, func(v parquet.Value) { out = append(out, fromParquet(typ, v)) })
	if err != nil {
		return nil, err
	}
	if int64(len(out)) != n {
		return nil, fmt.Errorf("read %d values for %d rows", len(out), n)
	}
	return out, nil
}

// readValues calls fn with every value of a column chunk, levels set; a
// value must not be kept past fn (it may point into a released page).
func readValues(cc parquet.ColumnChunk, fn func(parquet.Value)) error {
	pages := cc.Pages()
	defer pages.Close()
	buf := make([]parquet.Value, 1024)
	for {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		vr := p.Values()
		for {
			k, err := vr.ReadValues(buf)
			for _, v := range buf[:k] {
				fn(v)
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				parquet.Release(p)
				return err
			}
		}
		parquet.Release(p)
	}
}

// leveled is one leaf value of a nested column with its levels.
type leveled struct {
	rep, def int
	v        any // the converted value when def is the column's maximum
}

// readNestedChunk reads the n values of a list column: the leaf values
// with their levels, assembled into cdcd's []any per row (see appendNested
// for the levels).
func readNestedChunk(cc parquet.ColumnChunk, nodes []nodeKind, leaf iceberg.Type, n int64) ([]any, error) {
	maxDef := 0
	for _, k := range nodes {
		if k != nodeRequired {
			maxDef++
		}
	}
	var vals []leveled
	err := readValues(cc, func(v parquet.Value) {
		lv := leveled{rep: v.RepetitionLevel(), def: v.DefinitionLevel()}
		if lv.def == maxDef {
			lv.v = fromParquet(leaf, v)
		}
		vals = append(vals, lv)
	})
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, n)
	for i := 0; i < len(vals); {
		if vals[i].rep != 0 {
			return nil, fmt.Errorf("row %d starts at repetition level %d", len(out), vals[i].rep)
		}
		v, err := assemble(vals, &i, nodes, 0, 0, 0)
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", len(out), err)
		}
		out = append(out, v)
	}
	if int64(len(out)) != n {
		return nil, fmt.Errorf("read %d values for %d rows", len(out), n)
	}
	return out, nil
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
