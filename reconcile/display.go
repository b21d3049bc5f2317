package reconcile

import (
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
)

// litOf writes a canonical key as the literals the source reads back
// (the text PostgreSQL prints with DateStyle ISO, TimeZone UTC).
func (tr *tableRun) litOf(k Key) Key {
	out := make(Key, len(k))
	for i, ci := range tr.t.Key {
		out[i] = literal(tr.t.Columns[ci].Canon, k[i])
	}
	return out
}

func literal(kind canonKind, s string) string {
	switch kind {
	case cText:
		return textOf(s)
	case cBytes:
		return `\x` + s
	case cDate:
		v, ok := signedHex(s)
		if !ok {
			return s
		}
		switch v {
		case math.MaxInt32:
			return "infinity"
		case math.MinInt32:
			return "-infinity"
		}
		return formatDate(time.UnixMicro(0).UTC().AddDate(0, 0, int(v)+pgEpochDays))
	case cTimestamp:
		v, ok := signedHex(s)
		if !ok {
			return s
		}
		switch v {
		case math.MaxInt64:
			return "infinity"
		case math.MinInt64:
			return "-infinity"
		}
		return formatTimestamp(v + pgEpochMicros)
	case cTime:
		v, ok := signedHex(s)
		if !ok {
			return s
		}
		return formatTime(v)
	case cFloatDec:
		digits, exp, ok := strings.Cut(strings.TrimPrefix(s, "-"), "e")
		f, err := strconv.ParseFloat("0."+digits+"e"+exp, 64)
		if !ok || err != nil {
			return s
		}
		if strings.HasPrefix(s, "-") {
			f = -f
		}
		return formatFloat(f)
	case cFloat64, cFloat32:
		b, err := hex.DecodeString(s)
		if err != nil {
			return s
		}
		var f float64
		if len(b) == 4 {
			f = float64(math.Float32frombits(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])))
		} else if len(b) == 8 {
			var u uint64
			for _, x := range b {
				u = u<<8 | uint64(x)
			}
			f = math.Float64frombits(u)
		}
		return formatFloat(f)
	}
	return s
}

// formatDate writes a date as PostgreSQL does (ISO; BC years as "BC").
func formatDate(t time.Time) string {
	y := t.Year()
	bc := ""
	if y <= 0 {
		y, bc = 1-y, " BC"
	}
	return fmt.Sprintf("%04d-%02d-%02d%s", y, t.Month(), t.Day(), bc)
}

// formatTimestamp writes microseconds since 1970 as PostgreSQL prints a
// timestamp in UTC, without the zone.
func formatTimestamp(us int64) string {
	t := time.UnixMicro(us).UTC()
	d := formatDate(t)
	bc := ""
	if strings.HasSuffix(d, " BC") {
		d, bc = strings.TrimSuffix(d, " BC"), " BC"
	}
	return d + " " + formatTime(int64(t.Hour())*3600e6+int64(t.Minute())*60e6+int64(t.Second())*1e6+int64(t.Nanosecond()/1000)) + bc
}

// formatTime writes microseconds since midnight as HH:MM:SS[.ffffff].
func formatTime(us int64) string {
	s := fmt.Sprintf("%02d:%02d:%02d", us/3600e6, us/60e6%60, us/1e6%60)
	if f := us % 1e6; f != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%06d", f), "0")
	}
	return s
}

func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// displayValue writes a mirror's value for a person to read (the report).
func displayValue(c *Column, v any) string {
	if v == nil {
		return "NULL"
	}
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case []byte:
		s = `\x` + hex.EncodeToString(v)
	case [16]byte:
		s = string(appendUUID(nil, v))
	case float32:
		s = formatFloat(float64(v))
	case float64:
		s = formatFloat(v)
	case int32:
		if c.Canon == cDate {
			s = literal(cDate, string(appendHex32(nil, uint32(v-pgEpochDays))))
			if v == schema.DateInfinity || v == schema.DateMinusInfinity {
				s = literal(cDate, string(appendHex32(nil, uint32(v))))
			}
		} else {
			s = strconv.FormatInt(int64(v), 10)
		}
	case int64:
		switch c.Canon {
		case cTimestamp:
			if v == schema.TimestampInfinity || v == schema.TimestampMinusInfinity {
				s = literal(cTimestamp, string(appendHex64(nil, uint64(v))))
			} else {
				s = formatTimestamp(v)
			}
		case cTime:
			s = formatTime(v)
		default:
			s = strconv.FormatInt(v, 10)
		}
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			ec := c
			if c.Elem != nil {
				ec = c.Elem
			}
			parts[i] = displayValue(ec, e)
		}
		s = "{" + strings.Join(parts, ",") + "}"
	default:
		s = fmt.Sprint(v)
	}
	return abbrev(s)
}

// abbrev shortens long values in reports.
func abbrev(s string) string {
	if len(s) > 200 {
		return fmt.Sprintf("%s…(%d bytes)", s[:160], len(s))
	}
	return s
}
