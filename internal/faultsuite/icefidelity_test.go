package faultsuite

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
)

// TestAddedColumnDefault (issue 22): ALTER TABLE … ADD COLUMN … DEFAULT on
// a table with rows gives every existing row the default with no change
// event for it — PostgreSQL's fast default (atthasmissing) for a constant
// or stable default, and a table rewrite that logical decoding does not
// send for a volatile one. The mirror must end equal all the same: on
// format 3 a constant default becomes the column's initial-default (no
// rows read again); otherwise (format 2, a volatile default, a value
// initial-default cannot hold) the table's rows are read again by an
// incremental snapshot. Rows changed before the ALTER in the same
// transaction (written after the Iceberg column exists) hold the default
// too; a row given NULL explicitly keeps NULL; a compaction keeps it all.
func TestAddedColumnDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		format   int
		add      string // the columns added, after the ALTER's ADD COLUMN
		reread   bool   // the rows must be read again
		defaults map[string]any
	}{
		{"constant/v3", 3, `c text DEFAULT 'red', ADD COLUMN k bigint NOT NULL DEFAULT 7`, false, map[string]any{"c": "red", "k": float64(7)}},
		{"constant/v2", 2, `c text DEFAULT 'red', ADD COLUMN k bigint NOT NULL DEFAULT 7`, true, nil},
		{"volatile/v3", 3, `r float8 DEFAULT random(), ADD COLUMN n timestamptz DEFAULT now()`, true, nil},
		{"volatile/v2", 2, `r float8 DEFAULT random(), ADD COLUMN n timestamptz DEFAULT now()`, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline(t, pipelineOptions{
				DDL: `CREATE TABLE t (id int PRIMARY KEY, v text);
					INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 3000) g;`,
				Tables:        []string{"public.t"},
				FormatVersion: tc.format,
			})
			p.start()
			p.waitCaughtUp()
			p.requireMirror()

			// Rows changed before the ALTER, in its transaction, reach the
			// sink in the same commit as rows of the new shape.
			p.exec(`BEGIN;
				UPDATE t SET v = 'before' WHERE id <= 100;
				ALTER TABLE t ADD COLUMN ` + tc.add + `;
				UPDATE t SET v = 'after' WHERE id BETWEEN 101 AND 200;
				INSERT INTO t (id, v) VALUES (3001, 'new');
				COMMIT`)
			if strings.HasPrefix(tc.name, "constant") {
				p.exec(`INSERT INTO t (id, v, c) VALUES (3002, 'null c', NULL)`)
			}
			p.exec(`UPDATE t SET v = 'later' WHERE id BETWEEN 201 AND 210`)
			p.waitCaughtUp()
			p.waitMirror("public.t", 3*time.Minute)
			queued := p.logContains(`msg="snapshot queued"`) && p.logContains(`origin=added-default`)
			if queued != tc.reread {
				t.Errorf("the table's rows were read again: %t, want %t", queued, tc.reread)
			}
			if tc.defaults != nil {
				cat := p.openCatalog()
				tbl := p.icebergTable(cat, "public.t")
				closeCatalog(cat)
				for name, want := range tc.defaults {
					f, ok := tbl.Schema().FindFieldByName(name)
					if !ok || fmt.Sprint(f.InitialDefault) != fmt.Sprint(want) {
						t.Errorf("Iceberg column %s: initial-default %v (%T), want %v", name, f.InitialDefault, f.InitialDefault, want)
					}
				}
			}

			// A compaction rewrites the files written before the column
			// existed: the rows keep the default.
			before := strings.Count(p.logTail(1<<30), "msg=compacted")
			if _, stderr, code := p.cdcd("compact", "-c", p.CfgPath, "cdc.t"); code != 0 {
				t.Fatalf("cdcd compact: exit %d: %s", code, stderr)
			}
			p.waitFor("a compaction", 2*time.Minute, func(daemon.Status) bool {
				return strings.Count(p.logTail(1<<30), "msg=compacted") > before
			})
			p.exec(`UPDATE t SET v = 'after compaction' WHERE id = 1`)
			p.waitCaughtUp()
			p.requireMirror()
		})
	}
}

// waitMirror waits until sourceTable equals its mirror (changes may still
// be arriving: an incremental snapshot reads the rows again), failing with
// the last difference after timeout.
func (p *pipeline) waitMirror(sourceTable string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		d := p.diff(sourceTable)
		if d.Equal() {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the mirror still differs from the source after %s: %s", timeout, d)
		}
		time.Sleep(time.Second)
	}
}
