package pgdecode

import (
	"errors"

	"github.com/cdcd-dev/cdcd/schema"
)

// Built-in type OIDs with a fixed mapping (pg_type.dat; stable across
// versions). Arrays, ranges, enums, domains, composites and extension
// types are looked up in the catalog (see typeResolver).
const (
	oidBool          = 16
	oidBytea         = 17
	oidChar          = 18
	oidName          = 19
	oidInt8          = 20
	oidInt2          = 21
	oidInt4          = 23
	oidRegproc       = 24
	oidText          = 25
	oidOID           = 26
	oidTID           = 27
	oidXID           = 28
	oidCID           = 29
	oidJSON          = 114
	oidXML           = 142
	oidPgNodeTree    = 194
	oidPoint         = 600
	oidLseg          = 601
	oidPath          = 602
	oidBox           = 603
	oidPolygon       = 604
	oidLine          = 628
	oidCIDR          = 650
	oidFloat4        = 700
	oidFloat8        = 701
	oidCircle        = 718
	oidMacaddr8      = 774
	oidMoney         = 790
	oidMacaddr       = 829
	oidInet          = 869
	oidBPChar        = 1042
	oidVarchar       = 1043
	oidDate          = 1082
	oidTime          = 1083
	oidTimestamp     = 1114
	oidTimestampTZ   = 1184
	oidInterval      = 1186
	oidTimeTZ        = 1266
	oidBit           = 1560
	oidVarbit        = 1562
	oidNumeric       = 1700
	oidRegprocedure  = 2202
	oidRegoper       = 2203
	oidRegoperator   = 2204
	oidRegclass      = 2205
	oidRegtype       = 2206
	oidUUID          = 2950
	oidPgLSN         = 3220
	oidTSVector      = 3614
	oidRegconfig     = 3734
	oidRegdictionary = 3769
	oidJSONB         = 3802
	oidJSONPath      = 4072
	oidRegnamespace  = 4089
	oidRegrole       = 4096
	oidRegcollation  = 4191
	oidXID8          = 5069
)

// ErrUnsupportedType is wrapped by every "type not supported" error.
var ErrUnsupportedType = errors.New("postgres: unsupported column type")

// ErrArrayShape is wrapped when an array value has no faithful list form.
var ErrArrayShape = errors.New("postgres: array shape not representable")

// Type is how cdcd reads values of one PostgreSQL type (with its
// modifier and, for arrays, declared dimensions).
type Type struct {
	Name string        // format_type(), for messages
	Col  schema.Column // Kind, Precision, Scale, Elem
	// Decode reads the type's binary form, or its text form when Text.
	Decode Func
	// Slab, when set, reads the binary form as Decode does into a slab
	// (the initial load's common scalar types).
	Slab SlabFunc
	// Text: the type has no binary send function, so pgoutput sends it as
	// text and the snapshot selects it cast to text.
	Text bool
}

// Builtin maps the built-in scalar types. ok is false for other OIDs.
func Builtin(oid uint32, typmod int32, moneyScale func() (int, error)) (t *Type, ok bool, err error) {
	t = &Type{}
	c := &t.Col
	switch oid {
	case oidBool:
		c.Kind, t.Decode = schema.Bool, decodeBool
	case oidInt2:
		c.Kind, t.Decode, t.Slab = schema.Int16, decodeInt2, slabInt(readInt2)
	case oidInt4:
		c.Kind, t.Decode, t.Slab = schema.Int32, decodeInt4, slabInt(readInt4)
	case oidInt8:
		c.Kind, t.Decode, t.Slab = schema.Int64, decodeInt8, slabInt(readInt8)
	case oidOID, oidXID, oidCID, oidRegproc, oidRegprocedure, oidRegoper, oidRegoperator, oidRegclass, oidRegtype,
		oidRegconfig, oidRegdictionary, oidRegnamespace, oidRegrole, oidRegcollation:
		// The reg* types travel as the object's OID, as their binary form does.
		c.Kind, t.Decode = schema.Int64, decodeUint4
	case oidXID8:
		c.Kind, t.Decode = schema.Int64, decodeXid8
	case oidFloat4:
		c.Kind, t.Decode = schema.Float32, decodeFloat4
	case oidFloat8:
		c.Kind, t.Decode, t.Slab = schema.Float64, decodeFloat8, slabFloat8
	case oidNumeric:
		c.Kind, t.Decode, t.Slab = schema.Decimal, decodeNumeric, slabNumeric
		if typmod >= 4 {
			c.Precision = int((typmod - 4) >> 16 & 0xffff)
			c.Scale = int((typmod - 4) & 0xffff)
		}
	case oidMoney:
		scale, err := moneyScale()
		if err != nil {
			return nil, true, err
		}
		c.Kind, c.Precision, c.Scale, t.Decode = schema.Decimal, 19, scale, decodeMoney(scale)
	case oidText, oidVarchar, oidBPChar, oidName, oidXML, oidPgNodeTree:
		c.Kind, t.Decode, t.Slab = schema.String, DecodeString, slabString
	case oidChar:
		c.Kind, t.Decode = schema.String, decodeChar
	case oidBytea:
		c.Kind, t.Decode = schema.Bytes, decodeBytes
	case oidJSON:
		c.Kind, t.Decode, t.Slab = schema.JSON, DecodeString, slabString
	case oidJSONB:
		c.Kind, t.Decode, t.Slab = schema.JSON, decodeVersioned, slabVersioned
	case oidJSONPath:
		c.Kind, t.Decode, t.Slab = schema.String, decodeVersioned, slabVersioned
	case oidUUID:
		c.Kind, t.Decode = schema.UUID, decodeUUID
	case oidDate:
		c.Kind, t.Decode, t.Slab = schema.Date, decodeDate, slabDate
	case oidTime:
		c.Kind, t.Decode = schema.Time, decodeTime
	case oidTimeTZ:
		c.Kind, t.Decode = schema.String, decodeTimeTZ
	case oidTimestamp:
		c.Kind, t.Decode, t.Slab = schema.Timestamp, decodeTimestamp, slabInt(readTimestamp)
	case oidTimestampTZ:
		c.Kind, t.Decode, t.Slab = schema.TimestampTZ, decodeTimestamp, slabInt(readTimestamp)
	case oidInterval:
		c.Kind, t.Decode = schema.Interval, decodeInterval
	case oidBit, oidVarbit:
		c.Kind, t.Decode = schema.String, decodeBits
	case oidInet, oidCIDR:
		c.Kind, t.Decode = schema.String, decodeInet
	case oidMacaddr:
		c.Kind, t.Decode = schema.String, decodeMAC(6)
	case oidMacaddr8:
		c.Kind, t.Decode = schema.String, decodeMAC(8)
	case oidPoint:
		c.Kind, t.Decode = schema.String, decodePoint
	case oidLine:
		c.Kind, t.Decode = schema.String, decodeLine
	case oidLseg:
		c.Kind, t.Decode = schema.String, decodeLseg
	case oidBox:
		c.Kind, t.Decode = schema.String, decodeBox
	case oidPath:
		c.Kind, t.Decode = schema.String, decodePath
	case oidPolygon:
		c.Kind, t.Decode = schema.String, decodePolygon
	case oidCircle:
		c.Kind, t.Decode = schema.String, decodeCircle
	case oidPgLSN:
		c.Kind, t.Decode = schema.String, decodeLSN
	case oidTID:
		c.Kind, t.Decode = schema.String, decodeTID
	case oidTSVector:
		c.Kind, t.Decode = schema.String, decodeTSVector
	default:
		return nil, false, nil
	}
	return t, true, nil
}

// Extension types recognized by their binary send function.
var sendFuncKinds = map[string]struct {
	kind   schema.Kind
	decode Func
}{
	"hstore_send": {schema.JSON, decodeHstore},
	"citextsend":  {schema.String, DecodeString},
}

// BySendFunc returns how to read an extension type recognized by the name
// of its binary send function (pg_type.typsend), ok false when unknown.
func BySendFunc(name string) (kind schema.Kind, decode Func, ok bool) {
	m, ok := sendFuncKinds[name]
	return m.kind, m.decode, ok
}

// IsInteger reports whether oid is int2, int4 or int8.
func IsInteger(oid uint32) bool { return oid == oidInt2 || oid == oidInt4 || oid == oidInt8 }
