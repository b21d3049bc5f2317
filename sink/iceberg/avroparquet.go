package iceberg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/apache/iceberg-go"
	"github.com/parquet-go/parquet-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// A rowCodec decodes the Avro after-image of one table version (the row
// record of schema.EnvelopeInfo.After) straight into the Parquet values
// of one data file schema, each appended to its leaf column's batch
// (dataFileWriter.pending), with its levels: no generic row ([]any), no
// boxed values, no decimal text. Byte-array values alias the Avro bytes,
// which must stay unchanged until the row is handed to parquet-go (the
// sink's records are held until the commit).
//
// It covers the flat kinds whose Avro value maps onto the Iceberg column
// without a Go value in between: booleans, integers, floats, dates, times,
// timestamps, text and JSON, bytes, unconstrained numerics (text) and
// decimals of up to 18 digits of the column's scale. A table version with
// any other column (interval, list, uuid, wider decimals), or a file
// schema with a list column, has no codec (newRowCodec returns nil): its
// rows take the generic path (schema.DecodeEnvelope, pqColumn.appendTo).
// Both give the same values (TestRowCodecAgreesWithGenericPath). The
// initial load's rows are 'r' changes with an after-image like any insert,
// so the load path uses the same codec.
type rowCodec struct {
	src []codecColumn // in the Avro record's column order
	// out says, per file column in leaf order, which src column holds its
	// value (>= 0) or that the table version lacks the column (-1: consts).
	out    []int
	consts []parquet.Value // by leaf position, for out[i] < 0
	// constLeaves are the leaves the version lacks (out[i] < 0);
	// constBytes the bytes of their byte-array values, the same each row.
	constLeaves []int
	constBytes  int
	// pqConsts are consts as pqWriter's pages take them (decodePQ): the
	// level and PLAIN bytes of each, made once; noPQ when fs has no plan
	// or a const is not of its leaf's kind (decodeInto only).
	pqConsts []pqConst
	noPQ     bool
}

// pqConst is a const leaf's value for pqWriter's pages.
type pqConst struct {
	leaf  int
	def   int8 // -1: required (no level); else the level
	plain []byte
}

// codecColumn is how one Avro column becomes its Parquet value.
type codecColumn struct {
	name     string
	nullable bool // an Avro union with null
	required bool // the Iceberg column is required
	conv     codecConv
	leaf     int // the Parquet leaf column index
	def      int // the definition level of a value: 0 when required, else 1
	scale    int // decimals: the unscaled value is read as is
	skip     bool
}

type codecConv uint8

const (
	convBool        codecConv = iota + 1
	convInt32                 // Avro int or long into an int32 column
	convInt64                 // Avro int or long into an int64 column
	convFloat32               // 4 bytes into a float column
	convFloat32To64           // 4 bytes into a double column
	convFloat64               // 8 bytes
	convBytes                 // Avro bytes or string into a byte array (bounded)
	convDecimal32             // decimal bytes into a decimal(p <= 9) column
	convDecimal64             // decimal bytes into a decimal(p <= 18) column
)

// newRowCodec compiles the codec of table version t into file schema fs
// whose fields take, where t lacks them, the values of defaults (by
// Iceberg field position). It returns nil when any column needs the
// generic path.
func newRowCodec(t *schema.Table, fs *fileSchema, defaults []any) *rowCodec {
	fields := fs.ice.Fields()
	fieldOf := make(map[string]int, len(fields))
	for fi, f := range fields {
		if fs.cols[fi].list {
			return nil
		}
		fieldOf[f.Name] = fi
	}
	c := &rowCodec{src: make([]codecColumn, len(t.Columns))}
	srcOf := make([]int, len(fields))
	for i := range srcOf {
		srcOf[i] = -1
	}
	for ci, col := range t.Columns {
		cc := codecColumn{name: col.Name, nullable: col.Nullable}
		fi, ok := fieldOf[col.Name]
		if !ok {
			// A column the table lacks is read past (evolve adds every
			// column first, so this is defensive).
			cc.skip, cc.conv = true, skipConv(col)
		} else {
			pc := &fs.cols[fi]
			cc.required, cc.leaf = pc.required, pc.leaf
			if !pc.required {
				cc.def = 1
			}
			if cc.conv, ok = convOf(col, pc.typ); !ok {
				return nil
			}
			cc.scale = col.Scale
			srcOf[fi] = ci
		}
		if cc.skip && cc.conv == 0 {
			return nil
		}
		c.src[ci] = cc
	}
	c.out = make([]int, len(fs.order))
	c.consts = make([]parquet.Value, len(fs.order))
	for li, fi := range fs.order {
		c.out[li] = srcOf[fi]
		if srcOf[fi] < 0 {
			var v any
			if fi < len(defaults) {
				v = defaults[fi]
			}
			pv, err := fs.cols[fi].value(v)
			if err != nil {
				return nil // the generic path reports it
			}
			c.consts[li] = pv
			c.constLeaves = append(c.constLeaves, li)
			if k := pv.Kind(); k == parquet.ByteArray || k == parquet.FixedLenByteArray {
				c.constBytes += len(pv.ByteArray())
			}
		}
	}
	c.noPQ = fs.plan == nil
	for _, li := range c.constLeaves {
		if c.noPQ {
			break
		}
		pc, ok := newPQConst(&fs.plan.leaves[li], li, c.consts[li])
		c.pqConsts = append(c.pqConsts, pc)
		c.noPQ = !ok
	}
	return c
}

// newPQConst is v as the pages of leaf take it; false when they cannot
// (a NULL in a required column, a value of another kind).
func newPQConst(leaf *pqLeaf, li int, v parquet.Value) (pqConst, bool) {
	pc := pqConst{leaf: li, def: -1}
	if v.IsNull() {
		pc.def = 0
		return pc, !leaf.required
	}
	if !leaf.required {
		pc.def = 1
	}
	switch k := v.Kind(); {
	case k != leaf.kind:
		return pc, false
	case k == parquet.Int64:
		pc.plain = binary.LittleEndian.AppendUint64(nil, uint64(v.Int64()))
	case k == parquet.Int32:
		pc.plain = binary.LittleEndian.AppendUint32(nil, uint32(v.Int32()))
	case k == parquet.ByteArray:
		pc.plain = binary.LittleEndian.AppendUint32(nil, uint32(len(v.ByteArray())))
		pc.plain = append(pc.plain, v.ByteArray()...)
	case k == parquet.Double:
		pc.plain = binary.LittleEndian.AppendUint64(nil, math.Float64bits(v.Double()))
	case k == parquet.Float:
		pc.plain = binary.LittleEndian.AppendUint32(nil, math.Float32bits(v.Float()))
	case k == parquet.Boolean:
		pc.plain = []byte{0}
		if v.Boolean() {
			pc.plain[0] = 1
		}
	default:
		return pc, false
	}
	return pc, true
}

// convOf is how a value of source column col goes into an Iceberg column
// of type typ; false when only the generic path knows.
func convOf(col schema.Column, typ iceberg.Type) (codecConv, bool) {
	switch col.Kind {
	case schema.Bool:
		return convBool, typ.Equals(iceberg.PrimitiveTypes.Bool)
	case schema.Int16, schema.Int32:
		switch {
		case typ.Equals(iceberg.PrimitiveTypes.Int32):
			return convInt32, true
		case typ.Equals(iceberg.PrimitiveTypes.Int64):
			return convInt64, true
		}
	case schema.Int64:
		return convInt64, typ.Equals(iceberg.PrimitiveTypes.Int64)
	case schema.Date:
		return convInt32, typ.Equals(iceberg.PrimitiveTypes.Date)
	case schema.Time:
		return convInt64, typ.Equals(iceberg.PrimitiveTypes.Time)
	case schema.Timestamp:
		return convInt64, typ.Equals(iceberg.PrimitiveTypes.Timestamp)
	case schema.TimestampTZ:
		return convInt64, typ.Equals(iceberg.PrimitiveTypes.TimestampTz)
	case schema.Float32:
		switch {
		case typ.Equals(iceberg.PrimitiveTypes.Float32):
			return convFloat32, true
		case typ.Equals(iceberg.PrimitiveTypes.Float64):
			return convFloat32To64, true
		}
	case schema.Float64:
		return convFloat64, typ.Equals(iceberg.PrimitiveTypes.Float64)
	case schema.String, schema.JSON:
		return convBytes, typ.Equals(iceberg.PrimitiveTypes.String)
	case schema.Bytes:
		return convBytes, typ.Equals(iceberg.PrimitiveTypes.Binary)
	case schema.Decimal:
		if col.Precision == 0 {
			return convBytes, typ.Equals(iceberg.PrimitiveTypes.String)
		}
		d, ok := typ.(iceberg.DecimalType)
		if !ok || col.Precision > 18 || d.Scale() != col.Scale || d.Precision() < col.Precision {
			return 0, false
		}
		if d.Precision() <= 9 {
			return convDecimal32, true
		}
		return convDecimal64, d.Precision() <= 18
	}
	return 0, false
}

// skipConv is the conversion whose Avro encoding a column of col's kind
// has, to read past it (skipValue); 0 when there is none.
func skipConv(col schema.Column) codecConv {
	switch col.Kind {
	case schema.Bool:
		return convBool
	case schema.Int16, schema.Int32, schema.Int64, schema.Date, schema.Time, schema.Timestamp, schema.TimestampTZ:
		return convInt64
	case schema.Float32:
		return convFloat32
	case schema.Float64:
		return convFloat64
	case schema.String, schema.JSON, schema.Bytes, schema.Decimal, schema.UUID:
		return convBytes
	}
	return 0
}

var errAvroShort = errors.New("the Avro row ends early")

// decodeInto appends the Parquet values of the after-image row (the Avro
// union branch, then the record) to the batches of their leaf columns,
// one value to each, and returns the bytes of its byte-array values. On
// error some batches may have the row's value and others not: the caller
// cuts them back (dataFileWriter.addAvro).
func (c *rowCodec) decodeInto(row []byte, pending [][]parquet.Value) (int, error) {
	b, branch, err := avroLong(row)
	if err != nil {
		return 0, err
	}
	if branch != 1 {
		return 0, errors.New("the change has no after-image")
	}
	size := 0
	for i := range c.src {
		col := &c.src[i]
		if col.nullable {
			if len(b) == 0 {
				return 0, errAvroShort
			}
			switch b[0] { // the union's branch: zigzag 0 or 1, one byte
			case 0:
				b = b[1:]
				if col.skip {
					continue
				}
				if col.required {
					return 0, fmt.Errorf("column %q is required but the value is NULL", col.name)
				}
				p := append(pending[col.leaf], parquet.Value{})
				p[len(p)-1].SetColumnIndex(col.leaf)
				pending[col.leaf] = p
				continue
			case 2:
				b = b[1:]
			default:
				return 0, fmt.Errorf("column %q: bad union index byte %#x", col.name, b[0])
			}
		}
		var v parquet.Value
		switch {
		case col.skip:
			if b, _, err = col.skipValue(b); err != nil {
				return 0, err
			}
			continue
		case col.conv == convInt64:
			var n int64
			if b, n, err = avroLong(b); err != nil {
				return 0, err
			}
			v = parquet.Int64Value(n)
		case col.conv == convBytes:
			var x []byte
			if b, x, err = avroBytes(b); err != nil {
				return 0, err
			}
			if len(x) > maxUpperBound {
				if err := checkBoundable(x); err != nil {
					return 0, (&pqColumn{name: col.name}).valueError(err)
				}
			}
			size += len(x)
			v = parquet.ByteArrayValue(x)
		case col.conv == convFloat64 && len(b) >= 8:
			v = parquet.DoubleValue(math.Float64frombits(binary.LittleEndian.Uint64(b)))
			b = b[8:]
		case col.conv == convBool && len(b) >= 1 && b[0] <= 1:
			v = parquet.BooleanValue(b[0] == 1)
			b = b[1:]
		case col.conv == convDecimal64:
			var x []byte
			if b, x, err = avroBytes(b); err != nil {
				return 0, err
			}
			n, ok := unscaledBytes(x)
			if !ok {
				return 0, fmt.Errorf("column %q: decimal of %d bytes does not fit its column", col.name, len(x))
			}
			v = parquet.Int64Value(n)
		default:
			if b, v, err = col.value(b); err != nil {
				return 0, err
			}
		}
		p := append(pending[col.leaf], v)
		e := &p[len(p)-1]
		e.SetDefinitionLevel(col.def)
		e.SetColumnIndex(col.leaf)
		pending[col.leaf] = p
	}
	if len(b) != 0 {
		return 0, fmt.Errorf("%d trailing bytes after the row", len(b))
	}
	for _, li := range c.constLeaves {
		pending[li] = append(pending[li], c.consts[li])
	}
	return size + c.constBytes, nil
}

// value reads one non-null value of the column from b.
func (col *codecColumn) value(b []byte) ([]byte, parquet.Value, error) {
	if col.skip {
		return col.skipValue(b)
	}
	switch col.conv {
	case convBool:
		if len(b) < 1 {
			return b, parquet.Value{}, errAvroShort
		}
		if b[0] > 1 {
			return b, parquet.Value{}, fmt.Errorf("column %q: boolean byte %d", col.name, b[0])
		}
		return b[1:], parquet.BooleanValue(b[0] == 1), nil
	case convInt32:
		b, n, err := avroLong(b)
		if err == nil && (n < math.MinInt32 || n > math.MaxInt32) {
			err = fmt.Errorf("column %q: value %d out of the int range", col.name, n)
		}
		return b, parquet.Int32Value(int32(n)), err
	case convInt64:
		b, n, err := avroLong(b)
		return b, parquet.Int64Value(n), err
	case convFloat32, convFloat32To64:
		if len(b) < 4 {
			return b, parquet.Value{}, errAvroShort
		}
		f := math.Float32frombits(binary.LittleEndian.Uint32(b))
		if col.conv == convFloat32To64 {
			return b[4:], parquet.DoubleValue(float64(f)), nil
		}
		return b[4:], parquet.FloatValue(f), nil
	case convFloat64:
		if len(b) < 8 {
			return b, parquet.Value{}, errAvroShort
		}
		return b[8:], parquet.DoubleValue(math.Float64frombits(binary.LittleEndian.Uint64(b))), nil
	case convBytes:
		b, v, err := avroBytes(b)
		if err == nil {
			err = checkBoundable(v)
		}
		if err != nil {
			return b, parquet.Value{}, (&pqColumn{name: col.name}).valueError(err)
		}
		return b, parquet.ByteArrayValue(v), nil
	case convDecimal32, convDecimal64:
		b, v, err := avroBytes(b)
		if err != nil {
			return b, parquet.Value{}, err
		}
		n, ok := unscaledBytes(v)
		if !ok || (col.conv == convDecimal32 && (n < math.MinInt32 || n > math.MaxInt32)) {
			return b, parquet.Value{}, fmt.Errorf("column %q: decimal of %d bytes does not fit its column", col.name, len(v))
		}
		if col.conv == convDecimal32 {
			return b, parquet.Int32Value(int32(n)), nil
		}
		return b, parquet.Int64Value(n), nil
	}
	return b, parquet.Value{}, fmt.Errorf("column %q: no conversion", col.name)
}

// skipValue reads past one value of a column the file does not hold.
func (col *codecColumn) skipValue(b []byte) ([]byte, parquet.Value, error) {
	var err error
	switch col.conv {
	case convBool:
		if len(b) < 1 {
			return b, parquet.Value{}, errAvroShort
		}
		b = b[1:]
	case convFloat32, convFloat32To64:
		if len(b) < 4 {
			return b, parquet.Value{}, errAvroShort
		}
		b = b[4:]
	case convFloat64:
		if len(b) < 8 {
			return b, parquet.Value{}, errAvroShort
		}
		b = b[8:]
	case convInt32, convInt64:
		b, _, err = avroLong(b)
	default:
		b, _, err = avroBytes(b)
	}
	return b, parquet.NullValue(), err
}

// unscaledBytes reads a decimal's big-endian two's complement unscaled
// value of at most 8 significant bytes (redundant sign bytes dropped).
func unscaledBytes(v []byte) (int64, bool) {
	for len(v) > 8 && ((v[0] == 0 && v[1]&0x80 == 0) || (v[0] == 0xff && v[1]&0x80 != 0)) {
		v = v[1:]
	}
	if len(v) > 8 {
		return 0, false
	}
	var n int64
	if len(v) > 0 {
		n = int64(int8(v[0]))
		for _, x := range v[1:] {
			n = n<<8 | int64(x)
		}
	}
	return n, true
}

// avroLong reads a zigzag varint.
func avroLong(b []byte) ([]byte, int64, error) {
	u, n := binary.Uvarint(b)
	if n <= 0 {
		return b, 0, errAvroShort
	}
	return b[n:], int64(u>>1) ^ -int64(u&1), nil
}

// avroBytes reads a length-prefixed byte string, aliasing b.
func avroBytes(b []byte) ([]byte, []byte, error) {
	b, n, err := avroLong(b)
	if err != nil {
		return b, nil, err
	}
	if n < 0 || n > int64(len(b)) {
		return b, nil, errAvroShort
	}
	return b[n:], b[:n:n], nil
}

// decodePQ is decodeInto straight into pqWriter's open pages (its
// columns' PLAIN bytes and levels; pqwrite.go, beginRow): no parquet.Value
// between, except for the rarer conversions (col.value) and the columns
// the version lacks (consts). A row that fails to decode is undone whole:
// no column keeps any of it, no bound saw it.
func (c *rowCodec) decodePQ(row []byte, w *pqWriter) error {
	w.beginRow()
	if err := c.appendPQ(row, w); err != nil {
		w.undoRow()
		return err
	}
	return w.endRow()
}

// appendPQ appends the row's values to w's columns (decodePQ).
func (c *rowCodec) appendPQ(row []byte, w *pqWriter) error {
	b, branch, err := avroLong(row)
	if err != nil {
		return err
	}
	if branch != 1 {
		return errors.New("the change has no after-image")
	}
	cols := w.cols
	for i := range c.src {
		col := &c.src[i]
		if col.nullable {
			if len(b) == 0 {
				return errAvroShort
			}
			switch b[0] { // the union's branch: zigzag 0 or 1, one byte
			case 0:
				b = b[1:]
				if col.skip {
					continue
				}
				if col.required {
					return fmt.Errorf("column %q is required but the value is NULL", col.name)
				}
				pc := &cols[col.leaf]
				pc.defs = append(pc.defs, 0)
				continue
			case 2:
				b = b[1:]
			default:
				return fmt.Errorf("column %q: bad union index byte %#x", col.name, b[0])
			}
		}
		if col.skip {
			if b, _, err = col.skipValue(b); err != nil {
				return err
			}
			continue
		}
		pc := &cols[col.leaf]
		switch {
		case col.conv == convInt64:
			var n int64
			if b, n, err = avroLong(b); err != nil {
				return err
			}
			pc.vals = binary.LittleEndian.AppendUint64(pc.vals, uint64(n))
		case col.conv == convInt32: // an int column's or a date's PLAIN int32, as col.value checks it
			var n int64
			if b, n, err = avroLong(b); err != nil {
				return err
			}
			if n < math.MinInt32 || n > math.MaxInt32 {
				return fmt.Errorf("column %q: value %d out of the int range", col.name, n)
			}
			pc.vals = binary.LittleEndian.AppendUint32(pc.vals, uint32(int32(n)))
		case col.conv == convBytes:
			var x []byte
			if b, x, err = avroBytes(b); err != nil {
				return err
			}
			if len(x) > maxUpperBound {
				if err := checkBoundable(x); err != nil {
					return (&pqColumn{name: col.name}).valueError(err)
				}
			}
			pc.vals = binary.LittleEndian.AppendUint32(pc.vals, uint32(len(x)))
			pc.vals = append(pc.vals, x...)
		case col.conv == convFloat64 && len(b) >= 8:
			// Avro's double and Parquet's PLAIN double are both the
			// IEEE 754 bits, little-endian.
			pc.vals = append(pc.vals, b[:8]...)
			b = b[8:]
		case col.conv == convBool && len(b) >= 1 && b[0] <= 1:
			pc.vals = append(pc.vals, b[0])
			b = b[1:]
		case col.conv == convDecimal64:
			var x []byte
			if b, x, err = avroBytes(b); err != nil {
				return err
			}
			n, ok := unscaledBytes(x)
			if !ok {
				return fmt.Errorf("column %q: decimal of %d bytes does not fit its column", col.name, len(x))
			}
			pc.vals = binary.LittleEndian.AppendUint64(pc.vals, uint64(n))
		default:
			var v parquet.Value
			if b, v, err = col.value(b); err != nil {
				return err
			}
			if err := w.appendValue(col.leaf, v); err != nil {
				return err
			}
			continue
		}
		if col.def != 0 {
			pc.defs = append(pc.defs, 1)
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("%d trailing bytes after the row", len(b))
	}
	for i := range c.pqConsts {
		k := &c.pqConsts[i]
		pc := &cols[k.leaf]
		if k.def >= 0 {
			pc.defs = append(pc.defs, byte(k.def))
		}
		pc.vals = append(pc.vals, k.plain...)
	}
	return nil
}

// pqDirectOn: rows the codec decodes go straight into pqWriter's pages
// (decodePQ) rather than through the batches of parquet.Values (a
// variable for tests and benchmarks that compare the two).
var pqDirectOn = true

// addAvro writes one row decoded by c from an after-image (rowCodec). Its
// byte-array values alias row until the row is handed to parquet-go.
// With pqWriter, the row goes straight into its pages (decodePQ), after
// the rows pending before it, so the file's rows stay in the order added
// (the key index records their positions).
func (d *dataFileWriter) addAvro(c *rowCodec, row []byte) error {
	if d.pw != nil && pqDirectOn && !c.noPQ {
		if d.npending > 0 {
			if err := d.writePending(); err != nil {
				return err
			}
		}
		if err := c.decodePQ(row, d.pw); err != nil {
			return err
		}
		d.rows++
		if d.groupRows++; d.groupRows >= rowGroupRows {
			rows := d.groupRows
			d.groupRows = 0
			if err := d.pw.flushRowGroup(rows); err != nil {
				return fmt.Errorf("iceberg: write parquet row group: %w", err)
			}
		}
		return nil
	}
	n, err := c.decodeInto(row, d.pending)
	if err != nil {
		d.dropRow()
		return err
	}
	d.pendingBytes += n
	return d.added()
}

// dropRow cuts every column's batch back to the rows before the one being
// added; a row of the codec has one value in each (flat columns only).
func (d *dataFileWriter) dropRow() {
	for leaf := range d.pending {
		d.pending[leaf] = d.pending[leaf][:d.npending]
	}
}
