package reconcile

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/cdcd-dev/cdcd/schema"
)

// Canonical texts. Each compared column has one text form that the source
// database computes in SQL (each dialect's Column.SQL) and cdcd computes
// from the value the Iceberg table holds (appendCanon), following
// docs/types.md: a value differs exactly when its canonical text does.
//
//	int        decimal digits ("-12")
//	bool       "true" or "false"
//	float32/64 the IEEE 754 bits, 8 or 16 hex digits big-endian (NaN
//	           payloads and -0 kept)
//	floatdec   MySQL's floats, which SQL cannot show bit for bit: the
//	           shortest decimal digits that read back as the value (as a
//	           double: a FLOAT widened), without leading or trailing
//	           zeros, "e", and E such that the value is 0.DIGITS × 10^E
//	           ("-15e1" is -1.5, "1e39" is 1e38); zero (and -0, which
//	           MySQL prints as 0) as "0". Each server lays its shortest
//	           text out its own way (MariaDB "0.00001", "1e15"; MySQL
//	           "1e-5"): the SQL takes the digits and the exponent apart
//	decimal    exact text with the column's scale ("-0.50")
//	text       byte length ":" the UTF-8 bytes (the length keeps a text
//	           from running into the next column)
//	bytes      hex digits
//	uuid       8-4-4-4-12 lowercase hex
//	date       8 hex digits of the days since 2000-01-01 (PostgreSQL's
//	           date_send; infinities as 7fffffff and 80000000)
//	time       16 hex digits of the microseconds since midnight
//	timestamp  16 hex digits of the microseconds since 2000-01-01
//	           (timestamp_send; infinities as the extreme int64s)
//	list       each dimension as "[1:n]", ":", the elements' texts joined
//	           by "," (NULL elements as "N"); an empty list is ":"
//
// A row's text joins its columns' texts with "," in the table's column
// order, a NULL as "N". No column's text contains "," unless
// length-prefixed, and none is "N", so the joined text decides every value.
// MySQL hashes a row's text; PostgreSQL hashes each column by itself
// (rowhash.go), the texts of the kinds it has no exact binary hash for.

// canonKind is how a column's values render.
type canonKind uint8

const (
	cInt canonKind = iota + 1
	cBool
	cFloat32
	cFloat64
	cDecimal
	cText
	cBytes
	cUUID
	cDate
	cTime
	cTimestamp
	cList
	cFloatDec
)

var canonNames = [...]string{cInt: "int", cBool: "bool", cFloat32: "float32", cFloat64: "float64",
	cDecimal: "decimal", cText: "text", cBytes: "bytes", cUUID: "uuid", cDate: "date", cTime: "time",
	cTimestamp: "timestamp", cList: "list", cFloatDec: "floatdec"}

func (k canonKind) String() string {
	if int(k) < len(canonNames) && canonNames[k] != "" {
		return canonNames[k]
	}
	return "canon(" + strconv.Itoa(int(k)) + ")"
}

// nullText is a NULL column's text in a row.
const nullText = "N"

// Microseconds and days from 1970-01-01 to 2000-01-01, PostgreSQL's epoch
// for its binary date and time forms.
const (
	pgEpochMicros = 946684800000000
	pgEpochDays   = 10957
)

// appendCanon appends v's canonical text as column c renders it; v is in
// cdcd's Go representation (schema.Kind's), as Iceberg rows and log keys
// are decoded. A nil v appends "N".
func appendCanon(dst []byte, c *Column, v any) ([]byte, error) {
	if v == nil {
		return append(dst, nullText...), nil
	}
	switch c.Canon {
	case cInt:
		switch v := v.(type) {
		case int64:
			return strconv.AppendInt(dst, v, 10), nil
		case int32:
			return strconv.AppendInt(dst, int64(v), 10), nil
		}
	case cBool:
		if v, ok := v.(bool); ok {
			return strconv.AppendBool(dst, v), nil
		}
	case cFloat32:
		if v, ok := v.(float32); ok {
			return appendHex32(dst, math.Float32bits(v)), nil
		}
	case cFloat64:
		switch v := v.(type) {
		case float64:
			return appendHex64(dst, math.Float64bits(v)), nil
		case float32:
			return appendHex64(dst, math.Float64bits(float64(v))), nil
		}
	case cFloatDec:
		switch v := v.(type) {
		case float64:
			return appendFloatDec(dst, v), nil
		case float32:
			return appendFloatDec(dst, float64(v)), nil
		}
	case cDecimal:
		if v, ok := v.(string); ok {
			return appendDecimal(dst, v, c.Scale)
		}
	case cText:
		switch v := v.(type) {
		case string:
			dst = strconv.AppendInt(dst, int64(len(v)), 10)
			return append(append(dst, ':'), v...), nil
		case schema.IntervalValue:
			s := v.String()
			dst = strconv.AppendInt(dst, int64(len(s)), 10)
			return append(append(dst, ':'), s...), nil
		}
	case cBytes:
		if v, ok := v.([]byte); ok {
			return hex.AppendEncode(dst, v), nil
		}
	case cUUID:
		if v, ok := v.([16]byte); ok {
			return appendUUID(dst, v), nil
		}
	case cDate:
		if v, ok := v.(int32); ok {
			if v != schema.DateInfinity && v != schema.DateMinusInfinity {
				v -= pgEpochDays
			}
			return appendHex32(dst, uint32(v)), nil
		}
	case cTime:
		if v, ok := v.(int64); ok {
			return appendHex64(dst, uint64(v)), nil
		}
	case cTimestamp:
		if v, ok := v.(int64); ok {
			if v != schema.TimestampInfinity && v != schema.TimestampMinusInfinity {
				v -= pgEpochMicros
			}
			return appendHex64(dst, uint64(v)), nil
		}
	case cList:
		if v, ok := v.([]any); ok {
			return appendList(dst, c, v)
		}
	}
	return dst, fmt.Errorf("reconcile: column %q (%s): cannot compare a %T value", c.Name, c.Canon, v)
}

func appendHex32(dst []byte, u uint32) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], u)
	return hex.AppendEncode(dst, b[:])
}

func appendHex64(dst []byte, u uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], u)
	return hex.AppendEncode(dst, b[:])
}

func appendUUID(dst []byte, u [16]byte) []byte {
	var h [32]byte
	hex.Encode(h[:], u[:])
	dst = append(dst, h[:8]...)
	dst = append(append(dst, '-'), h[8:12]...)
	dst = append(append(dst, '-'), h[12:16]...)
	dst = append(append(dst, '-'), h[16:20]...)
	return append(append(dst, '-'), h[20:]...)
}

// appendFloatDec appends f's floatdec text (the shortest digits that read
// back as f). NaN and infinities, which MySQL cannot store, as Go prints
// them.
func appendFloatDec(dst []byte, f float64) []byte {
	switch {
	case f == 0:
		return append(dst, '0')
	case math.IsNaN(f) || math.IsInf(f, 0):
		return strconv.AppendFloat(dst, f, 'g', -1, 64)
	case f < 0:
		dst = append(dst, '-')
		f = -f
	}
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // d.ddde±x
	mant, exp, _ := strings.Cut(string(e), "e")
	x, _ := strconv.Atoi(exp)
	digits := strings.TrimRight(strings.Replace(mant, ".", "", 1), "0")
	dst = append(dst, digits...)
	dst = append(dst, 'e')
	return strconv.AppendInt(dst, int64(x+1), 10)
}

// appendDecimal appends decimal text s with exactly scale fraction digits
// (as a numeric(p,s) prints), "-0.00" as "0.00". Text that is not a plain
// decimal (NaN, Infinity of an unconstrained numeric, which is compared as
// text) is appended as it is.
func appendDecimal(dst []byte, s string, scale int) ([]byte, error) {
	neg := strings.HasPrefix(s, "-")
	digits := strings.TrimPrefix(s, "-")
	intPart, frac, _ := strings.Cut(digits, ".")
	if intPart == "" || strings.Trim(intPart, "0123456789") != "" || strings.Trim(frac, "0123456789") != "" {
		return append(dst, s...), nil
	}
	if len(frac) > scale {
		if strings.Trim(frac[scale:], "0") != "" {
			return dst, fmt.Errorf("reconcile: decimal %s has more than %d fraction digits", s, scale)
		}
		frac = frac[:scale]
	}
	intPart = strings.TrimLeft(intPart, "0")
	if intPart == "" {
		intPart = "0"
	}
	if neg && (intPart != "0" || strings.Trim(frac, "0") != "") {
		dst = append(dst, '-')
	}
	dst = append(dst, intPart...)
	if scale > 0 {
		dst = append(dst, '.')
		dst = append(dst, frac...)
		for range scale - len(frac) {
			dst = append(dst, '0')
		}
	}
	return dst, nil
}

// appendList appends a list's dimensions, then its elements.
func appendList(dst []byte, c *Column, v []any) ([]byte, error) {
	elem := c.Elem
	if len(v) > 0 {
		for cur, e := v, elem; ; {
			dst = append(dst, "[1:"...)
			dst = strconv.AppendInt(dst, int64(len(cur)), 10)
			dst = append(dst, ']')
			inner, ok := cur[0].([]any)
			if !ok || e == nil || e.Canon != cList || len(inner) == 0 {
				break
			}
			cur, e = inner, e.Elem
		}
	}
	dst = append(dst, ':')
	first := true
	var err error
	var walk func(c *Column, v []any) error
	walk = func(ec *Column, v []any) error {
		for _, x := range v {
			if inner, ok := x.([]any); ok && ec.Canon == cList {
				if err := walk(ec.Elem, inner); err != nil {
					return err
				}
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			if dst, err = appendCanon(dst, ec, x); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(elem, v); err != nil {
		return dst, err
	}
	return dst, nil
}
