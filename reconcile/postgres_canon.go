package reconcile

import (
	"fmt"

	"github.com/apache/iceberg-go"
)

// oidTypes print an object's name; cdcd carries their OID (docs/types.md).
var oidTypes = map[string]bool{"oid": true, "regproc": true, "regprocedure": true, "regoper": true,
	"regoperator": true, "regclass": true, "regtype": true, "regconfig": true, "regdictionary": true,
	"regnamespace": true, "regrole": true, "regcollation": true}

// plainText types are text already: ::text renders them as their output
// function does.
var plainText = map[string]bool{"text": true, "varchar": true, "json": true, "jsonb": true, "xml": true,
	"citext": true, "name": true, "uuid": true, "jsonpath": true}

// pgCanon sets col's canonical kind from it, the Iceberg type its values
// are read back as, and returns the SQL of expr's canonical text for a
// value of PostgreSQL type base (a domain's base type; typtype 'c' a
// composite; elem the element type of an array).
func pgCanon(col *Column, expr, base string, typtype byte, elem string, elemType byte, it iceberg.Type) (string, error) {
	kind, scale, elemIt, err := canonFor(it)
	if err != nil {
		return "", err
	}
	col.Canon, col.Scale = kind, scale
	mismatch := func() (string, error) {
		return "", fmt.Errorf("a %s column read back as Iceberg %s: no comparison for it", base, it)
	}
	switch kind {
	case cInt:
		if oidTypes[base] {
			return "(" + expr + ")::oid::text", nil
		}
		return "(" + expr + ")::text", nil
	case cBool:
		return "(" + expr + ")::text", nil
	case cFloat32:
		if base != "float4" {
			return mismatch()
		}
		return "encode(float4send(" + expr + "),'hex')", nil
	case cFloat64:
		return "encode(float8send((" + expr + ")::float8),'hex')", nil
	case cDecimal:
		return "(" + expr + ")::numeric::text", nil
	case cText:
		var s string
		switch {
		case typtype == 'c':
			s = "to_json(" + expr + ")::text"
		case base == "hstore":
			s = "hstore_to_json(" + expr + ")::text"
		case plainText[base]:
			s = "(" + expr + ")::text"
		default: // the output function's text (::text may differ: bpchar trims, inet adds /32)
			s = "CASE WHEN (" + expr + ") IS NULL THEN NULL ELSE concat(" + expr + ") END"
		}
		col.Text = s
		return "octet_length(" + s + ")||':'||" + s, nil
	case cBytes:
		if base != "bytea" {
			return mismatch()
		}
		return "encode(" + expr + ",'hex')", nil
	case cUUID:
		return "(" + expr + ")::text", nil
	case cDate:
		return "encode(date_send(" + expr + "),'hex')", nil
	case cTime:
		if base != "time" {
			return mismatch()
		}
		return "encode(time_send(" + expr + "),'hex')", nil
	case cTimestamp:
		switch base {
		case "timestamptz":
			return "encode(timestamptz_send(" + expr + "),'hex')", nil
		case "timestamp":
			return "encode(timestamp_send(" + expr + "),'hex')", nil
		}
		return mismatch()
	case cList:
		if elem == "" {
			return mismatch()
		}
		col.Elem = &Column{Name: col.Name + "[]"}
		leaf := col.Elem
		for {
			l, ok := elemIt.(*iceberg.ListType)
			if !ok {
				break
			}
			leaf.Canon, leaf.Elem = cList, &Column{Name: col.Name + "[]"}
			leaf, elemIt = leaf.Elem, l.Element
		}
		es, err := pgCanon(leaf, "u.e", elem, elemType, "", ' ', elemIt)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("CASE WHEN (%[1]s) IS NULL THEN NULL ELSE coalesce(array_dims(%[1]s),'')||':'||"+
			"coalesce((SELECT string_agg(coalesce(%[2]s,'N'), ',' ORDER BY u.o) FROM unnest(%[1]s) WITH ORDINALITY u(e, o)),'') END",
			expr, es), nil
	}
	return mismatch()
}
