package reconcile

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/jackc/pgx/v5"
	"github.com/parquet-go/parquet-go"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	icebergsink "github.com/cdcd-dev/cdcd/sink/iceberg"
)

func connectDB(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return conn
}

// serverHashes runs sql (one bigint a row, in order) and returns the rows.
func serverHashes(t *testing.T, conn *pgx.Conn, sql string, args ...any) []uint64 {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	var out []uint64
	for rows.Next() {
		var h int64
		if err := rows.Scan(&h); err != nil {
			t.Fatal(err)
		}
		out = append(out, uint64(h))
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// TestColumnHashMatchesServer: each column hash's SQL (pgColHash) and
// cdcd's computation of it (colHasher) agree on every edge of their
// types, at several column positions (seeds); and the row's mix
// (hashint4extended(0, x)) is rowHash.
func TestColumnHashMatchesServer(t *testing.T) {
	conn := connectDB(t)
	ints := []int64{0, 1, -1, 2, 255, 256, math.MaxInt32, math.MinInt32, math.MaxInt32 + 1, math.MinInt32 - 1,
		1 << 32, 1<<32 + 1, -1 << 32, 8589934590, math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, 123456789012345}
	pgNaN := math.Float64frombits(0x7ff8000000000000) // 'NaN'::float8's bits (Go's math.NaN() has others)
	floats := []float64{0, math.Copysign(0, -1), pgNaN, math.Inf(1), math.Inf(-1), 1e300, -1e-300, 5e-324,
		math.MaxFloat64, 0.1, 1.0 / 3, -2.5, 1}
	cases := []struct {
		name, typ string
		col       Column
		vals      []any // Go values as the mirror gives them; the SQL reads their text
	}{
		{"int4", "int4", Column{Canon: cInt, Hash: hInt4}, nil},
		{"int2", "int2", Column{Canon: cInt, Hash: hInt4}, []any{int64(0), int64(-1), int64(math.MaxInt16), int64(math.MinInt16)}},
		{"int8", "int8", Column{Canon: cInt, Hash: hInt8}, nil},
		{"bool", "bool", Column{Canon: cBool, Hash: hBool}, []any{true, false}},
		{"float8", "float8", Column{Canon: cFloat64, Hash: hFloat8, SQL: "encode(float8send((v)::float8),'hex')"}, nil},
		{"text", "text", Column{Canon: cText, Hash: hString, Text: "(v)::text"}, []any{"", "N", "a,b", "héllo", "0123456789abcdef0123456789"}},
		{"numeric", "numeric(10,2)", Column{Canon: cDecimal, Scale: 2, Hash: hText, SQL: "(v)::numeric::text"}, []any{"0.00", "-1.50", "12345678.90"}},
	}
	for _, v := range ints {
		if v >= math.MinInt32 && v <= math.MaxInt32 {
			cases[0].vals = append(cases[0].vals, v)
		}
		cases[2].vals = append(cases[2].vals, v)
	}
	for _, f := range floats {
		cases[4].vals = append(cases[4].vals, f)
	}
	for _, tc := range cases {
		texts := make([]*string, len(tc.vals), len(tc.vals)+1)
		for i, v := range tc.vals {
			s := fmt.Sprint(v)
			if f, ok := v.(float64); ok { // "-0", "NaN", "Infinity" as float8in reads them
				s = strconv.FormatFloat(f, 'g', -1, 64)
				if math.IsInf(f, 0) {
					s = map[bool]string{true: "Infinity", false: "-Infinity"}[f > 0]
				}
			}
			texts[i] = &s
		}
		texts = append(texts, nil) // NULL
		for _, pos := range []int{0, 1, 7} {
			c := tc.col
			c.Name, c.Expr = "v", "v"
			sql := fmt.Sprintf("SELECT coalesce(%s, %d) FROM unnest($1::text[]) WITH ORDINALITY u(s, o), LATERAL (SELECT s::%s AS v) x ORDER BY o",
				pgColHash(&c, pos), colNull(pos), tc.typ)
			got := serverHashes(t, conn, sql, texts)
			h := newColHasher(&c, pos) // one for all values: its kept states must follow them
			for i, v := range append(tc.vals, nil) {
				want, err := h.value(v)
				if err != nil {
					t.Fatal(err)
				}
				if got[i] != want {
					t.Errorf("%s %v at position %d: the server %x, cdcd %x", tc.name, v, pos, got[i], want)
				}
			}
		}
	}
	var xs []int64
	for _, v := range ints {
		xs = append(xs, v, int64(colSeed(int(v&7))))
	}
	got := serverHashes(t, conn, "SELECT hashint4extended(0, x) FROM unnest($1::int8[]) WITH ORDINALITY u(x, o) ORDER BY o", xs)
	for i, x := range xs {
		if got[i] != rowHash(uint64(x)) {
			t.Errorf("mix of %d: the server %x, cdcd %x", x, got[i], rowHash(uint64(x)))
		}
	}
}

// TestRowHashDistinguishes: rows a weaker mix of column hashes would take
// for equal hash differently on the server, and as cdcd computes them: a
// value or a NULL moved to another column of the same type, bigints that
// hashint8extended alone folds together, -0 and 0, the empty text, "N"
// and NULL; and a block whose rows swapped a value sums differently (row
// hashes that added their columns' would not see it).
func TestRowHashDistinguishes(t *testing.T) {
	conn := connectDB(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `CREATE TABLE r (id int PRIMARY KEY, a bigint, b bigint, s text, u text, f float8);
		INSERT INTO r VALUES
		 (1, 1, 2, 'x', 'y', 0), (2, 2, 1, 'x', 'y', 0),
		 (3, NULL, 5, 'x', 'y', 0), (4, 5, NULL, 'x', 'y', 0),
		 (5, 0, 0, 'x', 'y', 0), (6, 4294967297, 0, 'x', 'y', 0),
		 (7, -1, 0, 'x', 'y', 0), (8, 8589934590, 0, 'x', 'y', 0),
		 (9, 0, 0, 'x', 'y', '-0'),
		 (10, 0, 0, '', 'y', 0), (11, 0, 0, NULL, 'y', 0), (12, 0, 0, 'y', 'x', 0), (13, 0, 0, 'N', 'y', 0)`); err != nil {
		t.Fatal(err)
	}
	p, err := OpenPostgres(ctx, PostgresConfig{DSN: conn.Config().ConnString()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tb, err := p.Describe(ctx, "public.r", []MirrorColumn{{"id", iceberg.PrimitiveTypes.Int32}, {"a", iceberg.PrimitiveTypes.Int64},
		{"b", iceberg.PrimitiveTypes.Int64}, {"s", iceberg.PrimitiveTypes.String}, {"u", iceberg.PrimitiveTypes.String},
		{"f", iceberg.PrimitiveTypes.Float64}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !tb.ColumnHash {
		t.Fatal("a PostgreSQL table is not hashed by column")
	}
	// Every row hashed with the same key, 0: only the values tell them
	// apart.
	sql := "SELECT " + pgRowHash(tb) + " FROM (SELECT r.id AS o, 0 AS id, a, b, s, u, f FROM r) r ORDER BY o"
	got := serverHashes(t, conn, sql)
	vals := [][]any{
		{int64(1), int64(2), "x", "y", 0.0}, {int64(2), int64(1), "x", "y", 0.0},
		{nil, int64(5), "x", "y", 0.0}, {int64(5), nil, "x", "y", 0.0},
		{int64(0), int64(0), "x", "y", 0.0}, {int64(4294967297), int64(0), "x", "y", 0.0},
		{int64(-1), int64(0), "x", "y", 0.0}, {int64(8589934590), int64(0), "x", "y", 0.0},
		{int64(0), int64(0), "x", "y", math.Copysign(0, -1)},
		{int64(0), int64(0), "", "y", 0.0}, {int64(0), int64(0), nil, "y", 0.0}, {int64(0), int64(0), "y", "x", 0.0},
		{int64(0), int64(0), "N", "y", 0.0},
	}
	if len(got) != len(vals) {
		t.Fatalf("%d rows, want %d", len(got), len(vals))
	}
	seen := map[uint64]int{}
	for i, v := range vals {
		mr := newMirrorRow(tb)
		if err := mr.set(append([]any{int64(0)}, v...)); err != nil {
			t.Fatal(err)
		}
		if mr.hash != got[i] {
			t.Errorf("row %d %v: cdcd %x, the server %x", i+1, v, mr.hash, got[i])
		}
		if j, ok := seen[got[i]]; ok {
			t.Errorf("rows %d %v and %d %v hash alike", j+1, vals[j], i+1, v)
		}
		seen[got[i]] = i
	}
	// Two rows swap s: each row changes, and so does their sum.
	sum := func(q string) uint64 {
		var s uint64
		for _, h := range serverHashes(t, conn, "SELECT "+pgRowHash(tb)+" FROM ("+q+") r") {
			s += h
		}
		return s
	}
	a := sum("SELECT 1 AS id, 0::bigint AS a, 0::bigint AS b, 'x' AS s, 'u' AS u, 0::float8 AS f UNION ALL SELECT 2, 0, 0, 'y', 'u', 0")
	b := sum("SELECT 1 AS id, 0::bigint AS a, 0::bigint AS b, 'y' AS s, 'u' AS u, 0::float8 AS f UNION ALL SELECT 2, 0, 0, 'x', 'u', 0")
	if a == b {
		t.Errorf("a block whose rows swapped a value sums alike: %x", a)
	}
}

// TestRawHashMatchesBoxed: a column's hash computed from the value as a
// data file stores it (colHasher.raw, one hasher for all values) equals
// the hash of the value Scan converts it to (colHasher.value, a fresh
// one), for every hash kind and its edges, and a value an int4 column
// cannot hold does not hash as one it can.
func TestRawHashMatchesBoxed(t *testing.T) {
	cases := []struct {
		typ  iceberg.Type
		hash []colHash
		vals []parquet.Value
	}{
		{iceberg.PrimitiveTypes.Int32, []colHash{hInt4, hInt8, hText}, []parquet.Value{parquet.Int32Value(-5), parquet.Int32Value(math.MaxInt32), parquet.NullValue()}},
		{iceberg.PrimitiveTypes.Int64, []colHash{hInt4, hInt8, hText}, []parquet.Value{parquet.Int64Value(math.MinInt64), parquet.Int64Value(0), parquet.Int64Value(1 << 32)}},
		{iceberg.PrimitiveTypes.Bool, []colHash{hBool, hText}, []parquet.Value{parquet.BooleanValue(true), parquet.BooleanValue(false)}},
		{iceberg.PrimitiveTypes.Float64, []colHash{hFloat8, hText}, []parquet.Value{parquet.DoubleValue(math.Copysign(0, -1)), parquet.DoubleValue(0),
			parquet.DoubleValue(math.NaN()), parquet.DoubleValue(math.Float64frombits(0xfff8000000000000)), parquet.DoubleValue(1e300)}},
		{iceberg.PrimitiveTypes.String, []colHash{hString, hText}, []parquet.Value{parquet.ByteArrayValue([]byte("héllo, N")), parquet.ByteArrayValue(nil), parquet.NullValue()}},
		{iceberg.DecimalTypeOf(18, 3), []colHash{hText}, []parquet.Value{parquet.Int64Value(-1), parquet.Int64Value(1000)}},
		{iceberg.PrimitiveTypes.TimestampTz, []colHash{hText}, []parquet.Value{parquet.Int64Value(-1), parquet.Int64Value(1700000000123456)}},
	}
	for _, tc := range cases {
		kind, scale, _, err := canonFor(tc.typ)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range tc.hash {
			c := &Column{Name: "c", Canon: kind, Scale: scale, Hash: h}
			seen := map[uint64]parquet.Value{}
			kept := newColHasher(c, 3)
			for _, v := range tc.vals {
				want, err := newColHasher(c, 3).value(icebergsink.Value(tc.typ, v))
				if err != nil {
					t.Fatalf("%s %v: %v", tc.typ, v, err)
				}
				got, err := kept.raw(tc.typ, v)
				if err != nil || got != want {
					t.Errorf("%s (hash %d) %v: raw %x (%v), boxed %x", tc.typ, h, v, got, err, want)
				}
				if o, ok := seen[got]; ok {
					t.Errorf("%s (hash %d): %v and %v hash alike", tc.typ, h, o, v)
				}
				seen[got] = v
			}
		}
	}
	// 2^32 in an int4 column is not 0, nor is 2^32 + 5 five.
	h := newColHasher(&Column{Name: "c", Canon: cInt, Hash: hInt4}, 0)
	for _, v := range []int64{1 << 32, 1<<32 + 5} {
		if h.int(v) == h.int(int64(int32(v))) {
			t.Errorf("%d hashes as %d in an int4 column", v, int32(v))
		}
	}
}
