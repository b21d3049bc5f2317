package reconcile

import (
	"context"
	"fmt"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

// TestSumsBlocks: Sums cuts a chunk into blocks of blockRows rows in key
// order, each with its count, the sum of its rows' hashes (as cdcd
// computes them from the values) and its last key in both forms;
// a chunk cut short is the table's end, its last block open; a chunk
// whose size is not a multiple of the block's ends in a short block with
// its key. A composite key, text first, under byte order.
func TestSumsBlocks(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDB(t)
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `CREATE TABLE k2 (a text, b int, v numeric(6,2), PRIMARY KEY (a, b));
		INSERT INTO k2 SELECT 'k' || (g / 4), g % 4, g / 4.0 FROM generate_series(10, 29) g`); err != nil {
		t.Fatal(err)
	}
	p, err := OpenPostgres(ctx, PostgresConfig{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tb, err := p.Describe(ctx, "public.k2", []MirrorColumn{{"a", iceberg.PrimitiveTypes.String}, {"b", iceberg.PrimitiveTypes.Int32},
		{"v", iceberg.DecimalTypeOf(6, 2)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The rows as cdcd renders them, in key order.
	type row struct {
		key, lit Key
		hash     uint64
	}
	var want []row
	for g := 10; g <= 29; g++ {
		a, b := fmt.Sprintf("k%d", g/4), int64(g%4)
		mr := newMirrorRow(tb)
		if err := mr.set([]any{a, b, fmt.Sprintf("%.2f", float64(g)/4)}); err != nil {
			t.Fatal(err)
		}
		want = append(want, row{mr.key(), Key{a, fmt.Sprint(b)}, mr.hash})
	}
	var after Key
	for i, chunk := range []struct{ rows, block, got int }{{7, 3, 7}, {9, 3, 9}, {7, 3, 4}} {
		blocks, _, err := p.Sums(ctx, 0, tb, after, nil, chunk.rows, chunk.block)
		if err != nil {
			t.Fatal(err)
		}
		at := 0
		for j, b := range blocks {
			n := min(chunk.block, chunk.got-at)
			var sum uint64
			for _, r := range want[:n] {
				sum += r.hash
			}
			last, lit := want[n-1].key, want[n-1].lit
			if j == len(blocks)-1 && chunk.got < chunk.rows {
				last, lit = nil, nil // the table's end: open
			}
			if b.Rows != int64(n) || b.Sum != sum || b.Last.id() != last.id() || b.LastLit.id() != lit.id() {
				t.Errorf("chunk %d block %d: %d rows, sum %x, last %q (literal %q); want %d rows, sum %x, last %q",
					i, j, b.Rows, b.Sum, b.Last, b.LastLit, n, sum, last)
			}
			want, at = want[n:], at+n
		}
		if at != chunk.got {
			t.Fatalf("chunk %d: %d blocks of %d rows; want %d rows", i, len(blocks), at, chunk.got)
		}
		after = blocks[len(blocks)-1].LastLit
	}
}

// TestSumsKeyTexts: the texts of the keys that end blocks, rendered from
// the chunk's arrays of key values, are the literals and canonical texts
// cdcd renders for the same keys (a date, a timestamp, a numeric and a
// uuid: canonical texts unlike the literals).
func TestSumsKeyTexts(t *testing.T) {
	ctx := context.Background()
	c := connectDB(t)
	dsn := c.Config().ConnString()
	if _, err := c.Exec(ctx, `CREATE TABLE k4 (d date, ts timestamptz, n numeric(6,2), u uuid, v int, PRIMARY KEY (d, ts, n, u));
		INSERT INTO k4 SELECT '2024-01-01'::date + g / 4, '2000-01-01 UTC'::timestamptz + g * interval '1.5 second', g / 4.0,
			('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid, g FROM generate_series(1, 10) g`); err != nil {
		t.Fatal(err)
	}
	p, err := OpenPostgres(ctx, PostgresConfig{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tb, err := p.Describe(ctx, "public.k4", []MirrorColumn{{"d", iceberg.PrimitiveTypes.Date}, {"ts", iceberg.PrimitiveTypes.TimestampTz},
		{"n", iceberg.DecimalTypeOf(6, 2)}, {"u", iceberg.PrimitiveTypes.UUID}, {"v", iceberg.PrimitiveTypes.Int32}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	blocks, _, err := p.Sums(ctx, 0, tb, nil, nil, 100, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 4 || blocks[3].Last != nil {
		t.Fatalf("%d blocks (%+v); want 4, the last open", len(blocks), blocks)
	}
	// After the third block's end: the last row, in one open block; after
	// that row's key: none, and one open block still.
	last, _, err := p.Sums(ctx, 0, tb, blocks[2].LastLit, nil, 100, 3)
	if err != nil || len(last) != 1 || last[0].Rows != 1 || last[0].Last != nil || last[0].Sum != blocks[3].Sum {
		t.Fatalf("after the third block: %+v, %v; want the fourth", last, err)
	}
	lit := make(Key, 4)
	if err := c.QueryRow(ctx, "SELECT d::text, ts::text, n::text, u::text FROM k4 WHERE v = 10").Scan(&lit[0], &lit[1], &lit[2], &lit[3]); err != nil {
		t.Fatal(err)
	}
	if none, _, err := p.Sums(ctx, 0, tb, lit, nil, 100, 3); err != nil || len(none) != 1 || none[0].Rows != 0 || none[0].Last != nil {
		t.Errorf("after the last key: %+v, %v; want one open block of no rows", none, err)
	}
	for i, b := range blocks[:3] {
		g := int64(3 * (i + 1)) // the block's last row
		var u [16]byte
		copy(u[10:], []byte{0, 0, 0, 0, 0, byte(g)}) // lpad(g, 12) is decimal: g < 10 reads as hex alike
		mr := newMirrorRow(tb)
		if err := mr.set([]any{int32(19723 + g/4), int64(946684800000000 + g*1500000), fmt.Sprintf("%.2f", float64(g)/4), u, g}); err != nil {
			t.Fatal(err)
		}
		if b.Last.id() != mr.key().id() || b.Rows != 3 {
			t.Errorf("block %d: last %q, %d rows; want %q, 3 rows", i, b.Last, b.Rows, mr.key())
		}
		var lit [4]string
		if err := c.QueryRow(ctx, "SELECT d::text, ts::text, n::text, u::text FROM k4 WHERE v = $1", g).Scan(&lit[0], &lit[1], &lit[2], &lit[3]); err != nil {
			t.Fatal(err)
		}
		if b.LastLit.id() != Key(lit[:]).id() {
			t.Errorf("block %d: literal %q, want %q", i, b.LastLit, lit)
		}
	}
}

// TestChunkBlocksOrder: a chunk whose block ends do not ascend is an
// error, not blocks that would leave keys in no range.
func TestChunkBlocksOrder(t *testing.T) {
	tb := &Table{Columns: []*Column{{Name: "id", Canon: cInt}}, Key: []int{0}, Ordered: true}
	hs := []int64{1, 2, 3, 4}
	if _, err := chunkBlocks(tb, hs, [][]string{{"2", "4"}, {"2", "4"}}, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := chunkBlocks(tb, hs, [][]string{{"4", "2"}, {"4", "2"}}, 2); err == nil {
		t.Error("block ends 4, then 2: no error")
	}
	if _, err := chunkBlocks(tb, hs, [][]string{{"2"}, {"2"}}, 2); err == nil {
		t.Error("two blocks, one end: no error")
	}
}

// TestSumsListKey: a table keyed by an array (whose array_agg is an array
// of arrays, with no element to pick) has its block ends' texts too.
func TestSumsListKey(t *testing.T) {
	ctx := context.Background()
	c := connectDB(t)
	if _, err := c.Exec(ctx, `CREATE TABLE ka (k int[] PRIMARY KEY, v int);
		INSERT INTO ka SELECT ARRAY[g, g + 1], g FROM generate_series(1, 5) g`); err != nil {
		t.Fatal(err)
	}
	p, err := OpenPostgres(ctx, PostgresConfig{DSN: c.Config().ConnString()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tb, err := p.Describe(ctx, "public.ka", []MirrorColumn{{"k", &iceberg.ListType{ElementID: 3, Element: iceberg.PrimitiveTypes.Int32}},
		{"v", iceberg.PrimitiveTypes.Int32}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	blocks, _, err := p.Sums(ctx, 0, tb, nil, nil, 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 {
		t.Fatalf("%d blocks (%+v), want 2", len(blocks), blocks)
	}
	for i, b := range blocks {
		g := int64(2 * (i + 1))
		mr := newMirrorRow(tb)
		if err := mr.set([]any{[]any{g, g + 1}, g}); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("{%d,%d}", g, g+1)
		if b.Last.id() != mr.key().id() || b.LastLit.id() != (Key{want}).id() || b.Rows != 2 || b.Sum != sumOf(t, tb, g-1, g) {
			t.Errorf("block %d: last %q (literal %q), %d rows; want %q (%q), 2 rows", i, b.Last, b.LastLit, b.Rows, mr.key(), want)
		}
	}
}

// sumOf is the sum of the row hashes cdcd computes for rows g of ka.
func sumOf(t *testing.T, tb *Table, gs ...int64) uint64 {
	var s uint64
	for _, g := range gs {
		mr := newMirrorRow(tb)
		if err := mr.set([]any{[]any{g, g + 1}, g}); err != nil {
			t.Fatal(err)
		}
		s += mr.hash
	}
	return s
}
