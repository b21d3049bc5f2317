package pgdecode

import (
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cdcd-dev/cdcd/schema"
)

// PostgreSQL's text forms of values, rendered from cdcd's Go values, for
// the types cdcd carries as text (range bounds, composite attributes) and
// for tests that compare with the server's own output. They match what the
// server prints with DateStyle ISO, IntervalStyle iso_8601, TimeZone UTC and
// the default extra_float_digits (1: shortest exact).

// formatFloat prints f like float8out (bits 64) or float4out (bits 32):
// the shortest exact digits, in exponent form below 1e-4 and from 1e15
// (float4: 1e6) on.
func formatFloat(f float64, bits int) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	if f == 0 {
		if math.Signbit(f) {
			return "-0"
		}
		return "0"
	}
	limit := 15 // DBL_DIG
	if bits == 32 {
		limit = 6 // FLT_DIG
	}
	exp := strconv.FormatFloat(f, 'e', -1, bits)
	mant, e, _ := strings.Cut(exp, "e")
	n, _ := strconv.Atoi(e)
	if n < -4 || n >= limit {
		// PostgreSQL writes at least two exponent digits, as C's %e does.
		sign := e[0]
		digits := e[1:]
		if len(digits) < 2 {
			digits = "0" + digits
		}
		return mant + "e" + string(sign) + digits
	}
	return strconv.FormatFloat(f, 'f', -1, bits)
}

// civil splits days since 1970-01-01 into a proleptic Gregorian date.
func civil(days int64) (year int, month time.Month, day int) {
	return time.Unix(days*86400, 0).UTC().Date()
}

// appendYMD writes "YYYY-MM-DD" and reports whether the year is BC
// (PostgreSQL has no year 0: astronomical year 0 is 1 BC).
func appendYMD(b []byte, year int, month time.Month, day int) ([]byte, bool) {
	bc := year <= 0
	if bc {
		year = 1 - year
	}
	b = appendPadded(b, int64(year), 4)
	b = append(b, '-')
	b = appendPadded(b, int64(month), 2)
	b = append(b, '-')
	b = appendPadded(b, int64(day), 2)
	return b, bc
}

func appendPadded(b []byte, v int64, width int) []byte {
	s := strconv.FormatInt(v, 10)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// formatDate prints a Date value as date_out does.
func formatDate(d int32) string {
	switch d {
	case schema.DateInfinity:
		return "infinity"
	case schema.DateMinusInfinity:
		return "-infinity"
	}
	y, m, day := civil(int64(d))
	b, bc := appendYMD(nil, y, m, day)
	if bc {
		b = append(b, " BC"...)
	}
	return string(b)
}

// appendClock writes "HH:MM:SS[.ffffff]" of micros since midnight, with
// trailing zeros of the fraction trimmed.
func appendClock(b []byte, micros int64) []byte {
	b = appendPadded(b, micros/3_600_000_000, 2)
	b = append(b, ':')
	b = appendPadded(b, micros/60_000_000%60, 2)
	b = append(b, ':')
	b = appendPadded(b, micros/1_000_000%60, 2)
	if f := micros % 1_000_000; f != 0 {
		s := strconv.FormatInt(f+1_000_000, 10)[1:]
		b = append(b, '.')
		b = append(b, strings.TrimRight(s, "0")...)
	}
	return b
}

// formatTime prints a Time value as time_out does.
func formatTime(micros int64) string { return string(appendClock(nil, micros)) }

// formatTimestamp prints a Timestamp (tz false) or TimestampTZ (tz true,
// in UTC) value as timestamp_out / timestamptz_out do. iso puts a 'T'
// between date and time, as to_json does.
func formatTimestamp(us int64, tz, iso bool) string {
	switch us {
	case schema.TimestampInfinity:
		return "infinity"
	case schema.TimestampMinusInfinity:
		return "-infinity"
	}
	days := us / 86_400_000_000
	rest := us % 86_400_000_000
	if rest < 0 {
		days--
		rest += 86_400_000_000
	}
	y, m, d := civil(days)
	b, bc := appendYMD(nil, y, m, d)
	if iso {
		b = append(b, 'T')
	} else {
		b = append(b, ' ')
	}
	b = appendClock(b, rest)
	if tz {
		if iso {
			b = append(b, "+00:00"...)
		} else {
			b = append(b, "+00"...)
		}
	}
	if bc {
		b = append(b, " BC"...)
	}
	return string(b)
}

// appendZone writes a UTC offset as PostgreSQL does: "+05", "-03:30",
// "+00:00:12". seconds is east of Greenwich.
func appendZone(b []byte, seconds int32) []byte {
	sign := byte('+')
	if seconds < 0 {
		sign, seconds = '-', -seconds
	}
	b = append(b, sign)
	b = appendPadded(b, int64(seconds/3600), 2)
	if min, sec := seconds/60%60, seconds%60; min != 0 || sec != 0 {
		b = append(b, ':')
		b = appendPadded(b, int64(min), 2)
		if sec != 0 {
			b = append(b, ':')
			b = appendPadded(b, int64(sec), 2)
		}
	}
	return b
}

// TextOf renders a value of column c as PostgreSQL's output function for
// the column's type would. Used for range bounds; kinds without a text
// form of their own fall back to their JSON rendering.
func TextOf(c schema.Column, v any) string {
	switch c.Kind {
	case schema.Bool:
		if v.(bool) {
			return "t"
		}
		return "f"
	case schema.Int16, schema.Int32, schema.Int64:
		return strconv.FormatInt(v.(int64), 10)
	case schema.Float32:
		return formatFloat(float64(v.(float32)), 32)
	case schema.Float64:
		return formatFloat(v.(float64), 64)
	case schema.Decimal, schema.String, schema.JSON:
		return v.(string)
	case schema.Date:
		return formatDate(v.(int32))
	case schema.Time:
		return formatTime(v.(int64))
	case schema.Timestamp:
		return formatTimestamp(v.(int64), false, false)
	case schema.TimestampTZ:
		return formatTimestamp(v.(int64), true, false)
	case schema.UUID:
		return schema.FormatUUID(v.([16]byte))
	case schema.Bytes:
		return `\x` + hex.EncodeToString(v.([]byte))
	case schema.Interval:
		return v.(schema.IntervalValue).String()
	}
	return string(AppendJSON(nil, c, v))
}

// AppendJSON renders a value as to_json would (timestamps with zone in UTC,
// intervals in ISO 8601): numbers as JSON numbers except NaN and the
// infinities, which to_json writes as strings; json values embedded as
// they are.
func AppendJSON(b []byte, c schema.Column, v any) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	switch c.Kind {
	case schema.Bool:
		return strconv.AppendBool(b, v.(bool))
	case schema.Int16, schema.Int32, schema.Int64:
		return strconv.AppendInt(b, v.(int64), 10)
	case schema.Float32, schema.Float64:
		s := TextOf(c, v)
		if s == "NaN" || strings.HasSuffix(s, "Infinity") {
			return appendJSONString(b, s)
		}
		return append(b, s...)
	case schema.Decimal:
		s := v.(string)
		if s == "NaN" || strings.HasSuffix(s, "Infinity") {
			return appendJSONString(b, s)
		}
		return append(b, s...)
	case schema.JSON:
		return append(b, v.(string)...)
	case schema.Timestamp:
		return appendJSONString(b, formatTimestamp(v.(int64), false, true))
	case schema.TimestampTZ:
		return appendJSONString(b, formatTimestamp(v.(int64), true, true))
	case schema.List:
		b = append(b, '[')
		for i, e := range v.([]any) {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendJSON(b, *c.Elem, e)
		}
		return append(b, ']')
	}
	return appendJSONString(b, TextOf(c, v))
}

// appendJSONString writes s as a JSON string, escaping as PostgreSQL's
// escape_json does.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"':
			b = append(b, `\"`...)
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\b':
			b = append(b, `\b`...)
		case c == '\f':
			b = append(b, `\f`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '\r':
			b = append(b, `\r`...)
		case c == '\t':
			b = append(b, `\t`...)
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
		case c < utf8.RuneSelf:
			b = append(b, c)
		default:
			_, n := utf8.DecodeRuneInString(s[i:])
			b = append(b, s[i:i+n]...)
			i += n
			continue
		}
		i++
	}
	return append(b, '"')
}

// appendRangeBound writes a range bound as range_out does: quoted when it
// is empty or holds a quote, backslash, parenthesis, bracket, comma or
// white space; quotes and backslashes doubled inside.
func appendRangeBound(b []byte, s string) []byte {
	quote := s == ""
	for i := 0; i < len(s) && !quote; i++ {
		switch s[i] {
		case '"', '\\', '(', ')', '[', ']', ',', ' ', '\t', '\n', '\r', '\v', '\f':
			quote = true
		}
	}
	if quote {
		b = append(b, '"')
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, s[i])
		}
		b = append(b, s[i])
	}
	if quote {
		b = append(b, '"')
	}
	return b
}
