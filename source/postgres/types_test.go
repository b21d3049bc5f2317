package postgres

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
)

// matrixColumn is one column of the type matrix: its type and the values
// (SQL literals) of its rows; rows beyond the list hold NULL.
type matrixColumn struct {
	name, typ string
	values    []string
	// expect is the SQL expression whose text output the captured value
	// must equal ("%s" is the column); default: the type's output function.
	expect string
}

var matrixTypes = `CREATE EXTENSION IF NOT EXISTS hstore;
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE DOMAIN price AS numeric(10,2);
CREATE DOMAIN tags AS text[];
CREATE TYPE pair AS (a int, b text, c timestamptz, d numeric[], e mood);
CREATE TYPE floatrange AS RANGE (subtype = float8);`

var matrix = []matrixColumn{
	{name: "i2", typ: "int2", values: []string{"0", "'-32768'", "32767"}},
	{name: "i4", typ: "int4", values: []string{"'-2147483648'", "2147483647"}},
	{name: "i8", typ: "int8", values: []string{"'-9223372036854775808'", "9223372036854775807", "0"}},
	{name: "n", typ: "numeric", values: []string{"'NaN'", "'Infinity'", "'-Infinity'", "0", "-0.000001",
		"123456789012345678901234567890.123456789", "1e-20", "10000", "0.1000"}},
	{name: "n102", typ: "numeric(10,2)", values: []string{"'NaN'", "12345678.90", "-0.01", "0"}},
	{name: "f4", typ: "float4", values: []string{"'NaN'", "'Infinity'", "'-Infinity'", "'-0'", "1.5", "3.4028235e38", "1e-45", "0.1", "1234567"}},
	{name: "f8", typ: "float8", values: []string{"'NaN'", "'Infinity'", "'-Infinity'", "'-0'", "0.1", "1e308", "5e-324",
		"123456789012345678", "1e15", "0.0001", "0.00001"}},
	{name: "t", typ: "text", values: []string{"''", "'héllo wörld'", `E'tab\there\nnl'`, "'quote''s'", `'back\slash'`}},
	{name: "vc", typ: "varchar(5)", values: []string{"'ab'", "''"}},
	{name: "bpc", typ: "char(5)", values: []string{"'ab'"}},
	{name: "ch", typ: `"char"`, values: []string{"'a'", `'\200'`, "''"}},
	{name: "nm", typ: "name", values: []string{"'pg_catalog'"}},
	{name: "by", typ: "bytea", values: []string{`'\x'`, `'\x00ff10'`}, expect: "encode(%s, 'hex')"},
	{name: "b", typ: "bool", values: []string{"true", "false"}},
	{name: "d", typ: "date", values: []string{"'infinity'", "'-infinity'", "'0044-03-15 BC'", "'2000-01-01'", "'1970-01-01'",
		"'4713-01-01 BC'", "'5874897-12-31'", "'1969-12-31'"}},
	{name: "tm", typ: "time", values: []string{"'00:00'", "'23:59:59.999999'", "'24:00:00'", "'12:34:56.5'"}},
	{name: "ttz", typ: "timetz", values: []string{"'13:45:00.123+05:30'", "'00:00:00-14:59'", "'23:59:59.999999+14'", "'12:00:00+01:02:03'"}},
	{name: "ts", typ: "timestamp", values: []string{"'infinity'", "'-infinity'", "'0001-01-01 00:00:00 BC'", "'2000-02-29 12:34:56.789012'",
		"'294247-01-10 04:00:54.775806'", "'4713-01-01 00:00:00 BC'", "'1969-12-31 23:59:59.5'"}},
	{name: "tstz", typ: "timestamptz", values: []string{"'infinity'", "'-infinity'", "'2000-01-01 00:00:00+05'", "'0044-03-15 12:00:00+00 BC'",
		"'1969-12-31 23:59:59.999999+00'"}},
	{name: "iv", typ: "interval", values: []string{"'1 year 2 months 3 days 04:05:06.789'", "'-1 mon 2 days -03:00:00'", "'0'",
		"'178000000 years'", "'-00:00:00.000001'", "'-1 year -2 months'"}},
	{name: "u", typ: "uuid", values: []string{"'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'00000000-0000-0000-0000-000000000000'"}},
	{name: "j", typ: "json", values: []string{`'{"b": 1,   "a": [1, 2.50]}'`, `'"x"'`, "'null'"}},
	{name: "jb", typ: "jsonb", values: []string{`'{"b": 1, "a": [1, 2.50], "c": {"d": null}}'`, "'[]'"}},
	{name: "jp", typ: "jsonpath", values: []string{`'$.a[*] ? (@ > 1)'`}},
	{name: "ai", typ: "int[]", values: []string{"'{}'", "'{1,NULL,3}'", "'{NULL}'"}},
	{name: "at", typ: "text[]", values: []string{`'{"a b","","NULL",null,"q\"x","{}"}'`}},
	{name: "am", typ: "int[][]", values: []string{"'{{1,2},{3,NULL}}'", "'{}'"}},
	{name: "an", typ: "numeric(10,2)[]", values: []string{"'{NaN,1.50,-2}'"}},
	{name: "aiv", typ: "interval[]", values: []string{"'{1 day,-1 mon}'"}},
	{name: "ats", typ: "timestamptz[]", values: []string{`'{infinity,"2000-01-01 00:00:00+00"}'`}},
	{name: "au", typ: "uuid[]", values: []string{"'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}'"}},
	{name: "ab", typ: "bool[]", values: []string{"'{t,f,NULL}'"}},
	{name: "e", typ: "mood", values: []string{"'happy'", "'sad'"}},
	{name: "ae", typ: "mood[]", values: []string{"'{ok,NULL}'"}},
	{name: "dom", typ: "posint", values: []string{"5"}},
	{name: "dnum", typ: "price", values: []string{"1.25", "'NaN'"}},
	{name: "dtags", typ: "tags", values: []string{"'{x,y}'"}},
	{name: "mo", typ: "money", values: []string{"'12.34'", "'-92233720368547758.08'", "'92233720368547758.07'", "0"}, expect: "%s::numeric::text"},
	{name: "bt", typ: "bit(5)", values: []string{"B'10101'"}},
	{name: "vb", typ: "varbit", values: []string{"B''", "B'1011001110'"}},
	{name: "ip", typ: "inet", values: []string{"'192.168.1.5'", "'192.168.1.5/24'", "'::1'", "'2001:db8::1/64'", "'::ffff:1.2.3.4'",
		"'::1.2.3.4'", "'1:0:0:1:0:0:0:1'", "'0.0.0.0/0'", "'fe80::/10'", "'::'"}},
	{name: "cidr", typ: "cidr", values: []string{"'10.0.0.0/8'", "'2001:db8::/32'", "'192.168.1.0/24'", "'10.1.2.3/32'"}},
	{name: "mac", typ: "macaddr", values: []string{"'08:00:2b:01:02:03'"}},
	{name: "mac8", typ: "macaddr8", values: []string{"'08:00:2b:01:02:03:04:05'"}},
	{name: "pt", typ: "point", values: []string{"'(1.5,-2)'", "'(1e20,0.1)'"}},
	{name: "ln", typ: "line", values: []string{"'{1,2,3}'"}},
	{name: "ls", typ: "lseg", values: []string{"'[(0,0),(1,1)]'"}},
	{name: "bx", typ: "box", values: []string{"'(1,1),(0,0)'"}},
	{name: "pa", typ: "path", values: []string{"'[(0,0),(1,1),(2,0)]'", "'((0,0),(1,1))'"}},
	{name: "pg", typ: "polygon", values: []string{"'((0,0),(1,1),(1,0))'"}},
	{name: "ci", typ: "circle", values: []string{"'<(0,0),1.5>'"}},
	{name: "x", typ: "xml", values: []string{`'<a b="1">x &amp; y</a>'`}},
	{name: "hs", typ: "hstore", values: []string{`'a=>1, b=>NULL, "c d"=>"e\"f"'`, "''"}, expect: "hstore_to_json(%s)::text"},
	{name: "comp", typ: "pair", values: []string{"ROW(1, 'x y', '2000-01-01 00:00:00+00', '{1.5,NULL}', 'ok')", "ROW(NULL, NULL, NULL, NULL, NULL)"},
		expect: "to_json(%s)::text"},
	{name: "acomp", typ: "pair[]", values: []string{"ARRAY[ROW(2, 'z', 'infinity', '{}', 'sad')::pair]"}, expect: "to_json(%s)::text"},
	{name: "r4", typ: "int4range", values: []string{"'[1,10)'", "'empty'", "'(,5]'", "'(,)'"}},
	{name: "r8", typ: "int8range", values: []string{"'[-9223372036854775808,0)'"}},
	{name: "nr", typ: "numrange", values: []string{"'[1.5,2.5]'", "'(NaN,)'"}},
	{name: "dr", typ: "daterange", values: []string{"'[2000-01-01,infinity)'"}},
	{name: "tsr", typ: "tsrange", values: []string{`'["2000-01-01 00:00:00","2000-01-02 00:00:00")'`}},
	{name: "tstzr", typ: "tstzrange", values: []string{`'["2000-01-01 00:00:00+02",)'`}},
	{name: "fr", typ: "floatrange", values: []string{"'[1.5,Infinity)'"}},
	{name: "mr", typ: "int4multirange", values: []string{"'{[1,3),[5,7)}'", "'{}'"}},
	{name: "tsv", typ: "tsvector", values: []string{`'a fat:2A cat''s:3,4B \\x:1'`, "''"}},
	{name: "lsn", typ: "pg_lsn", values: []string{"'16/B374D848'", "'0/0'"}},
	{name: "o", typ: "oid", values: []string{"4294967295"}},
	{name: "tid", typ: "tid", values: []string{"'(12,3)'"}},
	{name: "rc", typ: "regclass", values: []string{"'pg_class'"}, expect: "%s::oid::text"},
	{name: "acl", typ: "aclitem", values: []string{"'postgres=r/postgres'"}},
}

// TestTypeMatrix captures a column of every type through the initial load
// (COPY binary) and through streaming (pgoutput binary tuples) and checks
// that both give the same value, and that the value is exactly what
// PostgreSQL prints for it (text output, to_json for composites and
// hstore), with the model's kind for each type.
func TestTypeMatrix(t *testing.T) {
	t.Parallel()
	var cols, defs []string
	rows := 0
	for _, c := range matrix {
		cols = append(cols, c.name)
		defs = append(defs, c.name+" "+c.typ)
		rows = max(rows, len(c.values))
	}
	e := setup(t, matrixTypes+"\nCREATE TABLE matrix (id int PRIMARY KEY, "+strings.Join(defs, ", ")+")")
	e.exec(t, "ALTER DATABASE "+currentDB(t, e)+" SET timezone TO 'UTC'")
	for i := 0; i < rows; i++ {
		vals := []string{fmt.Sprint(i + 1)}
		for _, c := range matrix {
			v := "NULL"
			if i < len(c.values) {
				v = c.values[i] + "::" + c.typ
			}
			vals = append(vals, v)
		}
		e.exec(t, "INSERT INTO matrix (id, "+strings.Join(cols, ", ")+") VALUES ("+strings.Join(vals, ", ")+")")
	}
	c := newCollector()
	e.start(t, []string{"matrix"}, true, c)
	e.exec(t, fmt.Sprintf("INSERT INTO matrix SELECT id + 1000, %s FROM matrix", strings.Join(cols, ", ")))
	got := c.wait(t, 2*rows)
	if len(got) != 2*rows {
		t.Fatalf("%d changes, want %d", len(got), 2*rows)
	}

	// What PostgreSQL prints for each value, in a session with ISO styles and UTC.
	exprs := make([]string, len(matrix))
	for i, mc := range matrix {
		if mc.expect == "" {
			// concat prints with the type's output function, as ::text
			// does not for every type (bool, inet, char(n)).
			exprs[i] = fmt.Sprintf("CASE WHEN %[1]s IS NOT NULL THEN concat(%[1]s) END", mc.name)
		} else {
			exprs[i] = fmt.Sprintf(mc.expect, mc.name)
		}
	}
	e.exec(t, "SET datestyle TO ISO; SET intervalstyle TO iso_8601; SET timezone TO 'UTC'; SET extra_float_digits TO 1")
	pgRows, err := e.conn.Query(t.Context(), "SELECT "+strings.Join(exprs, ", ")+" FROM matrix WHERE id <= $1 ORDER BY id", rows)
	if err != nil {
		t.Fatal(err)
	}
	var want [][]*string
	for pgRows.Next() {
		vals := make([]*string, len(matrix))
		ptrs := make([]any, len(matrix))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := pgRows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		want = append(want, vals)
	}
	if err := pgRows.Err(); err != nil {
		t.Fatal(err)
	}

	snap, streamed := got[:rows], got[rows:]
	for i := 0; i < rows; i++ {
		r, s := snap[i], streamed[i]
		if r.Op != source.OpRead || s.Op != source.OpCreate || r.After[0].(int64) != int64(i+1) || s.After[0].(int64) != int64(i+1001) {
			t.Fatalf("row %d: %s %v / %s %v", i, r.Op, r.After[0], s.Op, s.After[0])
		}
		for ci, mc := range matrix {
			col := r.Table.Columns[ci+1]
			rv, sv := r.After[ci+1], s.After[ci+1]
			if !pgdecode.Equal(rv, sv) {
				t.Errorf("%s (%s) row %d: snapshot %#v, streaming %#v", mc.name, mc.typ, i+1, rv, sv)
			}
			w := want[i][ci]
			if (rv == nil) != (w == nil) {
				t.Errorf("%s (%s) row %d: captured %#v, PostgreSQL %v", mc.name, mc.typ, i+1, rv, w)
				continue
			}
			if rv == nil {
				continue
			}
			if g := renderForCompare(col, mc, rv); g != *w {
				t.Errorf("%s (%s) row %d: captured %q (%#v), PostgreSQL prints %q", mc.name, mc.typ, i+1, g, rv, *w)
			}
		}
	}
	kinds := map[string]string{}
	for _, col := range snap[0].Table.Columns {
		kinds[col.Name] = col.TypeString()
	}
	for name, want := range map[string]string{
		"i2": "int16", "n": "decimal", "n102": "decimal(10,2)", "f4": "float32", "ttz": "string", "iv": "interval",
		"ai": "list<int32>", "am": "list<list<int32>>", "an": "list<decimal(10,2)>", "e": "string", "dom": "int32",
		"dnum": "decimal(10,2)", "dtags": "list<string>", "mo": "decimal(19,2)", "hs": "json", "comp": "json",
		"acomp": "list<json>", "r4": "string", "jb": "json", "rc": "int64", "acl": "string", "tstz": "timestamptz",
	} {
		if kinds[name] != want {
			t.Errorf("column %s has kind %s, want %s", name, kinds[name], want)
		}
	}
}

// renderForCompare renders a captured value the way the matrix's
// expression prints it.
func renderForCompare(col schema.Column, mc matrixColumn, v any) string {
	switch {
	case strings.HasPrefix(mc.expect, "to_json"):
		return string(pgdecode.AppendJSON(nil, col, v))
	case mc.name == "by":
		return strings.TrimPrefix(pgdecode.TextOf(col, v), `\x`)
	case col.Kind == schema.List:
		return pgArrayText(*col.Elem, v.([]any))
	}
	return pgdecode.TextOf(col, v)
}

// pgArrayText renders a list as array_out does.
func pgArrayText(elem schema.Column, l []any) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, e := range l {
		if i > 0 {
			b.WriteByte(',')
		}
		switch {
		case e == nil:
			b.WriteString("NULL")
		case elem.Kind == schema.List:
			b.WriteString(pgArrayText(*elem.Elem, e.([]any)))
		default:
			s := pgdecode.TextOf(elem, e)
			if s == "" || strings.EqualFold(s, "NULL") || strings.ContainsAny(s, "{}\",\\ \t\n") {
				s = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
			}
			b.WriteString(s)
		}
	}
	b.WriteByte('}')
	return b.String()
}

func currentDB(t *testing.T, e *env) string {
	var db string
	if err := e.conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	return `"` + db + `"`
}
