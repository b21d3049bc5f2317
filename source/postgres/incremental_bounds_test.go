package postgres

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// TestSampledBounds: the ends a page sample gives a composite key whose
// text column sorts by an ICU collation are in the key's order as the
// server sorts it (each range (previous, end] holds rows, in order), after
// the chunk's After and at most its Upper, about Limit rows apart; the
// last read of a range says so; an empty range and a table of few rows
// give none; a partitioned table is sampled too.
func TestSampledBounds(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE sb (region text COLLATE "und-x-icu", id int, v text, PRIMARY KEY (region, id));
		INSERT INTO sb SELECT r, g, 'v' || g FROM generate_series(1, 40000) g, unnest(ARRAY['a', 'B', 'é', 'Z', 'ä']) r;
		ANALYZE sb;
		CREATE TABLE few (id int PRIMARY KEY); INSERT INTO few SELECT generate_series(1, 10); ANALYZE few;
		CREATE TABLE pt (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
		CREATE TABLE pt1 PARTITION OF pt FOR VALUES FROM (0) TO (5000); CREATE TABLE pt2 PARTITION OF pt FOR VALUES FROM (5000) TO (20000);
		INSERT INTO pt SELECT g, 'v' FROM generate_series(1, 19999) g; ANALYZE pt`)
	d, conn := testDatabase(t, e, New(e.config(t, []string{"sb", "few", "pt"}, false), e.state, slog.New(slog.DiscardHandler)))
	ct, err := describeByName(t.Context(), conn, "public.sb")
	if err != nil {
		t.Fatal(err)
	}
	const limit = 8000
	if pct, every, err := d.sampleRate(t.Context(), ct, limit, 1<<16); err != nil || pct <= 0 || pct > sampleMaxPercent || every < sampleMin {
		t.Fatalf("sample rate %g%%, every %d (%v); want a sample of the 200,000 rows", pct, every, err)
	}
	upper := snapshot.Key{"é", "35000"} // "é" sorts between "a" and "B" here: not the byte order
	count := func(after, to snapshot.Key) int {
		t.Helper()
		q := snapshot.ChunkQuery{After: after, Upper: upper, To: to}
		where, err := chunkWhere(ct, q)
		if err != nil {
			t.Fatal(err)
		}
		sql := "SELECT count(*) FROM sb AS " + tableAlias + " WHERE " + where[0]
		for _, w := range where[1:] {
			sql += " AND " + w
		}
		var n int
		if err := conn.QueryRow(t.Context(), sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	after := snapshot.Key{"a", "500"}
	total := count(after, nil)
	ends, last, err := d.Bounds(t.Context(), "public.sb", nil, snapshot.ChunkQuery{After: after, Upper: upper, Limit: limit}, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	if !last {
		t.Error("a read of every end of the range says more are left")
	}
	if want := total / limit; len(ends) < want/2 || len(ends) > want*2 {
		t.Errorf("%d ends for %d rows in chunks of %d, want about %d", len(ends), total, limit, want)
	}
	prev, sum := after, 0
	for i, k := range ends {
		n := count(prev, k)
		if n <= 0 {
			t.Fatalf("end %d %v holds no rows after %v: not in the key's order", i, k, prev)
		}
		if n > 4*limit {
			t.Errorf("end %d %v is %d rows after %v, chunks of %d", i, k, n, prev, limit)
		}
		sum += n
		prev = k
	}
	if sum += count(prev, nil); sum != total {
		t.Errorf("the ranges hold %d rows, the range %d", sum, total)
	}
	t.Logf("%d ends over %d rows", len(ends), total)

	if ends, last, err := d.Bounds(t.Context(), "public.sb", nil, snapshot.ChunkQuery{After: upper, Upper: upper, Limit: limit}, 1<<16); err != nil || len(ends) != 0 || !last {
		t.Errorf("an empty range: ends %v, last %v, %v; want none, last", ends, last, err)
	}
	if ends, last, err := d.Bounds(t.Context(), "public.sb", nil, snapshot.ChunkQuery{After: after, Upper: upper, Limit: limit}, 2); err != nil || len(ends) != 2 || last {
		t.Errorf("two ends asked: %v, last %v, %v; want two, not last", ends, last, err)
	}
	// A partitioned table is sampled through its partitions.
	d.r.cfg.Incremental.SamplePercent = 20
	pt, err := describeByName(t.Context(), conn, "public.pt")
	if err != nil {
		t.Fatal(err)
	}
	q := snapshot.ChunkQuery{Upper: snapshot.Key{"19999"}, Limit: 1000}
	if pct, _, err := d.sampleRate(t.Context(), pt, q.Limit, 1<<16); err != nil || pct != 20 {
		t.Fatalf("sample rate %g%% (%v), want the configured 20%%", pct, err)
	}
	if ends, last, err := d.Bounds(t.Context(), "public.pt", nil, q, 1<<16); err != nil || len(ends) < 5 || !last {
		t.Errorf("a partitioned table of 19,999 rows in chunks of 1,000: %d ends, last %v, %v", len(ends), last, err)
	}
	d.r.cfg.Incremental.SamplePercent = 0
	if ends, last, err := d.Bounds(t.Context(), "public.few", nil, snapshot.ChunkQuery{Upper: snapshot.Key{"10"}, Limit: limit}, 1<<16); err != nil || len(ends) != 0 || !last {
		t.Errorf("a table of 10 rows: ends %v, last %v, %v; want none, last", ends, last, err)
	}
}

// TestNativeKeyLast: a chunk of an integer or uuid key reads no key text,
// and its Last, written from the last row's values, is the server's text of
// that key (negative integers of each width, uuids), so it equals the ends
// and bounds the server wrote; a composite key with a text column still
// reads the server's text.
func TestNativeKeyLast(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE k2 (id int2 PRIMARY KEY, v text); INSERT INTO k2 SELECT g, 'v' FROM generate_series(-300, 300) g;
		CREATE TABLE k8 (a int8, b int4, v text, PRIMARY KEY (a, b)); INSERT INTO k8 SELECT -g * 10000000000, -g, 'v' FROM generate_series(1, 500) g;
		CREATE TABLE ku (id uuid PRIMARY KEY); INSERT INTO ku SELECT md5(g::text)::uuid FROM generate_series(1, 500) g;
		CREATE TABLE kt (id int, name text, PRIMARY KEY (id, name)); INSERT INTO kt SELECT g, 'n' || g FROM generate_series(1, 500) g`)
	d, conn := testDatabase(t, e, New(e.config(t, []string{"k2", "k8", "ku", "kt"}, false), e.state, slog.New(slog.DiscardHandler)))
	for _, c := range []struct {
		table  string
		native bool
	}{{"k2", true}, {"k8", true}, {"ku", true}, {"kt", false}} {
		plan, err := d.Plan(t.Context(), "public."+c.table, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		var after snapshot.Key
		for chunks := 0; ; chunks++ {
			res, err := d.ReadChunk(t.Context(), "public."+c.table, nil, snapshot.ChunkQuery{After: after, Upper: plan.Upper, Limit: 77})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Rows) == 0 {
				if chunks < 5 {
					t.Fatalf("%s: read in %d chunks", c.table, chunks)
				}
				break
			}
			ct, err := describeByName(t.Context(), conn, "public."+c.table)
			if err != nil {
				t.Fatal(err)
			}
			rel, err := catalogRelation(t.Context(), d.types, ct)
			if err != nil {
				t.Fatal(err)
			}
			if nativeKey(rel) != c.native {
				t.Fatalf("%s: native key %v, want %v", c.table, !c.native, c.native)
			}
			// The server's text of the chunk's greatest key.
			keys := keyColumns(ct)
			sel := make([]string, len(keys))
			for i, k := range keys {
				sel[i] = "(" + k + ")::text"
			}
			where, err := chunkWhere(ct, snapshot.ChunkQuery{After: after, Upper: res.Last})
			if err != nil {
				t.Fatal(err)
			}
			want := make(snapshot.Key, len(keys))
			ptrs := make([]any, len(keys))
			for i := range want {
				ptrs[i] = &want[i]
			}
			sql := "SELECT " + strings.Join(sel, ", ") + " FROM " + ct.ident() + " AS " + tableAlias + " WHERE " + strings.Join(where, " AND ") +
				" ORDER BY " + strings.Join(keys, " DESC, ") + " DESC LIMIT 1"
			var n int
			if err := conn.QueryRow(t.Context(), sql).Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM "+ct.ident()+" AS "+tableAlias+" WHERE "+strings.Join(where, " AND ")).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Last, want) || n != len(res.Rows) {
				t.Fatalf("%s: a chunk of %d rows ends at %q; the server has %d rows up to it, the greatest %q", c.table, len(res.Rows), res.Last, n, want)
			}
			after = res.Last
		}
	}
}

// testDatabase is r's incremental-snapshot database on a connection of
// its own, closed when the test ends.
func testDatabase(t *testing.T, e *env, r *Reader) (*pgDatabase, *pgx.Conn) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	d := &pgDatabase{r: r, conn: conn, types: newTypeResolver(conn), ring: newXidRing()}
	t.Cleanup(func() { d.close(); conn.Close(context.Background()) })
	return d, conn
}
