package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

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

// errUnsupportedType is wrapped by every "type not supported" error.
var errUnsupportedType = errors.New("postgres: unsupported column type")

// errArrayShape is wrapped when an array value has no faithful list form.
var errArrayShape = errors.New("postgres: array shape not representable")

// pgType is how cdcd reads values of one PostgreSQL type (with its
// modifier and, for arrays, declared dimensions).
type pgType struct {
	name string        // format_type(), for messages
	col  schema.Column // Kind, Precision, Scale, Elem
	// decode reads the type's binary form, or its text form when text.
	decode decodeFunc
	// slab, when set, reads the binary form as decode does into a slab
	// (the initial load's common scalar types).
	slab slabDecodeFunc
	// text: the type has no binary send function, so pgoutput sends it as
	// text and the snapshot selects it cast to text.
	text bool
}

// builtinType maps the built-in scalar types. ok is false for other OIDs.
func builtinType(oid uint32, typmod int32, moneyScale func() (int, error)) (t *pgType, ok bool, err error) {
	t = &pgType{}
	c := &t.col
	switch oid {
	case oidBool:
		c.Kind, t.decode = schema.Bool, decodeBool
	case oidInt2:
		c.Kind, t.decode, t.slab = schema.Int16, decodeInt2, slabInt(readInt2)
	case oidInt4:
		c.Kind, t.decode, t.slab = schema.Int32, decodeInt4, slabInt(readInt4)
	case oidInt8:
		c.Kind, t.decode, t.slab = schema.Int64, decodeInt8, slabInt(readInt8)
	case oidOID, oidXID, oidCID, oidRegproc, oidRegprocedure, oidRegoper, oidRegoperator, oidRegclass, oidRegtype,
		oidRegconfig, oidRegdictionary, oidRegnamespace, oidRegrole, oidRegcollation:
		// The reg* types travel as the object's OID, as their binary form does.
		c.Kind, t.decode = schema.Int64, decodeUint4
	case oidXID8:
		c.Kind, t.decode = schema.Int64, decodeXid8
	case oidFloat4:
		c.Kind, t.decode = schema.Float32, decodeFloat4
	case oidFloat8:
		c.Kind, t.decode, t.slab = schema.Float64, decodeFloat8, slabFloat8
	case oidNumeric:
		c.Kind, t.decode, t.slab = schema.Decimal, decodeNumeric, slabNumeric
		if typmod >= 4 {
			c.Precision = int((typmod - 4) >> 16 & 0xffff)
			c.Scale = int((typmod - 4) & 0xffff)
		}
	case oidMoney:
		scale, err := moneyScale()
		if err != nil {
			return nil, true, err
		}
		c.Kind, c.Precision, c.Scale, t.decode = schema.Decimal, 19, scale, decodeMoney(scale)
	case oidText, oidVarchar, oidBPChar, oidName, oidXML, oidPgNodeTree:
		c.Kind, t.decode, t.slab = schema.String, decodeString, slabString
	case oidChar:
		c.Kind, t.decode = schema.String, decodeChar
	case oidBytea:
		c.Kind, t.decode = schema.Bytes, decodeBytes
	case oidJSON:
		c.Kind, t.decode, t.slab = schema.JSON, decodeString, slabString
	case oidJSONB:
		c.Kind, t.decode = schema.JSON, decodeVersioned
	case oidJSONPath:
		c.Kind, t.decode = schema.String, decodeVersioned
	case oidUUID:
		c.Kind, t.decode = schema.UUID, decodeUUID
	case oidDate:
		c.Kind, t.decode, t.slab = schema.Date, decodeDate, slabDate
	case oidTime:
		c.Kind, t.decode = schema.Time, decodeTime
	case oidTimeTZ:
		c.Kind, t.decode = schema.String, decodeTimeTZ
	case oidTimestamp:
		c.Kind, t.decode, t.slab = schema.Timestamp, decodeTimestamp, slabInt(readTimestamp)
	case oidTimestampTZ:
		c.Kind, t.decode, t.slab = schema.TimestampTZ, decodeTimestamp, slabInt(readTimestamp)
	case oidInterval:
		c.Kind, t.decode = schema.Interval, decodeInterval
	case oidBit, oidVarbit:
		c.Kind, t.decode = schema.String, decodeBits
	case oidInet, oidCIDR:
		c.Kind, t.decode = schema.String, decodeInet
	case oidMacaddr:
		c.Kind, t.decode = schema.String, decodeMAC(6)
	case oidMacaddr8:
		c.Kind, t.decode = schema.String, decodeMAC(8)
	case oidPoint:
		c.Kind, t.decode = schema.String, decodePoint
	case oidLine:
		c.Kind, t.decode = schema.String, decodeLine
	case oidLseg:
		c.Kind, t.decode = schema.String, decodeLseg
	case oidBox:
		c.Kind, t.decode = schema.String, decodeBox
	case oidPath:
		c.Kind, t.decode = schema.String, decodePath
	case oidPolygon:
		c.Kind, t.decode = schema.String, decodePolygon
	case oidCircle:
		c.Kind, t.decode = schema.String, decodeCircle
	case oidPgLSN:
		c.Kind, t.decode = schema.String, decodeLSN
	case oidTID:
		c.Kind, t.decode = schema.String, decodeTID
	case oidTSVector:
		c.Kind, t.decode = schema.String, decodeTSVector
	default:
		return nil, false, nil
	}
	return t, true, nil
}

// Extension types recognized by their binary send function.
var sendFuncKinds = map[string]struct {
	kind   schema.Kind
	decode decodeFunc
}{
	"hstore_send": {schema.JSON, decodeHstore},
	"citextsend":  {schema.String, decodeString},
}

// typeKey identifies a resolved type.
type typeKey struct {
	oid    uint32
	typmod int32
	dims   int
}

// querier is the part of *pgx.Conn the resolver uses.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// typeResolver maps type OIDs to pgTypes, asking the catalog about the
// types that are not built-in scalars. Not safe for concurrent use.
type typeResolver struct {
	q          querier
	cache      map[typeKey]*pgType
	moneyScale int // -1 until asked
}

func newTypeResolver(q querier) *typeResolver {
	return &typeResolver{q: q, cache: map[typeKey]*pgType{}, moneyScale: -1}
}

// forget drops the cached types, so the next lookups see the catalog as
// it is now.
func (r *typeResolver) forget() { clear(r.cache) }

// catalogType is a pg_type row.
type catalogType struct {
	name, sendFunc       string
	typtype, category    string
	elem, base, relid    uint32
	baseTypmod           int32
	rangeSub, multiRange uint32
}

const typeQuery = `SELECT format_type(t.oid, $2), t.typtype::text, t.typcategory::text, t.typelem, t.typbasetype, t.typtypmod,
	t.typrelid, t.typsend::regproc::text,
	COALESCE((SELECT r.rngsubtype FROM pg_range r WHERE r.rngtypid = t.oid), 0),
	COALESCE((SELECT r.rngsubtype FROM pg_range r WHERE r.rngmultitypid = t.oid), 0)
	FROM pg_type t WHERE t.oid = $1`

// resolve returns how to read values of type oid with modifier typmod;
// dims is the declared number of array dimensions (pg_attribute.attndims,
// 0 or 1 for one).
func (r *typeResolver) resolve(ctx context.Context, oid uint32, typmod int32, dims int) (*pgType, error) {
	dims = max(dims, 1)
	key := typeKey{oid, typmod, dims}
	if t, ok := r.cache[key]; ok {
		return t, nil
	}
	t, err := r.resolveUncached(ctx, oid, typmod, dims, 0)
	if err != nil {
		return nil, err
	}
	if r.q != nil {
		// The type's own name, as of its OID and modifier: the catalog's
		// column may already have another type than the message describes.
		named := *t
		if err := r.q.QueryRow(ctx, "SELECT format_type($1, $2)", oid, typmod).Scan(&named.name); err != nil {
			return nil, fmt.Errorf("postgres: name of type %d: %w", oid, err)
		}
		t = &named
	}
	r.cache[key] = t
	return t, nil
}

func (r *typeResolver) resolveUncached(ctx context.Context, oid uint32, typmod int32, dims, depth int) (*pgType, error) {
	if depth > 16 {
		return nil, fmt.Errorf("%w: type %d nests deeper than 16 levels", errUnsupportedType, oid)
	}
	if t, ok, err := builtinType(oid, typmod, func() (int, error) { return r.money(ctx) }); ok || err != nil {
		return t, err
	}
	var ct catalogType
	err := r.q.QueryRow(ctx, typeQuery, oid, typmod).Scan(&ct.name, &ct.typtype, &ct.category, &ct.elem, &ct.base,
		&ct.baseTypmod, &ct.relid, &ct.sendFunc, &ct.rangeSub, &ct.multiRange)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: type oid %d does not exist (dropped?)", errUnsupportedType, oid)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: look up type %d: %w", oid, err)
	}
	t := &pgType{name: ct.name}
	switch {
	case ct.typtype == "d": // domain: its base type, with the domain's modifier
		mod := ct.baseTypmod
		if typmod >= 0 {
			mod = typmod
		}
		base, err := r.resolveUncached(ctx, ct.base, mod, dims, depth+1)
		if err != nil {
			return nil, err
		}
		dt := *base
		dt.name = ct.name
		return &dt, nil
	case ct.category == "A" && ct.elem != 0:
		elem, err := r.resolveUncached(ctx, ct.elem, typmod, 1, depth+1)
		if err != nil {
			return nil, err
		}
		if elem.text {
			return nil, fmt.Errorf("%w: %s: arrays of a type without a binary form", errUnsupportedType, ct.name)
		}
		t.col = listColumn(elem.col, dims)
		t.decode = arrayDecoder(elem.decode, dims)
	case ct.typtype == "e":
		t.col.Kind, t.decode = schema.String, decodeString
	case ct.typtype == "r" || ct.typtype == "m":
		subOID := ct.rangeSub
		if ct.typtype == "m" {
			subOID = ct.multiRange
		}
		sub, err := r.resolveUncached(ctx, subOID, -1, 1, depth+1)
		if err != nil {
			return nil, err
		}
		t.col.Kind, t.decode = schema.String, rangeDecoder(sub)
		if ct.typtype == "m" {
			t.decode = multirangeDecoder(sub)
		}
	case ct.typtype == "c":
		attrs, err := r.composite(ctx, ct.relid, depth)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ct.name, err)
		}
		t.col.Kind, t.decode = schema.JSON, compositeDecoder(attrs)
	case ct.sendFunc == "-": // no binary form: pgoutput sends text
		t.col.Kind, t.decode, t.text = schema.String, decodeString, true
	default:
		m, ok := sendFuncKinds[ct.sendFunc]
		if !ok {
			return nil, fmt.Errorf("%w: %s (oid %d, binary form %s)", errUnsupportedType, ct.name, oid, ct.sendFunc)
		}
		t.col.Kind, t.decode = m.kind, m.decode
	}
	return t, nil
}

// composite resolves the attributes of a composite type's relation.
func (r *typeResolver) composite(ctx context.Context, relid uint32, depth int) ([]compositeAttr, error) {
	rows, err := r.q.Query(ctx, `SELECT attname, atttypid, atttypmod, attndims FROM pg_attribute
		WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, relid)
	if err != nil {
		return nil, fmt.Errorf("postgres: attributes of composite type: %w", err)
	}
	type attr struct {
		name   string
		oid    uint32
		typmod int32
		dims   int32
	}
	var list []attr
	for rows.Next() {
		var a attr
		if err := rows.Scan(&a.name, &a.oid, &a.typmod, &a.dims); err != nil {
			rows.Close()
			return nil, err
		}
		list = append(list, a)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	attrs := make([]compositeAttr, len(list))
	for i, a := range list {
		t, err := r.resolveUncached(ctx, a.oid, a.typmod, max(int(a.dims), 1), depth+1)
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", a.name, err)
		}
		if t.text {
			return nil, fmt.Errorf("%w: attribute %q has a type without a binary form", errUnsupportedType, a.name)
		}
		attrs[i] = compositeAttr{name: a.name, typ: t}
	}
	return attrs, nil
}

// money returns the fraction digits of money in this database: money's
// binary form counts the smallest unit, whose size lc_monetary decides.
func (r *typeResolver) money(ctx context.Context) (int, error) {
	if r.moneyScale >= 0 {
		return r.moneyScale, nil
	}
	var scale int
	if err := r.q.QueryRow(ctx, `SELECT scale('1'::money::numeric)`).Scan(&scale); err != nil {
		return 0, fmt.Errorf("postgres: money's fraction digits: %w", err)
	}
	r.moneyScale = scale
	return scale, nil
}
