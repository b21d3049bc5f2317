package reconcile

import (
	"encoding/hex"
	"math"
	"math/big"
	"strconv"

	"github.com/apache/iceberg-go"
	"github.com/parquet-go/parquet-go"

	"github.com/cdcd-dev/cdcd/schema"
	icebergsink "github.com/cdcd-dev/cdcd/sink/iceberg"
)

// appendRaw appends the canonical text of v, a value of column c as a
// data file stores it (typ is the mirror's type of the column): the text
// appendCanon gives for the value sink/iceberg's Scan converts it to
// (TestRawCanonMatchesBoxed), without the conversion. It is the mirror
// scan's hot path: no value is boxed, decimals stored as integers are
// formatted without big.Int.
func appendRaw(dst []byte, c *Column, typ iceberg.Type, v parquet.Value) ([]byte, error) {
	if v.IsNull() {
		return append(dst, nullText...), nil
	}
	switch c.Canon {
	case cInt:
		switch v.Kind() {
		case parquet.Int32:
			return strconv.AppendInt(dst, int64(v.Int32()), 10), nil
		case parquet.Int64:
			return strconv.AppendInt(dst, v.Int64(), 10), nil
		}
	case cBool:
		if v.Kind() == parquet.Boolean {
			return strconv.AppendBool(dst, v.Boolean()), nil
		}
	case cFloat32:
		if v.Kind() == parquet.Float {
			return appendHex32(dst, math.Float32bits(v.Float())), nil
		}
	case cFloat64:
		switch v.Kind() {
		case parquet.Double:
			return appendHex64(dst, math.Float64bits(v.Double())), nil
		case parquet.Float:
			return appendHex64(dst, math.Float64bits(float64(v.Float()))), nil
		}
	case cFloatDec:
		switch v.Kind() {
		case parquet.Double:
			return appendFloatDec(dst, v.Double()), nil
		case parquet.Float:
			return appendFloatDec(dst, float64(v.Float())), nil
		}
	case cDecimal:
		if _, ok := typ.(iceberg.DecimalType); ok {
			return appendRawDecimal(dst, c, v)
		}
	case cText:
		if _, ok := typ.(iceberg.StringType); ok && v.Kind() == parquet.ByteArray {
			b := v.ByteArray()
			dst = strconv.AppendInt(dst, int64(len(b)), 10)
			return append(append(dst, ':'), b...), nil
		}
	case cBytes:
		if _, ok := typ.(iceberg.BinaryType); ok {
			return hex.AppendEncode(dst, v.ByteArray()), nil
		}
	case cUUID:
		if b := v.ByteArray(); len(b) == 16 {
			return appendUUID(dst, [16]byte(b)), nil
		}
	case cDate:
		if _, ok := typ.(iceberg.DateType); ok && v.Kind() == parquet.Int32 {
			d := v.Int32()
			if d != schema.DateInfinity && d != schema.DateMinusInfinity {
				d -= pgEpochDays
			}
			return appendHex32(dst, uint32(d)), nil
		}
	case cTime:
		if _, ok := typ.(iceberg.TimeType); ok && v.Kind() == parquet.Int64 {
			return appendHex64(dst, uint64(v.Int64())), nil
		}
	case cTimestamp:
		switch typ.(type) {
		case iceberg.TimestampType, iceberg.TimestampTzType:
			if v.Kind() == parquet.Int64 {
				ts := v.Int64()
				if ts != schema.TimestampInfinity && ts != schema.TimestampMinusInfinity {
					ts -= pgEpochMicros
				}
				return appendHex64(dst, uint64(ts)), nil
			}
		}
	}
	// Anything else as Scan gives it (and appendCanon's error).
	return appendCanon(dst, c, icebergsink.Value(typ, v))
}

// appendRawDecimal appends a decimal's canonical text: the unscaled
// integer stored (INT32, INT64 or big-endian two's complement bytes) at
// the column's scale.
func appendRawDecimal(dst []byte, c *Column, v parquet.Value) ([]byte, error) {
	var u int64
	switch v.Kind() {
	case parquet.Int32:
		u = int64(v.Int32())
	case parquet.Int64:
		u = v.Int64()
	default:
		b := v.ByteArray()
		if len(b) == 0 || len(b) > 8 {
			n := new(big.Int).SetBytes(b)
			if len(b) > 0 && b[0]&0x80 != 0 {
				n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
			}
			return appendDecimal(dst, unscaledText(n.String(), c.Scale), c.Scale)
		}
		for _, x := range b {
			u = u<<8 | int64(x)
		}
		if sh := uint(64 - 8*len(b)); sh > 0 {
			u = u << sh >> sh // sign-extend
		}
	}
	if u == math.MinInt64 {
		return appendDecimal(dst, unscaledText(strconv.FormatInt(u, 10), c.Scale), c.Scale)
	}
	if u < 0 {
		dst = append(dst, '-')
		u = -u
	}
	var digits [20]byte
	s := strconv.AppendUint(digits[:0], uint64(u), 10)
	if c.Scale <= 0 {
		return append(dst, s...), nil
	}
	if len(s) <= c.Scale {
		dst = append(dst, '0', '.')
		for range c.Scale - len(s) {
			dst = append(dst, '0')
		}
		return append(dst, s...), nil
	}
	dst = append(dst, s[:len(s)-c.Scale]...)
	dst = append(dst, '.')
	return append(dst, s[len(s)-c.Scale:]...), nil
}

// unscaledText renders unscaled integer text s (a sign, digits) at scale.
func unscaledText(s string, scale int) string {
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	if scale > 0 {
		for len(s) <= scale {
			s = "0" + s
		}
		s = s[:len(s)-scale] + "." + s[len(s)-scale:]
	}
	if neg {
		s = "-" + s
	}
	return s
}
