package faultsuite

import (
	"fmt"
	"testing"
	"time"
)

// TestColumnDroppedAndAddedAgain (issue 22): a column dropped and added
// again under the same name is a new column at the source: the rows there
// hold the new column's default, not the old values, with no change sent
// for them. The mirror must read the same: with both statements between
// two changes (one Relation message, the same names: only the attnum
// tells), with the daemon stopped across them, with a change streamed
// between them (the column seen dropped, then back), on both formats.
func TestColumnDroppedAndAddedAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode   string
		format int
	}{{"together", 3}, {"stopped", 3}, {"change-between", 3}, {"together", 2}} {
		t.Run(fmt.Sprintf("%s/v%d", tc.mode, tc.format), func(t *testing.T) {
			t.Parallel()
			p := newPipeline(t, pipelineOptions{
				DDL: `CREATE TABLE t (id int PRIMARY KEY, v text, c text);
					INSERT INTO t SELECT g, 'v' || g, 'old' || g FROM generate_series(1, 300) g;`,
				Tables:        []string{"public.t"},
				FormatVersion: tc.format,
			})
			p.start()
			p.waitCaughtUp()
			p.exec(`UPDATE t SET v = 'streamed' WHERE id <= 5`)
			p.waitCaughtUp()
			if tc.mode == "stopped" {
				p.stop()
			}
			p.exec(`ALTER TABLE t DROP COLUMN c`)
			if tc.mode == "change-between" {
				p.exec(`UPDATE t SET v = 'without c' WHERE id = 9`)
				p.waitCaughtUp()
			}
			p.exec(`ALTER TABLE t ADD COLUMN c text DEFAULT 'new'`)
			if tc.mode == "stopped" {
				p.start()
			}
			p.exec(`INSERT INTO t VALUES (301, 'after', 'given')`)
			p.exec(`UPDATE t SET v = 'touched' WHERE id BETWEEN 6 AND 8`)
			p.waitCaughtUp()
			p.waitMirror("public.t", 3*time.Minute) // the re-read runs on after the catch-up
			if !p.logContains(`origin=recreated-column`) {
				t.Error("the table's rows were not read again for the recreated column")
			}
		})
	}
}

// TestColumnRenamed (issue 22): ALTER TABLE … RENAME COLUMN keeps the
// values under the new name at the source, with no change sent for the
// rows; the mirror must read them under the new name too (it read NULL in
// every row untouched since).
func TestColumnRenamed(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE t (id int PRIMARY KEY, v text, x text);
			INSERT INTO t SELECT g, 'v' || g, 'x' || g FROM generate_series(1, 300) g;`,
		Tables: []string{"public.t"},
	})
	p.start()
	p.waitCaughtUp()
	p.exec(`ALTER TABLE t RENAME COLUMN x TO c`)
	p.exec(`INSERT INTO t VALUES (301, 'after', 'given')`)
	p.waitCaughtUp()
	p.waitMirror("public.t", 3*time.Minute)
	if !p.logContains(`origin=renamed-column`) {
		t.Error("the table's rows were not read again for the renamed column")
	}
}
