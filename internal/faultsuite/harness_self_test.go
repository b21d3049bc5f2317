package faultsuite

import (
	"slices"
	"testing"
)

// TestHarness checks the harness itself: a pipeline mirrors two tables
// (many column types, a composite key), the comparison sees exactly the
// changes made while the daemon is stopped, and they arrive once it runs
// again.
func TestHarness(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE kinds (id bigint PRIMARY KEY, i int, s text, n numeric(10,2), ts timestamptz, d date,
				b bytea, ok boolean, f double precision, u uuid, j jsonb, ia int[], ta text[], iv interval, tm time);
			CREATE TABLE pairs (a int, b text, v text, PRIMARY KEY (a, b));
			INSERT INTO kinds SELECT g, g, 'row ' || g, g * 1.25, '2024-01-01 00:00:00+00'::timestamptz + g * interval '1 hour',
				'2024-01-01'::date + g, decode(lpad(to_hex(g), 8, '0'), 'hex'), g % 2 = 0, g / 3.0,
				md5(g::text)::uuid, jsonb_build_object('g', g), ARRAY[g, NULL, g + 1], ARRAY['x', g::text],
				make_interval(days => g, secs => g), '12:00'::time + g * interval '1 second'
				FROM generate_series(1, 200) g;
			INSERT INTO kinds (id) VALUES (0);
			INSERT INTO pairs SELECT g, 'k' || g, 'v' FROM generate_series(1, 50) g;`,
		Tables: []string{"public.kinds", "public.pairs"},
	})
	p.start()
	p.waitCaughtUp()
	p.exec(`UPDATE kinds SET s = 'changed', ia = ARRAY[]::int[] WHERE id % 10 = 0`)
	p.exec(`DELETE FROM pairs WHERE a > 40`)
	p.waitCaughtUp()
	p.requireMirror()

	p.stop()
	p.exec(`DELETE FROM kinds WHERE id = 1`)
	p.exec(`INSERT INTO kinds (id, s) VALUES (1000, 'new')`)
	p.exec(`UPDATE kinds SET n = 9.99 WHERE id = 2`)
	p.exec(`UPDATE pairs SET v = 'w' WHERE a = 3`)
	d := p.diff("public.kinds")
	if !slices.Equal(d.Extra, []string{"1"}) || !slices.Equal(d.Missing, []string{"1000"}) || len(d.Differ) != 1 {
		t.Errorf("with the daemon stopped, want key 1 extra, 1000 missing and one value differing; got %s", d)
	}
	if d := p.diff("public.pairs"); len(d.Differ) != 1 || d.Equal() {
		t.Errorf("pairs: want one value differing (key 3|k3); got %s", d)
	}
	p.start()
	p.waitCaughtUp()
	p.requireMirror()
}
