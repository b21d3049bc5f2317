package faultsuite

import (
	"strconv"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/cdcd-dev/cdcd/daemon"
)

// TestModeChangedInConfig: sink.iceberg.mode changed in the config of a
// pipeline whose tables exist. Before, upsert → append crashed the whole
// daemon at the first commit (a panic on the changelog's meta columns the
// mirror lacks, at every start), and append → upsert retried a commit that
// could never land for ever ("no identifier fields"), a warning at most.
// Now the table pauses alone at load, naming both modes and the fixes,
// untouched; with the mode set back it resumes and ends right.
func TestModeChangedInConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ from, to string }{{"upsert", "append"}, {"append", "upsert"}} {
		t.Run(c.from+"-to-"+c.to, func(t *testing.T) {
			t.Parallel()
			p := newPipeline(t, pipelineOptions{
				DDL: `CREATE TABLE a (id int PRIMARY KEY, v text);
					INSERT INTO a SELECT g, 'v' || g FROM generate_series(1, 100) g;
					CREATE TABLE b (id int PRIMARY KEY, v text);`,
				Tables: []string{"public.a"},
				Mode:   c.from,
			})
			p.start()
			p.exec(`UPDATE a SET v = 'u' WHERE id <= 10`)
			p.waitCaughtUp()
			p.stop()
			before, beforeSnap := p.records("public.a"), p.snapshotID("public.a")

			// Table b, new since the change, is created in the new mode
			// and is not held up by a's pause.
			p.reconfigure(func(o *pipelineOptions) { o.Mode = c.to; o.Tables = []string{"public.a", "public.b"} })
			p.start()
			p.exec(`UPDATE a SET v = 'w' WHERE id <= 20`)
			p.exec(`DELETE FROM a WHERE id > 90`)
			p.exec(`INSERT INTO b SELECT g, 'b' FROM generate_series(1, 30) g`)
			ts := p.waitPaused("cdc.a", "created in "+c.from+" mode", "sink.iceberg.mode is "+c.to,
				"set sink.iceberg.mode back to "+c.from, "cdcd snapshot -c FILE --replace cdc.a")
			t.Logf("paused: %s; fix: %s", ts.PausedReason, ts.PausedFix)
			p.waitOthersCaughtUp("cdc.a")
			p.waitFor("table b loaded and caught up", 3*time.Minute, func(st daemon.Status) bool {
				for _, tb := range st.Tables {
					if tb.Table == "cdc.b" {
						return tb.Snapshot.Done && tb.Snapshot.AllCommitted && tb.Lag == 0 && tb.Commits > 0
					}
				}
				return false
			})
			if got := p.snapshotID("public.a"); got != beforeSnap {
				t.Errorf("the paused table was committed to: snapshot %d before the mode change, %d after", beforeSnap, got)
			}
			// A changelog may hold a row twice (its insert and the added
			// table's snapshot read of it); a mirror holds each once.
			if got := p.records("public.b"); got != 30 && (c.to != "append" || got < 30) {
				t.Errorf("table b, new in %s mode, holds %d records, want 30", c.to, got)
			}
			st := p.status()
			if len(st.Alerts) == 0 {
				t.Error("status shows no alert while cdc.a is paused")
			}
			if p.logContains("panic:") {
				t.Error("the daemon panicked")
			}

			p.stop()
			p.reconfigure(func(o *pipelineOptions) { o.Mode = c.from; o.Tables = []string{"public.a"} })
			p.start()
			p.waitResumed("cdc.a")
			p.waitCaughtUp()
			if c.from == "upsert" {
				p.requireMirror("public.a")
			} else if got, want := p.records("public.a"), before+20+10; got != want {
				t.Errorf("the changelog holds %d records after the mode was set back, want %d (%d + 20 updates + 10 deletes)", got, want, before)
			}
		})
	}
}

// records is the row count of sourceTable's Iceberg table by its current
// snapshot's summary (total-records less total-position-deletes): exact
// for tables without deletes (append tables, upsert tables of inserts).
func (p *pipeline) records(sourceTable string) int {
	p.t.Helper()
	cat := p.openCatalog()
	defer closeCatalog(cat)
	snap := p.icebergTable(cat, sourceTable).CurrentSnapshot()
	if snap == nil || snap.Summary == nil {
		return 0
	}
	n, _ := strconv.Atoi(snap.Summary.Properties["total-records"])
	del, _ := strconv.Atoi(snap.Summary.Properties["total-position-deletes"])
	return n - del
}

// snapshotID is the current snapshot of sourceTable's Iceberg table (0:
// none).
func (p *pipeline) snapshotID(sourceTable string) int64 {
	p.t.Helper()
	cat := p.openCatalog()
	defer closeCatalog(cat)
	if snap := p.icebergTable(cat, sourceTable).CurrentSnapshot(); snap != nil {
		return snap.SnapshotID
	}
	return 0
}

// TestIcebergTableDroppedUnderDaemon: the Iceberg table dropped from the
// catalog while cdcd runs is created again and written from the log's
// start, so the mirror ends equal, within a retry interval — before, every
// commit retried "cannot read the table back" for the whole commit budget
// (two minutes) first.
func TestIcebergTableDroppedUnderDaemon(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE a (id int PRIMARY KEY, v text);
			INSERT INTO a SELECT g, 'v' || g FROM generate_series(1, 100) g;`,
		Tables: []string{"public.a"},
		// The default commit budget is two minutes and the retry
		// interval 30 s; cdcd's defaults.
	})
	p.start()
	p.exec(`UPDATE a SET v = 'u' WHERE id <= 10`)
	p.waitCaughtUp()
	cat := p.openCatalog()
	if err := cat.DropTable(p.ctx, table.Identifier{"cdc", "a"}); err != nil {
		t.Fatal(err)
	}
	closeCatalog(cat)
	dropped := time.Now()
	p.exec(`UPDATE a SET v = 'w' WHERE id <= 20`)
	p.exec(`DELETE FROM a WHERE id > 90`)
	p.waitCaughtUp()
	if d := p.diff("public.a"); !d.Equal() {
		t.Errorf("the table created again differs from the source: %s", d)
	}
	took := time.Since(dropped)
	t.Logf("the dropped table was written again within %s", took.Round(time.Second))
	if took > 75*time.Second {
		t.Errorf("the dropped table took %s to come back: it waited out the commit budget", took.Round(time.Second))
	}
	if !p.logContains("the table is gone from the catalog") {
		t.Error("the daemon's log does not say the table was gone from the catalog")
	}
}
