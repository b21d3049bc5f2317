package schema

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"strings"
)

// Envelope is the decoded value of a change record (Debezium's envelope,
// envelope.go).
type Envelope struct {
	// Before and After are rows in the table's column order, or nil. In
	// After, a column the source did not send holds Unchanged; in Before,
	// a column the source did not send is nil.
	Before, After []any
	Source        SourceInfo
	// Transaction places the change in its transaction; nil when the
	// pipeline does not write transaction metadata.
	Transaction *TxBlock
	// Op is one of c u d r t.
	Op byte
	// TsMs, TsUs and TsNs are when cdcd processed the change (since the
	// epoch); 0 is null.
	TsMs, TsUs, TsNs int64
}

// SourceInfo is the envelope's source block. Zero values of the optional
// fields are written as Avro null. Which fields a record carries depends
// on the connector: PostgreSQL's schema, txId, lsn and xmin, or MySQL's
// server_id, gtid, file, pos, row, thread and query.
type SourceInfo struct {
	Version   string
	Connector string // ConnectorPostgres or ConnectorMySQL
	Name      string // the pipeline
	// TsMs, TsUs and TsNs are the source commit time (snapshot reads: when
	// the snapshot started); TsUs and TsNs 0 are null.
	TsMs, TsUs, TsNs int64
	// Snapshot is one of the Snapshot* values ("" is written as "false").
	Snapshot string
	DB       string
	// Sequence orders changes across restarts (PostgreSQL: a JSON array of
	// the commit LSN and the change's own LSN, as decimal strings); "": null.
	Sequence string
	Schema   string
	Table    string
	TxID     uint64 // 0: null
	LSN      uint64 // the change's own WAL position; 0: null
	Xmin     uint64 // 0: null
	File     string // binlog file
	Pos      int64  // binlog position of the change's event
	Row      int32  // the row's index in its event
	ServerID int64
	GTID     string // "": null
	Thread   int64  // 0: null
	Query    string // "": null
	// Position is cdcd's sortable source position.
	Position []byte
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

// AppendEnvelope appends the Avro binary envelope to dst, in Debezium's
// layout with e.Source.Connector's source record: what ValueSchemaFor of
// t with that connector describes: AppendEnvelopeHead, AppendEnvelopeTail,
// AppendPosition.
func AppendEnvelope(dst []byte, t *Table, e *Envelope) ([]byte, error) {
	dst, absent, err := AppendEnvelopeHead(dst, t, e)
	if err != nil {
		return dst, err
	}
	return AppendPosition(AppendEnvelopeTail(dst, t, e, absent), e.Source.Position), nil
}

// AppendEnvelopeHead appends the envelope's first fields, before and
// after: the part that depends on the rows alone, not on the change's
// source, time or position. It returns the columns absent from before,
// which AppendEnvelopeTail names.
func AppendEnvelopeHead(dst []byte, t *Table, e *Envelope) ([]byte, []int, error) {
	var err error
	var absent []int
	if dst, err = appendRow(dst, t, e.Before, &absent); err != nil {
		return dst, nil, fmt.Errorf("schema: %s before: %w", t.QualifiedName(), err)
	}
	if dst, err = appendRow(dst, t, e.After, nil); err != nil {
		return dst, nil, fmt.Errorf("schema: %s after: %w", t.QualifiedName(), err)
	}
	return dst, absent, nil
}

// AppendEnvelopeTail appends the fields after AppendEnvelopeHead's but the
// last: source, transaction, op, times, the names of the unchanged and the
// absent columns. AppendPosition writes the last, the position, so two
// changes that differ only there share every byte before it.
func AppendEnvelopeTail(dst []byte, t *Table, e *Envelope, absent []int) []byte {
	dst, _ = AppendEnvelopeTailRow(dst, t, e, absent)
	return dst
}

// AppendEnvelopeTailRow is AppendEnvelopeTail also returning where in
// the result the MySQL source block's row index starts (its varint;
// -1 for other connectors). The fields after it do not depend on the row
// index, so changes of one row event that differ only there share the
// tail's bytes around it: a writer may make the tail once and splice in
// each change's row (AppendLong).
func AppendEnvelopeTailRow(dst []byte, t *Table, e *Envelope, absent []int) ([]byte, int) {
	dst, rowAt := appendSourceAt(dst, &e.Source)
	if tx := e.Transaction; tx != nil {
		dst = appendString(appendLong(dst, 1), tx.ID)
		dst = appendLong(appendLong(dst, tx.TotalOrder), tx.CollectionOrder)
	} else {
		dst = appendLong(dst, 0)
	}
	dst = appendString(dst, string([]byte{e.Op}))
	dst = appendOptLong(dst, e.TsMs, e.TsMs != 0)
	dst = appendOptLong(dst, e.TsUs, e.TsUs != 0)
	dst = appendOptLong(dst, e.TsNs, e.TsNs != 0)
	dst = appendUnchanged(dst, t, e.After)
	return appendNames(dst, t, absent), rowAt
}

// AppendLong appends v as an Avro long (zig-zag varint).
func AppendLong(dst []byte, v int64) []byte { return appendLong(dst, v) }

// AppendPosition appends the envelope's last field, the position.
func AppendPosition(dst []byte, pos []byte) []byte { return appendBytes(dst, pos) }

// appendUnchanged writes the names of row's Unchanged columns (an Avro
// array of one block).
func appendUnchanged(dst []byte, t *Table, row []any) []byte {
	n := 0
	for _, v := range row {
		if IsUnchanged(v) {
			n++
		}
	}
	if n > 0 {
		dst = appendLong(dst, int64(n))
		for i, v := range row {
			if IsUnchanged(v) {
				dst = appendString(dst, t.Columns[i].Name)
			}
		}
	}
	return appendLong(dst, 0)
}

// appendNames writes the names of the columns idx (an Avro array).
func appendNames(dst []byte, t *Table, idx []int) []byte {
	if len(idx) > 0 {
		dst = appendLong(dst, int64(len(idx)))
		for _, i := range idx {
			dst = appendString(dst, t.Columns[i].Name)
		}
	}
	return appendLong(dst, 0)
}

// appendRow writes a nullable row record. A NOT NULL column without a
// value takes its type's zero: in before (absent set) it is named in
// *absent, in after it is an error. An Unchanged value is Debezium's
// placeholder in text and bytes columns, else null or the zero.
func appendRow(dst []byte, t *Table, row []any, absent *[]int) ([]byte, error) {
	if row == nil {
		return appendLong(dst, 0), nil
	}
	if len(row) != len(t.Columns) {
		return dst, fmt.Errorf("row has %d values for %d columns", len(row), len(t.Columns))
	}
	dst = appendLong(dst, 1)
	var err error
	for i := range t.Columns {
		c := &t.Columns[i]
		v := row[i]
		switch {
		case IsUnchanged(v):
			dst = appendStandIn(dst, c)
			continue
		case v == nil && !c.Nullable:
			if absent == nil {
				return dst, &ColumnError{Column: c.Name, Err: fmt.Errorf("column %q is NOT NULL but the change has no value for it", c.Name)}
			}
			*absent = append(*absent, i)
			dst = appendFill(dst, c)
			continue
		}
		if dst, err = appendColumn(dst, c, false, v); err != nil {
			return dst, &ColumnError{Column: c.Name, Value: v, Err: err}
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

// appendSourceAt writes the source record of s.Connector and returns
// where its row index starts (-1: the connector's block has none).
func appendSourceAt(dst []byte, s *SourceInfo) ([]byte, int) {
	dst = appendString(dst, s.Version)
	dst = appendString(dst, s.Connector)
	dst = appendString(dst, s.Name)
	dst = appendLong(dst, s.TsMs)
	snap := s.Snapshot
	if snap == "" {
		snap = SnapshotFalse
	}
	dst = appendString(appendLong(dst, 0), snap) // [enum string, null]
	dst = appendString(dst, s.DB)
	dst = appendOptString(dst, s.Sequence)
	dst = appendOptLong(dst, s.TsUs, s.TsUs != 0)
	dst = appendOptLong(dst, s.TsNs, s.TsNs != 0)
	if s.Connector == ConnectorMySQL {
		dst = appendOptString(dst, s.Table)
		dst = appendLong(dst, s.ServerID)
		dst = appendOptString(dst, s.GTID)
		dst = appendString(dst, s.File)
		dst = appendLong(dst, s.Pos)
		rowAt := len(dst)
		dst = appendLong(dst, int64(s.Row))
		dst = appendOptLong(dst, s.Thread, s.Thread != 0)
		return appendOptString(dst, s.Query), rowAt
	}
	dst = appendString(dst, s.Schema)
	dst = appendString(dst, s.Table)
	dst = appendOptLong(dst, int64(s.TxID), s.TxID != 0)
	dst = appendOptLong(dst, int64(s.LSN), s.LSN != 0)
	return appendOptLong(dst, int64(s.Xmin), s.Xmin != 0), -1
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
	// The fewest bytes whose top bit is v's sign: v's significant bits
	// (of v, or of ^v when negative) and the sign bit. A load's numeric
	// column runs this for every row; the loop that dropped a byte at a
	// time was 2-3% of a load's producing CPU (session 17).
	n := max(1, (bits.Len64(uint64(v^(v>>63)))+8)/8)
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

// CommitLSN is the commit LSN of a PostgreSQL change's transaction (a
// snapshot read's: the snapshot's LSN): the first element of Sequence, or
// LSN when the record has no sequence (cdcd's former envelope, whose lsn
// was the commit LSN). 0 when neither is set.
func (s *SourceInfo) CommitLSN() uint64 {
	if rest, ok := strings.CutPrefix(s.Sequence, `["`); ok {
		if n, _, ok := strings.Cut(rest, `"`); ok {
			if v, err := strconv.ParseUint(n, 10, 64); err == nil {
				return v
			}
		}
	}
	return s.LSN
}
