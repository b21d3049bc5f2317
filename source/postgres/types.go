package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
)

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

// typeResolver maps type OIDs to pgdecode.Types, asking the catalog about the
// types that are not built-in scalars. Not safe for concurrent use.
type typeResolver struct {
	q          querier
	cache      map[typeKey]*pgdecode.Type
	moneyScale int // -1 until asked
}

func newTypeResolver(q querier) *typeResolver {
	return &typeResolver{q: q, cache: map[typeKey]*pgdecode.Type{}, moneyScale: -1}
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
func (r *typeResolver) resolve(ctx context.Context, oid uint32, typmod int32, dims int) (*pgdecode.Type, error) {
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
		if err := r.q.QueryRow(ctx, "SELECT format_type($1, $2)", oid, typmod).Scan(&named.Name); err != nil {
			return nil, fmt.Errorf("postgres: name of type %d: %w", oid, err)
		}
		t = &named
	}
	r.cache[key] = t
	return t, nil
}

func (r *typeResolver) resolveUncached(ctx context.Context, oid uint32, typmod int32, dims, depth int) (*pgdecode.Type, error) {
	if depth > 16 {
		return nil, fmt.Errorf("%w: type %d nests deeper than 16 levels", pgdecode.ErrUnsupportedType, oid)
	}
	if t, ok, err := pgdecode.Builtin(oid, typmod, func() (int, error) { return r.money(ctx) }); ok || err != nil {
		return t, err
	}
	var ct catalogType
	err := r.q.QueryRow(ctx, typeQuery, oid, typmod).Scan(&ct.name, &ct.typtype, &ct.category, &ct.elem, &ct.base,
		&ct.baseTypmod, &ct.relid, &ct.sendFunc, &ct.rangeSub, &ct.multiRange)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: type oid %d does not exist (dropped?)", pgdecode.ErrUnsupportedType, oid)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: look up type %d: %w", oid, err)
	}
	t := &pgdecode.Type{Name: ct.name}
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
		dt.Name = ct.name
		return &dt, nil
	case ct.category == "A" && ct.elem != 0:
		elem, err := r.resolveUncached(ctx, ct.elem, typmod, 1, depth+1)
		if err != nil {
			return nil, err
		}
		if elem.Text {
			return nil, fmt.Errorf("%w: %s: arrays of a type without a binary form", pgdecode.ErrUnsupportedType, ct.name)
		}
		t.Col = pgdecode.ListColumn(elem.Col, dims)
		t.Decode = pgdecode.Array(elem.Decode, dims)
	case ct.typtype == "e":
		t.Col.Kind, t.Decode = schema.String, pgdecode.DecodeString
	case ct.typtype == "r" || ct.typtype == "m":
		subOID := ct.rangeSub
		if ct.typtype == "m" {
			subOID = ct.multiRange
		}
		sub, err := r.resolveUncached(ctx, subOID, -1, 1, depth+1)
		if err != nil {
			return nil, err
		}
		t.Col.Kind, t.Decode = schema.String, pgdecode.Range(sub)
		if ct.typtype == "m" {
			t.Decode = pgdecode.Multirange(sub)
		}
	case ct.typtype == "c":
		attrs, err := r.composite(ctx, ct.relid, depth)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ct.name, err)
		}
		t.Col.Kind, t.Decode = schema.JSON, pgdecode.Composite(attrs)
	case ct.sendFunc == "-": // no binary form: pgoutput sends text
		t.Col.Kind, t.Decode, t.Text = schema.String, pgdecode.DecodeString, true
	default:
		kind, decode, ok := pgdecode.BySendFunc(ct.sendFunc)
		if !ok {
			return nil, fmt.Errorf("%w: %s (oid %d, binary form %s)", pgdecode.ErrUnsupportedType, ct.name, oid, ct.sendFunc)
		}
		t.Col.Kind, t.Decode = kind, decode
	}
	return t, nil
}

// composite resolves the attributes of a composite type's relation.
func (r *typeResolver) composite(ctx context.Context, relid uint32, depth int) ([]pgdecode.Attr, error) {
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
	attrs := make([]pgdecode.Attr, len(list))
	for i, a := range list {
		t, err := r.resolveUncached(ctx, a.oid, a.typmod, max(int(a.dims), 1), depth+1)
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", a.name, err)
		}
		if t.Text {
			return nil, fmt.Errorf("%w: attribute %q has a type without a binary form", pgdecode.ErrUnsupportedType, a.name)
		}
		attrs[i] = pgdecode.Attr{Name: a.name, Type: t}
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
