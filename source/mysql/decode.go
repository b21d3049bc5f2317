package mysql

import (
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
)

// Values reach cdcd three ways: decoded from the binlog's bytes by
// image.go (the stream), decoded by go-mysql (the stream's tables with a
// column image.go does not read: MySQL's binary JSON) and as the text
// protocol's bytes of a SELECT (the load). All end in the same table-model
// value: decimals in canonical text, dates as days, DATETIME and TIMESTAMP
// as microseconds, zero dates as nil, labels and character sets through
// the same functions. go-mysql gives TIMESTAMP and DATETIME as time.Time
// (ParseTime), zero and pre-1970 DATETIMEs, DATE and TIME as text.

// errBadValue is wrapped by every value that cannot be decoded.
var errBadValue = errors.New("mysql: bad value")

// fromBinlog converts a value go-mysql decoded from a row image (rowsHook
// leaves it to go-mysql).
func fromBinlog(t *colType, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch t.Base {
	case "tinyint", "smallint", "mediumint", "int", "bigint":
		return binlogInt(t, v)
	case "decimal":
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%w: decimal as %T", errBadValue, v)
		}
		return normalizeDecimal(s)
	case "float":
		if f, ok := v.(float32); ok {
			return f, nil
		}
	case "double":
		if f, ok := v.(float64); ok {
			return f, nil
		}
	case "bit":
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("%w: bit as %T", errBadValue, v)
		}
		if t.Length == 1 {
			return n != 0, nil
		}
		b := make([]byte, 8)
		binary.BigEndian.PutUint64(b, uint64(n))
		return b[8-(t.Length+7)/8:], nil
	case "year":
		if n, ok := v.(int); ok {
			return int64(n), nil
		}
	case "date", "time", "datetime", "timestamp":
		switch x := v.(type) {
		case time.Time: // ParseTime: a TIMESTAMP's instant, a DATETIME's fields in UTC
			if t.Base == "datetime" || t.Base == "timestamp" {
				return x.UnixMicro(), nil
			}
		case string: // zero and pre-1970 DATETIMEs, DATE, TIME
			return parseTemporal(t.Base, x)
		}
		return nil, fmt.Errorf("%w: %s as %T", errBadValue, t.Base, v)
	case "char", "varchar", "text":
		if sv, ok := v.(string); ok && isUTF8Charset(t.Charset) {
			if !utf8.ValidString(sv) {
				return nil, fmt.Errorf("%w: %s text that is not valid UTF-8", errBadValue, t.Charset)
			}
			return sv, nil // go-mysql's string is the value's own copy
		}
		return decodeText(t.Charset, asBytes(v))
	case "binary":
		b := asBytes(v)
		out := make([]byte, max(len(b), t.Length)) // the binlog drops trailing zero bytes
		copy(out, b)
		return out, nil
	case "varbinary", "blob":
		return append([]byte{}, asBytes(v)...), nil
	case "enum":
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("%w: enum as %T", errBadValue, v)
		}
		return enumLabel(t, n)
	case "set":
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("%w: set as %T", errBadValue, v)
		}
		return setLabels(t, uint64(n))
	case "json":
		if t.binaryJSON {
			return mysqlJSONText(asBytes(v))
		}
		return string(asBytes(v)), nil // MariaDB: the stored text
	case "geometry":
		b := asBytes(v)
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: geometry of %d bytes", errBadValue, len(b))
		}
		return append([]byte{}, b[4:]...), nil // drop the SRID: WKB
	}
	return nil, fmt.Errorf("%w: %s as %T", errBadValue, t.Base, v)
}

func asBytes(v any) []byte {
	switch v := v.(type) {
	case string:
		return []byte(v)
	case []byte:
		return v
	}
	return nil
}

func binlogInt(t *colType, v any) (any, error) {
	var n int64
	switch v := v.(type) {
	case int8:
		n = int64(v)
	case int16:
		n = int64(v)
	case int32:
		n = int64(v)
	case int64:
		n = v
	case uint8:
		n = int64(v)
	case uint16:
		n = int64(v)
	case uint32:
		n = int64(v)
	case uint64:
		if t.Base == "bigint" && t.Unsigned {
			return strconv.FormatUint(v, 10), nil
		}
		n = int64(v)
	default:
		return nil, fmt.Errorf("%w: %s as %T", errBadValue, t.Base, v)
	}
	if t.Base == "bigint" && t.Unsigned {
		return strconv.FormatUint(uint64(n), 10), nil
	}
	return n, nil
}

// fromText converts a value of the text protocol, as the load selects it
// (see selectExpr).
func fromText(t *colType, b []byte) (any, error) { return slabText(t, b, nil) }

// slabText is fromText with the value's text and number in slab (nil:
// each boxed alone): a chunk's rows are emitted and dropped together, so
// one slab chunk serves thousands of values instead of an allocation each.
func slabText(t *colType, b []byte, slab *pgdecode.Slab) (any, error) {
	if b == nil {
		return nil, nil
	}
	// string(b) only where the string is kept: a conversion that does not
	// escape (the parses) needs no allocation for short values.
	switch t.Base {
	case "tinyint", "smallint", "mediumint", "int", "bigint", "year":
		if t.Base == "bigint" && t.Unsigned {
			s := string(b)
			if _, err := strconv.ParseUint(s, 10, 64); err != nil {
				return nil, fmt.Errorf("%w: %q: %v", errBadValue, s, err)
			}
			return s, nil
		}
		n, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", errBadValue, b, err)
		}
		return n, nil
	case "decimal":
		if canonicalDecimal(b) {
			return slab.Text(b), nil // the server's text, as it mostly is
		}
		return normalizeDecimal(string(b))
	case "float", "double":
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", errBadValue, b, err)
		}
		if t.Base == "float" {
			return float32(f), nil
		}
		return f, nil
	case "bit":
		if t.Length == 1 {
			return len(b) > 0 && b[len(b)-1] != 0, nil
		}
		out := make([]byte, (t.Length+7)/8)
		copy(out[max(0, len(out)-len(b)):], b)
		return out, nil
	case "date", "time", "datetime", "timestamp":
		return slabTemporal(t.Base, string(b), slab)
	case "char", "varchar", "text", "enum", "set", "json":
		if !utf8.Valid(b) {
			return nil, fmt.Errorf("%w: text that is not UTF-8", errBadValue)
		}
		return slab.Text(b), nil
	case "binary", "varbinary", "blob", "geometry":
		return append([]byte{}, b...), nil
	}
	return nil, fmt.Errorf("%w: type %s", errBadValue, t.Base)
}

// scanned is one column of a row the load reads: go-sql-driver parses the
// text of integer and floating-point columns itself (into int64, uint64,
// float64), which a RawBytes destination would make database/sql format
// back into text for fromText to parse a third time; every other column
// stays the driver's bytes, uncopied.
type scanned struct {
	raw sql.RawBytes
	num any
	// slab holds the column's converted texts and numbers (slabText);
	// integers and doubles stay in the driver's own boxes.
	slab pgdecode.Slab
}

// scanDests returns a row's destinations for Scan, by column type.
func scanDests(cols []colType) ([]scanned, []any) {
	vals := make([]scanned, len(cols))
	ptrs := make([]any, len(cols))
	for i := range cols {
		switch cols[i].Base {
		case "tinyint", "smallint", "mediumint", "int", "bigint", "year", "float", "double":
			ptrs[i] = &vals[i].num
		default:
			ptrs[i] = &vals[i].raw
		}
	}
	return vals, ptrs
}

// value converts a scanned value of column t into the table model.
func (s *scanned) value(t *colType) (any, error) {
	switch v := s.num.(type) {
	case nil:
		return slabText(t, s.raw, &s.slab)
	case int64:
		if t.Base == "bigint" && t.Unsigned {
			return strconv.FormatUint(uint64(v), 10), nil
		}
		if t.Base == "float" || t.Base == "double" {
			break
		}
		return s.num, nil // the driver's box, not a new one
	case uint64:
		if t.Base == "bigint" && t.Unsigned {
			return strconv.FormatUint(v, 10), nil
		}
	case float64:
		switch t.Base {
		case "float":
			return float32(v), nil
		case "double":
			return s.num, nil
		}
	case []byte:
		return slabText(t, v, &s.slab)
	}
	return nil, fmt.Errorf("%w: %s as %T", errBadValue, t.Base, s.num)
}

// rowSlab hands out rows (a value per column) carved from one allocation
// per slabRows rows, instead of one allocation per row. A row keeps its
// slab alive: the rows of a chunk or a batch are emitted and dropped
// together.
type rowSlab []any

const slabRows = 256

// next returns a zeroed row of n values; a nil slab allocates it alone.
func (s *rowSlab) next(n int) []any {
	if s == nil {
		return make([]any, n)
	}
	if len(*s) < n {
		*s = make([]any, n*slabRows)
	}
	row := (*s)[:n:n]
	*s = (*s)[n:]
	return row
}

// rowArena hands out the stream's rows like rowSlab, from chunks that are
// used again once every row handed out is free (reset): the stream resets
// it when its batch was handed over (the Emitter keeps nothing of a batch
// but its positions) or is empty, after copying the rows of the change it
// keeps. A streamed row's values were one allocation per slabRows rows, a
// tenth of a streaming daemon's allocations, garbage as fast as the stream
// read. The chunks hold at most the rows decoded between two hand-overs (a
// batch's, BatchMax changes).
type rowArena struct {
	chunks [][]any
	i, off int // the chunk being cut and where
}

// next returns a zeroed row of n values; a nil arena allocates it alone.
func (a *rowArena) next(n int) []any {
	if a == nil {
		return make([]any, n)
	}
	for ; a.i < len(a.chunks); a.i, a.off = a.i+1, 0 {
		if c := a.chunks[a.i]; a.off+n <= len(c) {
			a.off += n
			return c[a.off-n : a.off : a.off]
		}
	}
	a.chunks = append(a.chunks, make([]any, n*slabRows))
	a.off = n
	return a.chunks[a.i][:n:n]
}

// reset makes every row handed out free again, zeroed (next's rows are,
// and a value left behind would keep its event's bytes alive).
// REQUIRES: nothing refers to a row handed out.
func (a *rowArena) reset() {
	for j := 0; j < a.i && j < len(a.chunks); j++ {
		clear(a.chunks[j])
	}
	if a.i < len(a.chunks) {
		clear(a.chunks[a.i][:a.off])
	}
	a.i, a.off = 0, 0
}

// selectExpr is how the load selects column t (quoted name q) so that its
// text form decodes to the value the binlog gives: FLOAT widened to DOUBLE
// (the text of a FLOAT is rounded to 6 digits; a float widens to a double
// exactly), geometries as WKB, every other column as itself. The session's
// time_zone is UTC and its character set utf8mb4.
func selectExpr(t *colType, q string) string {
	switch t.Base {
	case "float":
		return "CAST(" + q + " AS DOUBLE)"
	case "geometry":
		return "ST_AsBinary(" + q + ")"
	}
	return q
}

func enumLabel(t *colType, n int64) (any, error) {
	switch {
	case n == 0:
		return "", nil // the empty "error" value of a non-strict insert
	case n < 0 || n > int64(len(t.Values)):
		return nil, fmt.Errorf("%w: enum index %d of %d labels", errBadValue, n, len(t.Values))
	}
	return t.Values[n-1], nil
}

func setLabels(t *colType, bits uint64) (any, error) {
	var b strings.Builder
	for i := 0; bits != 0; i++ {
		if bits&1 != 0 {
			if i >= len(t.Values) {
				return nil, fmt.Errorf("%w: set member %d of %d labels", errBadValue, i+1, len(t.Values))
			}
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(t.Values[i])
		}
		bits >>= 1
	}
	return b.String(), nil
}

// canonicalDecimal reports whether b is a decimal's canonical text (see
// normalizeDecimal) as it stands.
func canonicalDecimal(b []byte) bool {
	digits := b
	if len(b) > 0 && b[0] == '-' {
		digits = b[1:]
	}
	dot, zero := -1, true
	for i, c := range digits {
		switch {
		case c == '.' && dot < 0:
			dot = i
		case c < '0' || c > '9':
			return false
		case c != '0':
			zero = false
		}
	}
	intLen := len(digits)
	if dot >= 0 {
		intLen = dot
	}
	return intLen > 0 && dot != len(digits)-1 && (intLen == 1 || digits[0] != '0') && !(zero && len(b) > len(digits))
}

// normalizeDecimal returns the canonical text of a decimal: no leading
// zeros before the first integer digit, no sign on zero, the scale kept.
func normalizeDecimal(s string) (string, error) {
	neg := strings.HasPrefix(s, "-")
	digits := strings.TrimPrefix(s, "-")
	intPart, frac, hasDot := strings.Cut(digits, ".")
	if intPart == "" && !hasDot || !allDigits(intPart) || !allDigits(frac) || hasDot && frac == "" {
		return "", fmt.Errorf("%w: decimal %q", errBadValue, s)
	}
	zero := strings.Trim(frac, "0") == "" && strings.Trim(intPart, "0") == ""
	if intPart != "" && (len(intPart) == 1 || intPart[0] != '0') && !(neg && zero) {
		return s, nil // canonical already, as the server's text and go-mysql's decimals are: no copy
	}
	intPart = strings.TrimLeft(intPart, "0")
	if intPart == "" {
		intPart = "0"
	}
	if neg && zero {
		neg = false
	}
	out := intPart
	if hasDot {
		out += "." + frac
	}
	if neg {
		out = "-" + out
	}
	return out, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseTemporal parses the text of a date ("2024-02-29"), time
// ("-838:59:59.000000"), datetime or timestamp ("2024-02-29
// 13:45:00.123456"; a timestamp's text is in UTC). A zero date, or a date
// with a zero month or day, is nil (documented in docs/types.md).
func parseTemporal(base, s string) (any, error) { return slabTemporal(base, s, nil) }

// slabTemporal is parseTemporal with dates and instants in slab (nil:
// boxed alone).
func slabTemporal(base, s string, slab *pgdecode.Slab) (any, error) {
	// The error copies s, so s does not escape: the load's string(b) at
	// the call costs no allocation.
	bad := func() error { return fmt.Errorf("%w: %s %q", errBadValue, base, strings.Clone(s)) }
	switch base {
	case "time":
		us, ok := parseTimeOfDay(s, true)
		if !ok {
			return nil, bad()
		}
		return schema.IntervalValue{Micros: us}, nil
	case "date":
		y, m, d, ok := parseYMD(s)
		if !ok || len(s) != 10 {
			return nil, bad()
		}
		if m == 0 || d == 0 {
			return nil, nil
		}
		return slab.Int32(int32(daysFromCivil(y, m, d))), nil
	}
	if len(s) < 19 || s[10] != ' ' {
		return nil, bad()
	}
	y, m, d, ok := parseYMD(s[:10])
	if !ok {
		return nil, bad()
	}
	us, ok := parseTimeOfDay(s[11:], false)
	if !ok || us >= 86_400_000_000 {
		return nil, bad()
	}
	if m == 0 || d == 0 {
		return nil, nil
	}
	return slab.Int64(daysFromCivil(y, m, d)*86_400_000_000 + us), nil
}

func parseYMD(s string) (y, m, d int, ok bool) {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' || !allDigits(s[:4]) || !allDigits(s[5:7]) || !allDigits(s[8:]) {
		return 0, 0, 0, false
	}
	yy, _ := digits(s[:4])
	mm, _ := digits(s[5:7])
	dd, _ := digits(s[8:])
	y, m, d = int(yy), int(mm), int(dd)
	if m > 12 || d > 31 {
		return 0, 0, 0, false
	}
	return y, m, d, true
}

// parseTimeOfDay parses "[-]H+:MM:SS[.f{1,6}]" into microseconds; hours
// beyond 23 and a sign only when signed.
func parseTimeOfDay(s string, signed bool) (int64, bool) {
	neg := false
	if signed && strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	colon := strings.IndexByte(s, ':')
	if colon < 2 || colon > 3 || len(s) < colon+6 || s[colon+3] != ':' {
		return 0, false
	}
	h, ok1 := digits(s[:colon])
	mi, ok2 := digits(s[colon+1 : colon+3])
	sec, ok3 := digits(s[colon+4 : colon+6])
	if !ok1 || !ok2 || !ok3 || mi > 59 || sec > 59 {
		return 0, false
	}
	var us int64
	if rest := s[colon+6:]; rest != "" {
		frac := rest[1:]
		if rest[0] != '.' || len(frac) == 0 || len(frac) > 6 {
			return 0, false
		}
		f, ok := digits(frac)
		if !ok {
			return 0, false
		}
		us = f * pow10[6-len(frac)]
	}
	v := ((h*60+mi)*60+sec)*1_000_000 + us
	if neg {
		v = -v
	}
	return v, true
}

var pow10 = [...]int64{1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000}

// digits parses a short run of decimal digits (no sign).
func digits(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// daysFromCivil counts days since 1970-01-01 in the proleptic Gregorian
// calendar (year 0 exists, as in MySQL); Howard Hinnant's algorithm.
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

// decodeText turns a character column's bytes, in its character set, into
// UTF-8.
func decodeText(charset string, b []byte) (any, error) {
	dec := decoderFor(charset)
	if dec == nil {
		return nil, fmt.Errorf("%w: character set %s", errUnsupportedType, charset)
	}
	return dec(b)
}

type textDecoder func([]byte) (string, error)

func isUTF8Charset(charset string) bool {
	switch charset {
	case "utf8mb4", "utf8mb3", "utf8", "ascii":
		return true
	}
	return false
}

func decoderFor(charset string) textDecoder {
	switch strings.ToLower(charset) {
	case "utf8mb4", "utf8mb3", "utf8", "ascii":
		return func(b []byte) (string, error) {
			if !utf8.Valid(b) {
				return "", fmt.Errorf("%w: %s text that is not valid UTF-8", errBadValue, charset)
			}
			return string(b), nil
		}
	case "latin1":
		return func(b []byte) (string, error) { return latin1ToUTF8(b), nil }
	}
	return nil
}

// cp1252High maps bytes 0x80–0x9F of MySQL's latin1 (Windows-1252, with
// its five unassigned bytes kept as the C1 controls, as MySQL converts
// them) to runes; bytes 0xA0–0xFF are U+00A0–U+00FF.
var cp1252High = [32]rune{
	0x20AC, 0x0081, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0x008D, 0x017D, 0x008F,
	0x0090, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x009D, 0x017E, 0x0178,
}

func latin1ToUTF8(b []byte) string {
	ascii := true
	for _, c := range b {
		if c >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return string(b)
	}
	out := make([]byte, 0, len(b)+len(b)/2)
	for _, c := range b {
		switch {
		case c < 0x80:
			out = append(out, c)
		case c < 0xA0:
			out = utf8.AppendRune(out, cp1252High[c-0x80])
		default:
			out = utf8.AppendRune(out, rune(c))
		}
	}
	return string(out)
}

// renderTemporal renders a temporal value of the table model back into
// the server's text (a key bound of the load).
func renderTemporal(t *colType, v any) any {
	switch t.Base {
	case "date":
		if d, ok := v.(int32); ok {
			return time.Unix(int64(d)*86400, 0).UTC().Format("2006-01-02")
		}
	case "datetime", "timestamp":
		if us, ok := v.(int64); ok {
			return time.UnixMicro(us).UTC().Format("2006-01-02 15:04:05.000000")
		}
	case "time":
		if iv, ok := v.(schema.IntervalValue); ok {
			us, sign := iv.Micros, ""
			if us < 0 {
				us, sign = -us, "-"
			}
			return fmt.Sprintf("%s%02d:%02d:%02d.%06d", sign, us/3_600_000_000, us/60_000_000%60, us/1_000_000%60, us%1_000_000)
		}
	}
	return v
}
