package mysql

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/source"
)

func TestParsePartitionOps(t *testing.T) {
	for _, tc := range []struct {
		q     string
		table string
		ops   string
	}{
		{q: "ALTER TABLE t DROP PARTITION p0, p1", table: "shop.t", ops: "[DROP PARTITION]"},
		{q: "ALTER TABLE `db`.`T` TRUNCATE PARTITION ALL", table: "db.t", ops: "[TRUNCATE PARTITION]"},
		{q: "ALTER TABLE t EXCHANGE PARTITION p1 WITH TABLE `u` WITHOUT VALIDATION", table: "shop.t", ops: "[EXCHANGE PARTITION shop.u]"},
		{q: "ALTER TABLE t CONVERT PARTITION p1 TO TABLE x.u", table: "shop.t", ops: "[CONVERT PARTITION x.u]"},
		{q: "ALTER TABLE t CONVERT TABLE u TO PARTITION p3 VALUES LESS THAN (400)", table: "shop.t", ops: "[CONVERT TABLE shop.u]"},
		{q: "ALTER TABLE t ADD PARTITION (PARTITION p9 VALUES LESS THAN (900))", table: "shop.t", ops: "[]"},
		{q: "ALTER TABLE t REORGANIZE PARTITION p0 INTO (PARTITION a VALUES LESS THAN (5), PARTITION b VALUES LESS THAN (10))", table: "shop.t", ops: "[]"},
		{q: "ALTER TABLE t ADD COLUMN note VARCHAR(40) DEFAULT 'DROP PARTITION p0'", table: "shop.t", ops: "[]"},
		{q: "ALTER TABLE t DROP COLUMN c", table: "shop.t", ops: "[]"},
		{q: "ALTER TABLE t IMPORT TABLESPACE", table: "shop.t", ops: "[IMPORT TABLESPACE]"},
		{q: "ALTER TABLE t IMPORT PARTITION p0, p1 TABLESPACE", table: "shop.t", ops: "[IMPORT TABLESPACE]"},
		{q: "ALTER TABLE t DISCARD TABLESPACE", table: "shop.t", ops: "[]"},
	} {
		table, ops, ok := parsePartitionOps(tc.q, "shop")
		var got []string
		for _, op := range ops {
			s := op.kind
			if op.other != [2]string{} {
				s += " " + op.other[0] + "." + op.other[1]
			}
			got = append(got, s)
		}
		if !ok || table[0]+"."+table[1] != tc.table || fmt.Sprint(got) != tc.ops {
			t.Errorf("%s: got %v %v %v, want %s %s", tc.q, ok, table, got, tc.table, tc.ops)
		}
	}
	if _, _, ok := parsePartitionOps("DROP TABLE t", "shop"); ok {
		t.Error("DROP TABLE read as an ALTER TABLE")
	}
}

// TestPartitionDDL: partition DDL moves rows without row events. A
// partition truncated or dropped stops its table naming the statement and
// both fixes; a partition exchanged stops its table and reads the other
// (captured) table again, replacing its mirror; a table converted into a
// partition (MariaDB) is read into the partitioned table's mirror, and its
// own mirror is emptied.
func TestPartitionDDL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE pt (id INT PRIMARY KEY, v VARCHAR(20)) PARTITION BY RANGE (id) "+
		"(PARTITION p0 VALUES LESS THAN (100), PARTITION p1 VALUES LESS THAN (200), PARTITION p2 VALUES LESS THAN (300))",
		"CREATE TABLE u (id INT PRIMARY KEY, v VARCHAR(20))", "CREATE TABLE w (id INT PRIMARY KEY, v VARCHAR(20))",
		"INSERT INTO pt SELECT seq, 'pt' FROM seq_1_to_250", "INSERT INTO u VALUES (150, 'u'), (160, 'u')",
		"INSERT INTO w VALUES (300, 'w'), (310, 'w')")
	wt := e.grantWatermarks(t)
	d := newDedupe(1)
	pt, u, w := e.name+".pt", e.name+".u", e.name+".w"
	r, _ := e.reader(t, newMemState(), d, "pt", func(c *Config) {
		c.Tables, c.WatermarkTable, c.Load = []string{pt, u, w}, wt, true
	})
	d.waitFor(t, "the load", func([]source.Change) bool { return loaded(r, pt) && loaded(r, u) && loaded(r, w) })

	faults := func(cs []source.Change, table string) []string {
		var out []string
		for _, c := range cs {
			if c.Fault != nil && c.After == nil && c.Before == nil && c.Table.QualifiedName() == table {
				out = append(out, c.Fault.Reason+" | "+c.Fault.Fix)
			}
		}
		return out
	}
	rows := func(cs []source.Change, table string) map[string]string {
		return fold(slices.DeleteFunc(slices.Clone(cs), func(c source.Change) bool { return c.Fault != nil }), table)
	}

	e.exec(t, "ALTER TABLE pt TRUNCATE PARTITION p0")
	got := d.waitFor(t, "a fault after TRUNCATE PARTITION", func(cs []source.Change) bool { return len(faults(cs, pt)) > 0 })
	f := faults(got, pt)[0]
	for _, want := range []string{"TRUNCATE PARTITION moved rows out of " + pt, "--replace " + pt, "cdcd table skip -c FILE " + pt} {
		if !strings.Contains(f, want) {
			t.Errorf("fault %q lacks %q", f, want)
		}
	}

	resetsBefore := countResets(got, u)
	e.exec(t, "ALTER TABLE pt EXCHANGE PARTITION p1 WITH TABLE u")
	got = d.waitFor(t, "u read again after the exchange", func(cs []source.Change) bool {
		m := rows(cs, u)
		return len(m) == 100 && m["[100]"] == "[100 pt]" && !r.inc.Queued(u)
	})
	if f := faults(got, pt); len(f) != 2 || !strings.Contains(f[1], "EXCHANGE PARTITION") || !strings.Contains(f[1], "lacks the rows that came in") {
		t.Errorf("pt's faults after the exchange: %q", f)
	}
	if n := countResets(got, u); n != resetsBefore+1 {
		t.Errorf("u: %d reset markers, want %d (one more: a replacing snapshot)", n, resetsBefore+1)
	}

	e.exec(t, "ALTER TABLE pt CONVERT TABLE w TO PARTITION p3 VALUES LESS THAN (400)", "INSERT INTO pt VALUES (390, 'after')")
	converted := func(cs []source.Change) bool {
		m := rows(cs, pt)
		return m["[300]"] == "[300 w]" && m["[310]"] == "[310 w]" && m["[390]"] == "[390 after]" && !r.inc.Queued(pt)
	}
	for deadline := time.Now().Add(90 * time.Second); !converted(d.snapshot()); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			m := rows(d.snapshot(), pt)
			t.Fatalf("w's rows never reached pt: 300 %q, 310 %q, 390 %q; pt queued %t; snapshots %+v",
				m["[300]"], m["[310]"], m["[390]"], r.inc.Queued(pt), r.inc.Progress())
		}
	}
	got = d.snapshot()
	if m := rows(got, w); len(m) != 0 {
		t.Errorf("w after it became a partition: %v, want its mirror emptied", m)
	}
	if f := faults(got, pt); len(f) != 2 {
		t.Errorf("pt's faults after CONVERT TABLE: %q, want none more", f)
	}
}
