package mysql

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/cdcd-dev/cdcd/source"
)

// TestColumnsAcrossRestart: the reader's column record carries what a
// table's shape changed while no session read the binlog. A column added
// with a default while the reader was stopped gets the table's rows read
// again (this reader keeps no default, as on format 2); a column dropped,
// while stopped or while streaming, is named in every later version's
// Dropped, so a sink writes NULL there rather than an initial-default.
func TestColumnsAcrossRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), gone VARCHAR(10) DEFAULT 'old')",
		"CREATE TABLE u (id INT PRIMARY KEY, v VARCHAR(20), c VARCHAR(10) DEFAULT 'blue')",
		"INSERT INTO t (id, v) VALUES (1, 'a'), (2, 'b'), (3, 'c')")
	wt := e.grantWatermarks(t)
	st := newMemState()
	d := newDedupe(1)
	opts := func(c *Config) { c.Tables, c.WatermarkTable = []string{e.name + ".t", e.name + ".u"}, wt }
	_, stop := e.reader(t, st, d, "t", opts)
	e.exec(t, "INSERT INTO u VALUES (1, 'x', 'blue')")
	d.waitFor(t, "u's first row", func(cs []source.Change) bool { return len(cs) >= 1 })
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}

	// While stopped: t gains a column with a default and loses one.
	e.exec(t, "ALTER TABLE t ADD COLUMN c VARCHAR(10) NOT NULL DEFAULT 'red', DROP COLUMN gone")
	r, stop := e.reader(t, st, d, "t", opts)
	defer stop()
	qt, qu := e.name+".t", e.name+".u"
	got := d.waitFor(t, "t read again with c", func(cs []source.Change) bool {
		m := fold(cs, qt)
		return len(m) == 3 && m["[1]"] == "[1 a red]" && m["[3]"] == "[3 c red]" && !r.inc.Queued(qt)
	})
	for _, c := range got {
		if c.Table.QualifiedName() == qt && c.Snapshot && !slices.Equal(c.Table.Dropped, []string{"gone"}) {
			t.Fatalf("a row read again has Dropped %v, want [gone]", c.Table.Dropped)
		}
	}

	// While streaming: u loses its column; both tables' later rows name
	// what they lost.
	e.exec(t, "ALTER TABLE u DROP COLUMN c", "INSERT INTO u VALUES (2, 'y')", "INSERT INTO t VALUES (4, 'd', 'red')")
	got = d.waitFor(t, "the rows after the drops", func(cs []source.Change) bool {
		return len(fold(cs, qu)) == 2 && len(fold(cs, qt)) == 4
	})
	for _, c := range got {
		key := fmt.Sprint(c.After)
		switch {
		case c.Table.QualifiedName() == qu && key == "[2 y]":
			if !slices.Equal(c.Table.Dropped, []string{"c"}) {
				t.Errorf("u's row after DROP COLUMN c: Dropped %v, want [c]", c.Table.Dropped)
			}
		case c.Table.QualifiedName() == qu && key == "[1 x blue]":
			if len(c.Table.Dropped) != 0 {
				t.Errorf("u's row from before the drop: Dropped %v, want none", c.Table.Dropped)
			}
		case c.Table.QualifiedName() == qt && key == "[4 d red]":
			if !slices.Equal(c.Table.Dropped, []string{"gone"}) {
				t.Errorf("t's row after a restart: Dropped %v, want [gone]", c.Table.Dropped)
			}
		}
	}
}
