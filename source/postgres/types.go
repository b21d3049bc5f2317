package postgres

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/cdcd-dev/cdcd/schema"
)

// Built-in type OIDs cdcd maps (pg_type.h; stable across versions).
const (
	oidBool        = 16
	oidBytea       = 17
	oidName        = 19
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidText        = 25
	oidOID         = 26
	oidJSON        = 114
	oidFloat4      = 700
	oidFloat8      = 701
	oidBPChar      = 1042
	oidVarchar     = 1043
	oidDate        = 1082
	oidTime        = 1083
	oidTimestamp   = 1114
	oidTimestampTZ = 1184
	oidNumeric     = 1700
	oidUUID        = 2950
	oidJSONB       = 3802
)

// PostgreSQL counts time from 2000-01-01; cdcd from 1970-01-01.
const (
	pgEpochDays   = 10957
	pgEpochMicros = 946684800 * 1_000_000
)

// errUnsupportedType is wrapped by every "type not supported" error.
var errUnsupportedType = errors.New("postgres: unsupported column type")

// decodeFunc turns one binary-format value (pgoutput binary tuples and COPY
// BINARY use the same send/recv format) into cdcd's Go representation.
type decodeFunc func(b []byte) (any, error)

// columnKind maps a column's type to the table model. typeName is what
// format_type() says, for messages and SourceType.
func columnKind(table, column string, oid uint32, typmod int32, typeName string) (schema.Column, decodeFunc, error) {
	c := schema.Column{Name: column, SourceType: typeName, Nullable: true}
	var dec decodeFunc
	switch oid {
	case oidBool:
		c.Kind, dec = schema.Bool, decodeBool
	case oidInt2:
		c.Kind, dec = schema.Int16, decodeInt(2)
	case oidInt4:
		c.Kind, dec = schema.Int32, decodeInt(4)
	case oidInt8:
		c.Kind, dec = schema.Int64, decodeInt(8)
	case oidOID:
		c.Kind, dec = schema.Int64, decodeUint32
	case oidFloat4:
		c.Kind, dec = schema.Float32, decodeFloat4
	case oidFloat8:
		c.Kind, dec = schema.Float64, decodeFloat8
	case oidNumeric:
		c.Kind, dec = schema.Decimal, decodeNumeric
		if typmod >= 4 {
			c.Precision = int((typmod - 4) >> 16 & 0xffff)
			c.Scale = int((typmod - 4) & 0xffff)
		}
	case oidText, oidVarchar, oidBPChar, oidName:
		c.Kind, dec = schema.String, decodeString
	case oidBytea:
		c.Kind, dec = schema.Bytes, decodeBytes
	case oidJSON:
		c.Kind, dec = schema.JSON, decodeString
	case oidJSONB:
		c.Kind, dec = schema.JSON, decodeJSONB
	case oidUUID:
		c.Kind, dec = schema.UUID, decodeUUID
	case oidDate:
		c.Kind, dec = schema.Date, decodeDate
	case oidTime:
		c.Kind, dec = schema.Time, decodeTime
	case oidTimestamp:
		c.Kind, dec = schema.Timestamp, decodeTimestamp
	case oidTimestampTZ:
		c.Kind, dec = schema.TimestampTZ, decodeTimestamp
	default:
		return c, nil, fmt.Errorf("%w: table %s column %q has type %s (oid %d), which cdcd cannot capture yet; "+
			"exclude the table, or change the column's type", errUnsupportedType, table, column, typeName, oid)
	}
	return c, dec, nil
}

func lengthError(want string, got int) error {
	return fmt.Errorf("postgres: binary value has %d bytes, want %s", got, want)
}

func decodeBool(b []byte) (any, error) {
	if len(b) != 1 {
		return nil, lengthError("1", len(b))
	}
	return b[0] != 0, nil
}

func decodeInt(size int) decodeFunc {
	return func(b []byte) (any, error) {
		if len(b) != size {
			return nil, lengthError(strconv.Itoa(size), len(b))
		}
		switch size {
		case 2:
			return int64(int16(binary.BigEndian.Uint16(b))), nil
		case 4:
			return int64(int32(binary.BigEndian.Uint32(b))), nil
		}
		return int64(binary.BigEndian.Uint64(b)), nil
	}
}

func decodeUint32(b []byte) (any, error) {
	if len(b) != 4 {
		return nil, lengthError("4", len(b))
	}
	return int64(binary.BigEndian.Uint32(b)), nil
}

func decodeFloat4(b []byte) (any, error) {
	if len(b) != 4 {
		return nil, lengthError("4", len(b))
	}
	return math.Float32frombits(binary.BigEndian.Uint32(b)), nil
}

func decodeFloat8(b []byte) (any, error) {
	if len(b) != 8 {
		return nil, lengthError("8", len(b))
	}
	return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
}

func decodeString(b []byte) (any, error) { return string(b), nil }

func decodeBytes(b []byte) (any, error) { return append([]byte{}, b...), nil }

func decodeJSONB(b []byte) (any, error) {
	if len(b) < 1 || b[0] != 1 {
		return nil, fmt.Errorf("postgres: jsonb binary version %v, want 1", b[:min(len(b), 1)])
	}
	return string(b[1:]), nil
}

func decodeUUID(b []byte) (any, error) {
	if len(b) != 16 {
		return nil, lengthError("16", len(b))
	}
	return [16]byte(b), nil
}

// decodeDate keeps ±infinity as the extreme int32 values.
func decodeDate(b []byte) (any, error) {
	if len(b) != 4 {
		return nil, lengthError("4", len(b))
	}
	d := int32(binary.BigEndian.Uint32(b))
	if d == math.MaxInt32 || d == math.MinInt32 {
		return d, nil
	}
	return d + pgEpochDays, nil
}

func decodeTime(b []byte) (any, error) {
	if len(b) != 8 {
		return nil, lengthError("8", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// decodeTimestamp keeps ±infinity as the extreme int64 values.
func decodeTimestamp(b []byte) (any, error) {
	if len(b) != 8 {
		return nil, lengthError("8", len(b))
	}
	t := int64(binary.BigEndian.Uint64(b))
	if t == math.MaxInt64 || t == math.MinInt64 {
		return t, nil
	}
	return t + pgEpochMicros, nil
}

// Numeric sign words of the binary format.
const (
	numericPos  = 0x0000
	numericNeg  = 0x4000
	numericNaN  = 0xC000
	numericPInf = 0xD000
	numericNInf = 0xF000
)

// decodeNumeric renders PostgreSQL's binary numeric (base-10000 digits with
// a weight and a display scale) as exact decimal text.
//
//	ndigits int16 | weight int16 | sign uint16 | dscale int16 | digits [ndigits]int16
func decodeNumeric(b []byte) (any, error) {
	if len(b) < 8 {
		return nil, lengthError(">= 8", len(b))
	}
	ndigits := int(int16(binary.BigEndian.Uint16(b)))
	weight := int(int16(binary.BigEndian.Uint16(b[2:])))
	sign := binary.BigEndian.Uint16(b[4:])
	dscale := int(int16(binary.BigEndian.Uint16(b[6:])))
	if ndigits < 0 || dscale < 0 || len(b) != 8+2*ndigits {
		return nil, fmt.Errorf("postgres: bad numeric header (ndigits %d, dscale %d, %d bytes)", ndigits, dscale, len(b))
	}
	switch sign {
	case numericNaN:
		return "NaN", nil
	case numericPInf:
		return "Infinity", nil
	case numericNInf:
		return "-Infinity", nil
	case numericPos, numericNeg:
	default:
		return nil, fmt.Errorf("postgres: bad numeric sign %#x", sign)
	}
	digit := func(i int) int {
		if i < 0 || i >= ndigits {
			return 0
		}
		return int(binary.BigEndian.Uint16(b[8+2*i:]))
	}
	var s strings.Builder
	s.Grow(4*(max(weight, 0)+1) + dscale + 2)
	if sign == numericNeg {
		s.WriteByte('-')
	}
	if weight < 0 {
		s.WriteByte('0')
	} else {
		s.WriteString(strconv.Itoa(digit(0)))
		for i := 1; i <= weight; i++ {
			writeDigits4(&s, digit(i))
		}
	}
	if dscale > 0 {
		s.WriteByte('.')
		written := 0
		for i := weight + 1; written < dscale; i++ {
			d := digit(i)
			var g [4]byte
			for j := 3; j >= 0; j-- {
				g[j] = byte('0' + d%10)
				d /= 10
			}
			n := min(4, dscale-written)
			s.Write(g[:n])
			written += n
		}
	}
	return s.String(), nil
}

func writeDigits4(s *strings.Builder, d int) {
	var g [4]byte
	for j := 3; j >= 0; j-- {
		g[j] = byte('0' + d%10)
		d /= 10
	}
	s.Write(g[:])
}
