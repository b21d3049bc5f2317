package schema

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
)

// Envelope is the decoded value of a change record (Debezium's envelope).
type Envelope struct {
	// Before and After are rows in the table's column order, or nil. In
	// After, a column the source did not send holds Unchanged.
	Before, After []any
	Source        SourceInfo
	// Op is one of c u d r t.
	Op byte
	// TsMs is when cdcd processed the change (milliseconds since the epoch).
	TsMs int64
}

// SourceInfo is the envelope's source block. Zero values of the optional
// fields are written as Avro null.
type SourceInfo struct {
	Version   string
	Connector string // "postgresql" or "mysql"
	Name      string // the pipeline
	TsMs      int64  // source commit time
	Snapshot  string // "true", "last", "false" or "" (null)
	DB        string
	Schema    string
	Table     string
	TxID      uint64 // 0: null
	LSN       uint64 // 0: null
	File      string // binlog file; "": null (and Pos is null)
	Pos       int64
	GTID      string
	Position  []byte // cdcd's sortable source position
}

// ErrShortBuffer reports Avro data that ends early.
var ErrShortBuffer = errors.New("schema: avro data ends early")

// AppendKey appends the Avro binary key record of row (a full row in column
// order) to dst.
func AppendKey(dst []byte, t *Table, row []any) ([]byte, error) {
	var err error
	for _, i := range t.Key {
		if dst, err = appendColumn(dst, &t.Columns[i], false, row[i]); err != nil {
			return dst, fmt.Errorf("schema: %s key: %w", t.QualifiedName(), &ColumnError{Column: t.Columns[i].Name, Value: row[i], Err: err})
		}
	}
	return dst, nil
}

// AppendEnvelope appends the Avro binary envelope to dst.
func AppendEnvelope(dst []byte, t *Table, e *Envelope) ([]byte, error) {
	var err error
	if dst, err = appendRow(dst, t, e.Before); err != nil {
		return dst, fmt.Errorf("schema: %s before: %w", t.QualifiedName(), err)
	}
	if dst, err = appendRow(dst, t, e.After); err != nil {
		return dst, fmt.Errorf("schema: %s after: %w", t.QualifiedName(), err)
	}
	dst = appendSource(dst, &e.Source)
	dst = appendString(dst, string([]byte{e.Op}))
	dst = appendOptLong(dst, e.TsMs, e.TsMs != 0)
	// unchanged: array of column names, one block.
	n := 0
	for _, v := range e.After {
		if IsUnchanged(v) {
			n++
		}
	}
	if n > 0 {
		dst = appendLong(dst, int64(n))
		for i, v := range e.After {
			if IsUnchanged(v) {
				dst = appendString(dst, t.Columns[i].Name)
			}
		}
	}
	return appendLong(dst, 0), nil
}

func appendRow(dst []byte, t *Table, row []any) ([]byte, error) {
	if row == nil {
		return appendLong(dst, 0), nil
	}
	if len(row) != len(t.Columns) {
		return dst, fmt.Errorf("row has %d values for %d columns", len(row), len(t.Columns))
	}
	dst = appendLong(dst, 1)
	var err error
	for i := range t.Columns {
		v := row[i]
		if IsUnchanged(v) {
			v = nil
		}
		if dst, err = appendColumn(dst, &t.Columns[i], true, v); err != nil {
			return dst, &ColumnError{Column: t.Columns[i].Name, Value: v, Err: err}
		}
	}
	return dst, nil
}

// ColumnError is a row's value that its column's encoding refuses (a NaN
// in a constrained numeric). Its text is Err's; Column and Value say where.
type ColumnError struct {
	Column string
	Value  any
	Err    error
}

func (e *ColumnError) Error() string { return e.Err.Error() }
func (e *ColumnError) Unwrap() error { return e.Err }

func appendSource(dst []byte, s *SourceInfo) []byte {
	dst = appendString(dst, s.Version)
	dst = appendString(dst, s.Connector)
	dst = appendString(dst, s.Name)
	dst = appendLong(dst, s.TsMs)
	dst = appendOptString(dst, s.Snapshot)
	dst = appendString(dst, s.DB)
	dst = appendOptString(dst, s.Schema)
	dst = appendString(dst, s.Table)
	dst = appendOptLong(dst, int64(s.TxID), s.TxID != 0)
	dst = appendOptLong(dst, int64(s.LSN), s.LSN != 0)
	dst = appendOptString(dst, s.File)
	dst = appendOptLong(dst, s.Pos, s.File != "")
	dst = appendOptString(dst, s.GTID)
	return appendBytes(dst, s.Position)
}

// appendColumn writes one value; nullable says the field is a [null, T]
// union (every row field is, see ValueSchema; key fields are not).
func appendColumn(dst []byte, c *Column, nullable bool, v any) ([]byte, error) {
	nullable = nullable || c.Nullable
	if v == nil {
		if !nullable {
			return dst, fmt.Errorf("column %q: NULL in a NOT NULL field", c.Name)
		}
		return appendLong(dst, 0), nil
	}
	if nullable {
		dst = appendLong(dst, 1)
	}
	return appendValue(dst, c, v)
}

func badValue(c *Column, v any) error {
	return fmt.Errorf("column %q (%s): unexpected Go value %T", c.Name, c.TypeString(), v)
}

// appendValue writes a non-null value of a type that is not a union.
func appendValue(dst []byte, c *Column, v any) ([]byte, error) {
	switch c.Kind {
	case Bool:
		b, ok := v.(bool)
		if !ok {
			return dst, badValue(c, v)
		}
		if b {
			return append(dst, 1), nil
		}
		return append(dst, 0), nil
	case Int16, Int32, Int64, Time, Timestamp, TimestampTZ:
		i, ok := v.(int64)
		if !ok {
			return dst, badValue(c, v)
		}
		return appendLong(dst, i), nil
	case Date:
		d, ok := v.(int32)
		if !ok {
			return dst, badValue(c, v)
		}
		return appendLong(dst, int64(d)), nil
	case Float32:
		f, ok := v.(float32)
		if !ok {
			return dst, badValue(c, v)
		}
		return binary.LittleEndian.AppendUint32(dst, math.Float32bits(f)), nil
	case Float64:
		f, ok := v.(float64)
		if !ok {
			return dst, badValue(c, v)
		}
		return binary.LittleEndian.AppendUint64(dst, math.Float64bits(f)), nil
	case String, JSON:
		s, ok := v.(string)
		if !ok {
			return dst, badValue(c, v)
		}
		return appendString(dst, s), nil
	case Decimal:
		s, ok := v.(string)
		if !ok {
			return dst, badValue(c, v)
		}
		if c.Precision == 0 {
			return appendString(dst, s), nil
		}
		if v, ok := unscaledInt64(s, c.Scale); ok {
			return appendInt64Decimal(dst, v), nil
		}
		if s == "NaN" || s == "Infinity" || s == "-Infinity" {
			return dst, fmt.Errorf("column %q (%s) holds %s, which an Avro or Iceberg decimal cannot carry: "+
				"alter the column to unconstrained numeric (carried as exact text) or keep %s out of it", c.Name, c.TypeString(), s, s)
		}
		u, err := unscaled(s, c.Scale)
		if err != nil {
			return dst, fmt.Errorf("column %q: %w", c.Name, err)
		}
		return appendBytes(dst, twosComplement(u)), nil
	case Bytes:
		b, ok := v.([]byte)
		if !ok {
			return dst, badValue(c, v)
		}
		return appendBytes(dst, b), nil
	case UUID:
		u, ok := v.([16]byte)
		if !ok {
			return dst, badValue(c, v)
		}
		return appendString(dst, FormatUUID(u)), nil
	case Interval:
		iv, ok := v.(IntervalValue)
		if !ok {
			return dst, badValue(c, v)
		}
		dst = appendLong(dst, int64(iv.Months))
		dst = appendLong(dst, int64(iv.Days))
		return appendLong(dst, iv.Micros), nil
	case List:
		l, ok := v.([]any)
		if !ok || c.Elem == nil {
			return dst, badValue(c, v)
		}
		if len(l) == 0 {
			return appendLong(dst, 0), nil
		}
		dst = appendLong(dst, int64(len(l)))
		var err error
		for _, e := range l {
			if dst, err = appendColumn(dst, c.Elem, false, e); err != nil {
				return dst, fmt.Errorf("list %q: %w", c.Name, err)
			}
		}
		return appendLong(dst, 0), nil
	}
	return dst, badValue(c, v)
}

func appendLong(dst []byte, v int64) []byte {
	return binary.AppendUvarint(dst, uint64(v<<1)^uint64(v>>63))
}

func appendString(dst []byte, s string) []byte {
	dst = appendLong(dst, int64(len(s)))
	return append(dst, s...)
}

func appendBytes(dst []byte, b []byte) []byte {
	dst = appendLong(dst, int64(len(b)))
	return append(dst, b...)
}

func appendOptString(dst []byte, s string) []byte {
	if s == "" {
		return appendLong(dst, 0)
	}
	return appendString(appendLong(dst, 1), s)
}

func appendOptLong(dst []byte, v int64, ok bool) []byte {
	if !ok {
		return appendLong(dst, 0)
	}
	return appendLong(appendLong(dst, 1), v)
}

// unscaled parses decimal text into its unscaled integer at scale. Text
// with more fractional digits than scale is an error (never rounded).
func unscaled(s string, scale int) (*big.Int, error) {
	neg := false
	t := s
	if strings.HasPrefix(t, "-") {
		neg, t = true, t[1:]
	} else if strings.HasPrefix(t, "+") {
		t = t[1:]
	}
	intPart, frac, _ := strings.Cut(t, ".")
	frac = strings.TrimRight(frac, "0")
	if len(frac) > scale {
		return nil, fmt.Errorf("decimal %q has more than %d fractional digits", s, scale)
	}
	digits := intPart + frac + strings.Repeat("0", scale-len(frac))
	if digits == "" {
		return nil, fmt.Errorf("decimal %q is not a number", s)
	}
	u, ok := new(big.Int).SetString(digits, 10)
	if !ok {
		return nil, fmt.Errorf("decimal %q is not a number", s)
	}
	if neg {
		u.Neg(u)
	}
	return u, nil
}

// unscaledInt64 is unscaled's fast path: decimal text with at most 18
// digits in all, which fits an int64 at scale. ok is false for anything
// else (more digits, a bad character, too many fractional digits), which
// then takes the exact big.Int path and its errors.
func unscaledInt64(s string, scale int) (int64, bool) {
	i, neg := 0, false
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		neg, i = s[i] == '-', i+1
	}
	var v int64
	digits, frac, dot := 0, 0, false
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.' && !dot:
			dot = true
		case c >= '0' && c <= '9':
			if dot {
				frac++
			}
			digits++
			v = v*10 + int64(c-'0')
		default:
			return 0, false
		}
	}
	if digits == 0 || frac > scale || digits+scale-frac > 18 {
		return 0, false
	}
	for ; frac < scale; frac++ {
		v *= 10
	}
	if neg {
		v = -v
	}
	return v, true
}

// appendInt64Decimal appends v as Avro bytes: the minimal big-endian two's
// complement, as twosComplement writes a big.Int.
func appendInt64Decimal(dst []byte, v int64) []byte {
	n := 8
	for n > 1 {
		top, next := byte(v>>(8*(n-1))), byte(v>>(8*(n-2)))
		if (top == 0 && next&0x80 == 0) || (top == 0xff && next&0x80 != 0) {
			n--
			continue
		}
		break
	}
	dst = appendLong(dst, int64(n))
	for i := n - 1; i >= 0; i-- {
		dst = append(dst, byte(v>>(8*i)))
	}
	return dst
}

// twosComplement returns the minimal big-endian two's-complement bytes of u.
func twosComplement(u *big.Int) []byte {
	if u.Sign() >= 0 {
		b := u.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	// -u = ^(u-1): write (|u|-1) inverted, with room for the sign bit.
	m := new(big.Int).Neg(u)
	m.Sub(m, big.NewInt(1))
	b := m.Bytes()
	if len(b) == 0 || b[0]&0x80 != 0 {
		b = append([]byte{0}, b...)
	}
	for i := range b {
		b[i] = ^b[i]
	}
	return b
}

// fromTwosComplement is the inverse of twosComplement.
func fromTwosComplement(b []byte) *big.Int {
	u := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		u.Sub(u, new(big.Int).Lsh(big.NewInt(1), uint(len(b))*8))
	}
	return u
}

// formatDecimal renders unscaled u at scale as decimal text ("-1.50").
func formatDecimal(u *big.Int, scale int) string {
	s := new(big.Int).Abs(u).String()
	if scale > 0 {
		if len(s) <= scale {
			s = strings.Repeat("0", scale-len(s)+1) + s
		}
		s = s[:len(s)-scale] + "." + s[len(s)-scale:]
	}
	if u.Sign() < 0 {
		s = "-" + s
	}
	return s
}

// FormatUUID renders u in the canonical 8-4-4-4-12 form.
func FormatUUID(u [16]byte) string {
	const hex = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = hex[c>>4], hex[c&15]
		j += 2
	}
	return string(b[:])
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
