package schema

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
)

// reader decodes Avro binary; the first error sticks. Every length read
// from the data is checked against the bytes left before anything is
// allocated, so garbage costs at most a copy of its own size.
//
// Strings are substrings of one copy of the record (made on the first
// string), one allocation instead of one per string; a string kept alive
// keeps that copy alive, which for records of a few hundred bytes costs
// less than the allocations it saves.
//
// The reader moves an offset (pos) through the record rather than a slice:
// storing a slice through the reader's pointer is a write barrier while
// the collector marks, a cost per value that a load, which allocates
// enough to keep the collector marking much of the time, paid for every
// varint of every envelope the sink scanned.
type reader struct {
	buf []byte // the whole record
	pos int    // where the next value starts
	err error
	str string // string(buf), made on first use
}

func newReader(buf []byte) reader { return reader{buf: buf} }

// left is the number of bytes not read yet.
func (r *reader) left() int { return len(r.buf) - r.pos }

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) long() int64 {
	if r.err != nil {
		return 0
	}
	u, n := binary.Uvarint(r.buf[r.pos:])
	if n <= 0 {
		if n < 0 {
			r.fail(errVarint)
		} else {
			r.fail(ErrShortBuffer)
		}
		return 0
	}
	r.pos += n
	return int64(u>>1) ^ -int64(u&1)
}

func (r *reader) take(n int64) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > int64(r.left()) {
		r.fail(ErrShortBuffer)
		return nil
	}
	b := r.buf[r.pos : r.pos+int(n) : r.pos+int(n)]
	r.pos += int(n)
	return b
}

func (r *reader) bytes() []byte { return r.take(r.long()) }

// string returns the next string as a substring of the record's copy.
func (r *reader) string() string {
	b := r.bytes()
	if len(b) == 0 {
		return ""
	}
	if r.str == "" {
		r.str = string(r.buf)
	}
	return r.str[r.pos-len(b) : r.pos]
}

// int reads an Avro int: a long in the int32 range.
func (r *reader) int() int64 {
	v := r.long()
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.fail(fmt.Errorf("schema: int value %d out of range", v))
		return 0
	}
	return v
}

var errVarint = errors.New("schema: avro varint longer than 64 bits")

func (r *reader) optString() string {
	switch r.long() {
	case 0:
		return ""
	case 1:
		return r.string()
	}
	r.fail(fmt.Errorf("schema: bad union index"))
	return ""
}

func (r *reader) optLong() (int64, bool) {
	switch r.long() {
	case 0:
		return 0, false
	case 1:
		return r.long(), true
	}
	r.fail(fmt.Errorf("schema: bad union index"))
	return 0, false
}

// DecodeKey decodes an Avro key record of t into the key values, in key order.
func DecodeKey(t *Table, buf []byte) ([]any, error) {
	r := newReader(buf)
	key := make([]any, len(t.Key))
	for i, ci := range t.Key {
		key[i] = r.column(t.Columns[ci], false)
	}
	if r.err == nil && r.left() != 0 {
		r.fail(fmt.Errorf("schema: %d trailing bytes after key", r.left()))
	}
	if r.err != nil {
		return nil, fmt.Errorf("schema: decode %s key: %w", t.QualifiedName(), r.err)
	}
	return key, nil
}

// DecodeEnvelope decodes an envelope of t: written by AppendEnvelope, or
// in the layout of the value schema t was rebuilt from
// (TableFromValueSchema), cdcd's legacy one included.
func DecodeEnvelope(t *Table, buf []byte) (Envelope, error) {
	r := newReader(buf)
	var e Envelope
	if t.envelope == layoutLegacy {
		r.legacyEnvelope(t, &e)
	} else {
		r.envelope(t, &e)
	}
	if r.err == nil && r.left() != 0 {
		r.fail(fmt.Errorf("schema: %d trailing bytes after envelope", r.left()))
	}
	if r.err != nil {
		return Envelope{}, fmt.Errorf("schema: decode %s envelope: %w", t.QualifiedName(), r.err)
	}
	return e, nil
}

// envelope reads Debezium's layout (envelope.go).
func (r *reader) envelope(t *Table, e *Envelope) {
	e.Before = r.row(t, false)
	e.After = r.row(t, false)
	r.source(&e.Source, t.envelope)
	switch r.long() {
	case 0:
	case 1:
		e.Transaction = &TxBlock{ID: r.string(), TotalOrder: r.long(), CollectionOrder: r.long()}
	default:
		r.fail(fmt.Errorf("schema: transaction: bad union index"))
	}
	e.Op = r.op()
	e.TsMs, _ = r.optLong()
	e.TsUs, _ = r.optLong()
	e.TsNs, _ = r.optLong()
	r.unchanged(t, e)
	r.names(func(name string) bool {
		i := t.ColumnIndex(name)
		if i < 0 || e.Before == nil {
			r.fail(fmt.Errorf("schema: absent column %q is not in before", name))
			return false
		}
		e.Before[i] = nil
		return true
	})
	e.Source.Position = append([]byte(nil), r.bytes()...)
}

// unchanged reads the envelope's unchanged list into e.After.
func (r *reader) unchanged(t *Table, e *Envelope) {
	r.names(func(name string) bool {
		i := t.ColumnIndex(name)
		if i < 0 || e.After == nil {
			r.fail(fmt.Errorf("schema: unchanged column %q is not in after", name))
			return false
		}
		e.After[i] = Unchanged
		return true
	})
}

// op reads the envelope's op: one letter.
func (r *reader) op() byte {
	op := r.bytes()
	if len(op) != 1 {
		r.fail(fmt.Errorf("schema: op has %d bytes", len(op)))
		return 0
	}
	return op[0]
}

// names calls fn with each string of an array of strings, until it
// returns false.
func (r *reader) names(fn func(string) bool) {
	for r.err == nil {
		n := r.long()
		if n == 0 || r.err != nil {
			return
		}
		if n < 0 { // a block with a byte size: skip the size
			n = -n
			r.long()
		}
		for ; n > 0 && r.err == nil; n-- {
			if !fn(r.string()) {
				return
			}
		}
	}
}

// row reads a nullable row record; legacy: every field is a union.
func (r *reader) row(t *Table, legacy bool) []any {
	switch r.long() {
	case 0:
		return nil
	case 1:
	default:
		r.fail(fmt.Errorf("schema: bad union index"))
		return nil
	}
	row := make([]any, len(t.Columns))
	for i, c := range t.Columns {
		row[i] = r.column(c, legacy)
	}
	return row
}

// source reads the source record of layout l (PostgreSQL's or MySQL's).
func (r *reader) source(s *SourceInfo, l envelopeLayout) {
	s.Version = r.string()
	s.Connector = r.string()
	s.Name = r.string()
	s.TsMs = r.long()
	s.Snapshot = r.snapshot()
	s.DB = r.string()
	s.Sequence = r.optString()
	s.TsUs, _ = r.optLong()
	s.TsNs, _ = r.optLong()
	if l == layoutMySQL {
		s.Table = r.optString()
		s.ServerID = r.long()
		s.GTID = r.optString()
		s.File = r.string()
		s.Pos = r.long()
		s.Row = int32(r.int())
		s.Thread, _ = r.optLong()
		s.Query = r.optString()
		return
	}
	s.Schema = r.string()
	s.Table = r.string()
	tx, _ := r.optLong()
	s.TxID = uint64(tx)
	lsn, _ := r.optLong()
	s.LSN = uint64(lsn)
	xmin, _ := r.optLong()
	s.Xmin = uint64(xmin)
}

// snapshot reads source.snapshot, a [string, null] union.
func (r *reader) snapshot() string {
	switch r.long() {
	case 0:
		return r.string()
	case 1:
		return ""
	}
	r.fail(fmt.Errorf("schema: snapshot: bad union index"))
	return ""
}

func (r *reader) column(c Column, nullable bool) any {
	if nullable || c.Nullable {
		switch r.long() {
		case 0:
			return nil
		case 1:
		default:
			r.fail(fmt.Errorf("schema: column %q: bad union index", c.Name))
			return nil
		}
	}
	return r.value(c)
}

// value reads a non-null value.
func (r *reader) value(c Column) any {
	switch c.Kind {
	case Bool:
		b := r.take(1)
		if b == nil {
			return nil
		}
		if b[0] > 1 {
			r.fail(fmt.Errorf("schema: column %q: boolean byte %d", c.Name, b[0]))
		}
		return b[0] == 1
	case Int16, Int32:
		return r.int()
	case Int64, Time, Timestamp, TimestampTZ:
		return r.long()
	case Date:
		return int32(r.int())
	case Float32:
		b := r.take(4)
		if b == nil {
			return nil
		}
		return math.Float32frombits(binary.LittleEndian.Uint32(b))
	case Float64:
		b := r.take(8)
		if b == nil {
			return nil
		}
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	case String, JSON:
		return r.string()
	case Decimal:
		if c.Precision == 0 {
			return r.string()
		}
		return r.decimal(c)
	case Bytes:
		return append([]byte{}, r.bytes()...) // never alias the record buffer
	case UUID:
		u, ok := parseUUID(r.bytes())
		if !ok && r.err == nil {
			r.fail(fmt.Errorf("schema: column %q: bad uuid", c.Name))
		}
		return u
	case Interval:
		return IntervalValue{Months: int32(r.long()), Days: int32(r.long()), Micros: r.long()}
	case List:
		if c.Elem == nil {
			break
		}
		l := []any{}
		for r.err == nil {
			n := r.long()
			if n == 0 {
				break
			}
			if n < 0 { // a block with a byte size: skip the size
				n = -n
				r.long()
			}
			if n > int64(r.left()) { // every element takes a byte at least
				r.fail(ErrShortBuffer)
				break
			}
			for ; n > 0 && r.err == nil; n-- {
				l = append(l, r.column(*c.Elem, false))
			}
		}
		return l
	}
	r.fail(fmt.Errorf("schema: column %q: unknown kind %s", c.Name, c.Kind))
	return nil
}

// decimal reads a decimal(p,s) value as text. Its bytes may not be longer
// than precision p needs (after dropping redundant sign bytes): a longer
// value is corrupt, and refusing it bounds the cost of formatting garbage.
func (r *reader) decimal(c Column) any {
	b := r.bytes()
	if r.err != nil {
		return nil
	}
	for len(b) > 1 && len(b) > decimalMaxBytes(c.Precision) &&
		((b[0] == 0 && b[1]&0x80 == 0) || (b[0] == 0xff && b[1]&0x80 != 0)) {
		b = b[1:]
	}
	if len(b) > decimalMaxBytes(c.Precision) {
		r.fail(fmt.Errorf("schema: column %q: decimal of %d bytes exceeds precision %d", c.Name, len(b), c.Precision))
		return nil
	}
	if len(b) <= 8 {
		var v int64
		if len(b) > 0 {
			v = int64(int8(b[0]))
			for _, x := range b[1:] {
				v = v<<8 | int64(x)
			}
		}
		return formatDecimal64(v, c.Scale)
	}
	return formatDecimal(fromTwosComplement(b), c.Scale)
}

// decimalMaxBytes bounds the two's-complement bytes a decimal of
// precision p needs: 10^p - 1 takes p*log2(10) bits (rounded up here with
// 3.322 > log2(10)), plus a sign bit.
func decimalMaxBytes(p int) int {
	return ((p*3322+999)/1000 + 1 + 7) / 8
}

// formatDecimal64 is formatDecimal for an unscaled value that fits int64.
func formatDecimal64(v int64, scale int) string {
	var buf [48]byte
	u := uint64(v)
	if v < 0 {
		u = -u
	}
	digits := strconv.AppendUint(buf[24:24], u, 10)
	if scale <= 0 {
		if v < 0 {
			return "-" + string(digits)
		}
		return string(digits)
	}
	if scale > 20 {
		return formatDecimal(big.NewInt(v), scale)
	}
	out := buf[:0]
	if v < 0 {
		out = append(out, '-')
	}
	// digits lives in buf[24:], out grows from buf[0:]: at most 22 bytes
	// ('-', "0.", 19 zeros) before digits are copied, so no overlap.
	if len(digits) <= scale {
		out = append(out, '0', '.')
		for range scale - len(digits) {
			out = append(out, '0')
		}
		return string(append(out, digits...))
	}
	whole := len(digits) - scale
	out = append(out, digits[:whole]...)
	out = append(out, '.')
	return string(append(out, digits[whole:]...))
}

// parseUUID parses a UUID's canonical form (hyphens optional) without
// allocating.
func parseUUID(b []byte) ([16]byte, bool) {
	var u [16]byte
	j := 0
	for i := 0; i < len(b); i++ {
		if b[i] == '-' {
			continue
		}
		hi, ok1 := unhex(b[i])
		if i+1 >= len(b) || j >= 16 {
			return u, false
		}
		lo, ok2 := unhex(b[i+1])
		if !ok1 || !ok2 {
			return u, false
		}
		u[j] = hi<<4 | lo
		j++
		i++
	}
	return u, j == 16
}
