package iceberg

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"strings"

	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/snappy"
)

// Data files are written with parquet-go (measured faster here than
// arrow-go's pqarrow for the same rows), with Iceberg field ids embedded,
// then registered through their footer: arrow-go parses the footer bytes
// and iceberg-go's DataFileFromMetadata derives the column statistics.

// pqColumn is one Iceberg field as a Parquet leaf column.
type pqColumn struct {
	name     string
	typ      iceberg.Type
	required bool
	leaf     int // column index in parquet-go's (name-sorted) leaf order
}

// fileSchema writes rows of one Iceberg schema.
type fileSchema struct {
	ice  *iceberg.Schema
	pq   *parquet.Schema
	cols []pqColumn // in Iceberg field order
}

func newFileSchema(sc *iceberg.Schema) (*fileSchema, error) {
	group := parquet.Group{}
	fields := sc.Fields()
	for _, f := range fields {
		node, err := parquetNode(f.Type)
		if err != nil {
			return nil, fmt.Errorf("iceberg: column %q: %w", f.Name, err)
		}
		if !f.Required {
			node = parquet.Optional(node)
		}
		group[f.Name] = parquet.FieldID(parquet.Compressed(node, &snappy.Codec{}), f.ID)
	}
	pq := parquet.NewSchema("table", group)
	fs := &fileSchema{ice: sc, pq: pq}
	for _, f := range fields {
		leaf, ok := pq.Lookup(f.Name)
		if !ok {
			return nil, fmt.Errorf("iceberg: column %q missing from the parquet schema", f.Name)
		}
		fs.cols = append(fs.cols, pqColumn{name: f.Name, typ: f.Type, required: f.Required, leaf: leaf.ColumnIndex})
	}
	return fs, nil
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
		return parquet.String(), nil
	case iceberg.BinaryType:
		return parquet.Leaf(parquet.ByteArrayType), nil
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

// value converts cdcd's Go value v for column c into a parquet value.
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
	var pv parquet.Value
	switch t := c.typ.(type) {
	case iceberg.BooleanType:
		pv = parquet.BooleanValue(v.(bool))
	case iceberg.Int32Type:
		pv = parquet.Int32Value(int32(v.(int64)))
	case iceberg.Int64Type:
		pv = parquet.Int64Value(v.(int64))
	case iceberg.Float32Type:
		pv = parquet.FloatValue(v.(float32))
	case iceberg.Float64Type:
		switch f := v.(type) {
		case float64:
			pv = parquet.DoubleValue(f)
		case float32:
			pv = parquet.DoubleValue(float64(f))
		}
	case iceberg.DecimalType:
		u, err := unscaledDecimal(v.(string), t.Scale())
		if err != nil {
			return parquet.Value{}, fmt.Errorf("column %q: %w", c.name, err)
		}
		switch p := t.Precision(); {
		case p <= 9:
			pv = parquet.Int32Value(int32(u.Int64()))
		case p <= 18:
			pv = parquet.Int64Value(u.Int64())
		default:
			pv = parquet.FixedLenByteArrayValue(fixedTwosComplement(u, decimalBytes(p)))
		}
	case iceberg.StringType:
		pv = parquet.ByteArrayValue([]byte(v.(string)))
	case iceberg.BinaryType:
		pv = parquet.ByteArrayValue(v.([]byte))
	case iceberg.UUIDType:
		u := v.([16]byte)
		pv = parquet.FixedLenByteArrayValue(u[:])
	case iceberg.DateType:
		pv = parquet.Int32Value(v.(int32))
	case iceberg.TimeType, iceberg.TimestampType, iceberg.TimestampTzType:
		pv = parquet.Int64Value(v.(int64))
	default:
		return parquet.Value{}, fmt.Errorf("column %q: no parquet conversion for %s", c.name, c.typ)
	}
	return pv.Level(0, def, c.leaf), nil
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
	row  parquet.Row
	rows int64
}

func newDataFileWriter(fs *fileSchema) *dataFileWriter {
	d := &dataFileWriter{fs: fs}
	d.w = parquet.NewWriter(&d.buf, fs.pq, parquet.PageBufferSize(256<<10), parquet.MaxRowsPerRowGroup(1<<20))
	return d
}

// streamDataFile creates path and writes the file into it as rows come.
// On failure call abort, which removes what was written.
func streamDataFile(fs *fileSchema, wfs icebergio.WriteFileIO, path string) (*dataFileWriter, error) {
	out, err := wfs.Create(path)
	if err != nil {
		return nil, fmt.Errorf("iceberg: create %s: %w", path, err)
	}
	d := &dataFileWriter{fs: fs, out: out, tail: &tailWriter{w: out}, path: path}
	d.w = parquet.NewWriter(d.tail, fs.pq, parquet.PageBufferSize(256<<10), parquet.MaxRowsPerRowGroup(1<<20))
	return d, nil
}

// abort gives up a streamed file and removes it.
func (d *dataFileWriter) abort(wfs icebergio.WriteFileIO) {
	if d.out != nil {
		_ = d.out.Close()
		_ = wfs.Remove(d.path)
		d.out = nil
	}
}

// tailWriter counts what passes to w and keeps the last bytes, where a
// Parquet file's footer is.
type tailWriter struct {
	w    io.Writer
	n    int64
	last []byte
}

const tailKeep = 4 << 20

func (t *tailWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	t.n += int64(n)
	t.last = append(t.last, p[:n]...)
	if len(t.last) > 2*tailKeep {
		t.last = append(t.last[:0], t.last[len(t.last)-tailKeep:]...)
	}
	return n, err
}

// add writes one row, given in Iceberg field order.
func (d *dataFileWriter) add(vals []any) error {
	d.row = d.row[:0]
	for i := range d.fs.cols {
		pv, err := d.fs.cols[i].value(vals[i])
		if err != nil {
			return err
		}
		d.row = append(d.row, pv)
	}
	// parquet-go wants the values in leaf order.
	sortRow(d.row)
	if _, err := d.w.WriteRows([]parquet.Row{d.row}); err != nil {
		return fmt.Errorf("iceberg: write parquet row: %w", err)
	}
	d.rows++
	return nil
}

func sortRow(r parquet.Row) {
	for i := 1; i < len(r); i++ {
		for j := i; j > 0 && r[j].Column() < r[j-1].Column(); j-- {
			r[j], r[j-1] = r[j-1], r[j]
		}
	}
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

// finishAs is finish for any content kind (data or position deletes).
func (d *dataFileWriter) finishAs(wfs icebergio.WriteFileIO, path string, tbl *table.Table, content iceberg.ManifestEntryContent, ref *string, partition ...map[int]any) (iceberg.DataFile, error) {
	var part map[int]any
	if len(partition) > 0 {
		part = partition[0]
	}
	if err := d.w.Close(); err != nil {
		d.abort(wfs)
		return nil, fmt.Errorf("iceberg: close parquet: %w", err)
	}
	var data []byte
	var size int64
	if d.out != nil {
		if path != d.path {
			d.abort(wfs)
			return nil, fmt.Errorf("iceberg: data file streamed to %s finished as %s", d.path, path)
		}
		err := d.out.Close()
		d.out = nil
		if err != nil {
			_ = wfs.Remove(path)
			return nil, fmt.Errorf("iceberg: store %s: %w", path, err)
		}
		data, size = d.tail.last, d.tail.n
	} else {
		data = d.buf.Bytes()
		size = int64(len(data))
	}
	footer, err := parquetFooter(data)
	if err != nil {
		return nil, err
	}
	md, err := metadata.NewFileMetaData(footer, nil)
	if err != nil {
		return nil, fmt.Errorf("iceberg: parse parquet footer: %w", err)
	}
	if d.tail == nil {
		if err := wfs.WriteFile(path, data); err != nil {
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

// parquetFooter returns the Thrift footer of a complete Parquet file, given
// the file or its tail.
func parquetFooter(data []byte) ([]byte, error) {
	if len(data) < 12 || string(data[len(data)-4:]) != "PAR1" {
		return nil, errors.New("iceberg: not a complete parquet file")
	}
	n := int(binary.LittleEndian.Uint32(data[len(data)-8:]))
	if n <= 0 || n > len(data)-12 {
		return nil, fmt.Errorf("iceberg: bad parquet footer length %d", n)
	}
	return data[len(data)-8-n : len(data)-8], nil
}
