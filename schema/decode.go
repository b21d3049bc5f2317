package schema

import (
	"encoding/binary"
	"fmt"
	"math"
)

// reader decodes Avro binary; the first error sticks.
type reader struct {
	buf []byte
	err error
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) long() int64 {
	if r.err != nil {
		return 0
	}
	u, n := binary.Uvarint(r.buf)
	if n <= 0 {
		r.fail(ErrShortBuffer)
		return 0
	}
	r.buf = r.buf[n:]
	return int64(u>>1) ^ -int64(u&1)
}

func (r *reader) take(n int64) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > int64(len(r.buf)) {
		r.fail(ErrShortBuffer)
		return nil
	}
	b := r.buf[:n:n]
	r.buf = r.buf[n:]
	return b
}

func (r *reader) bytes() []byte  { return r.take(r.long()) }
func (r *reader) string() string { return string(r.bytes()) }

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
	r := reader{buf: buf}
	key := make([]any, len(t.Key))
	for i, ci := range t.Key {
		key[i] = r.column(t.Columns[ci], false)
	}
	if r.err == nil && len(r.buf) != 0 {
		r.fail(fmt.Errorf("schema: %d trailing bytes after key", len(r.buf)))
	}
	if r.err != nil {
		return nil, fmt.Errorf("schema: decode %s key: %w", t.QualifiedName(), r.err)
	}
	return key, nil
}

// DecodeEnvelope decodes an Avro envelope written by AppendEnvelope for t.
func DecodeEnvelope(t *Table, buf []byte) (Envelope, error) {
	r := reader{buf: buf}
	var e Envelope
	e.Before = r.row(t)
	e.After = r.row(t)
	r.source(&e.Source)
	op := r.bytes()
	if len(op) == 1 {
		e.Op = op[0]
	} else {
		r.fail(fmt.Errorf("schema: op has %d bytes", len(op)))
	}
	e.TsMs, _ = r.optLong()
	for {
		n := r.long()
		if n == 0 || r.err != nil {
			break
		}
		if n < 0 { // a block with a byte size: skip the size
			n = -n
			r.long()
		}
		for ; n > 0 && r.err == nil; n-- {
			name := r.string()
			i := t.ColumnIndex(name)
			if i < 0 || e.After == nil {
				r.fail(fmt.Errorf("schema: unchanged column %q is not in after", name))
				break
			}
			e.After[i] = Unchanged
		}
	}
	if r.err == nil && len(r.buf) != 0 {
		r.fail(fmt.Errorf("schema: %d trailing bytes after envelope", len(r.buf)))
	}
	if r.err != nil {
		return Envelope{}, fmt.Errorf("schema: decode %s envelope: %w", t.QualifiedName(), r.err)
	}
	return e, nil
}

func (r *reader) row(t *Table) []any {
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
		row[i] = r.column(c, true)
	}
	return row
}

func (r *reader) source(s *SourceInfo) {
	s.Version = r.string()
	s.Connector = r.string()
	s.Name = r.string()
	s.TsMs = r.long()
	s.Snapshot = r.optString()
	s.DB = r.string()
	s.Schema = r.optString()
	s.Table = r.string()
	tx, _ := r.optLong()
	s.TxID = uint64(tx)
	lsn, _ := r.optLong()
	s.LSN = uint64(lsn)
	s.File = r.optString()
	s.Pos, _ = r.optLong()
	s.GTID = r.optString()
	s.Position = append([]byte(nil), r.bytes()...)
}

func (r *reader) column(c Column, nullable bool) any {
	branch := int64(0)
	if nullable || c.Nullable {
		branch = r.long()
		if branch == 0 {
			return nil
		}
		branch--
	}
	if c.Kind == Decimal && c.Precision > 0 {
		if !nullable && !c.Nullable {
			branch = r.long() // a union even when not nullable
		}
		switch branch {
		case 0:
			return formatDecimal(fromTwosComplement(r.bytes()), c.Scale)
		case 1:
			return r.string()
		}
	} else if branch == 0 {
		return r.value(c)
	}
	r.fail(fmt.Errorf("schema: column %q: bad union index", c.Name))
	return nil
}

// value reads a non-null value of a type that is not a union.
func (r *reader) value(c Column) any {
	switch c.Kind {
	case Bool:
		b := r.take(1)
		if b == nil {
			return nil
		}
		return b[0] != 0
	case Int16, Int32, Int64, Time, Timestamp, TimestampTZ:
		return r.long()
	case Date:
		return int32(r.long())
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
	case String, JSON, Decimal:
		return r.string()
	case Bytes:
		return append([]byte{}, r.bytes()...) // never alias the record buffer
	case UUID:
		u, err := ParseUUID(r.string())
		if err != nil {
			r.fail(err)
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
			if n > int64(len(r.buf)) { // every element takes a byte at least
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
