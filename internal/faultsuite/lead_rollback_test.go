package faultsuite

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/internal/failpoint"
)

// TestIcebergRolledBackUnderDaemon: another engine sets the mirror's main
// branch back to an older snapshot (Spark's CALL
// system.rollback_to_snapshot) while cdcd runs. The rows of the snapshots
// after it are gone from the mirror, though cdcd wrote them. Before, the
// next commit's settle took the older offsets for another writer's and
// paused the table ("stop the other writer"), and a table with no change
// coming was not noticed at all: it stayed behind its source with no word.
// Now cdcd tells the rollback apart, loads the table again at once and
// writes the log's changes since the older snapshot again: the mirror ends
// equal to the source (a changelog holds every change exactly once), with
// no pause, whether a change follows the rollback, none does (the idle
// check finds it), or the daemon was stopped at the time.
func TestIcebergRolledBackUnderDaemon(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"upsert", "append"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			p := newPipeline(t, pipelineOptions{
				DDL: `CREATE TABLE a (id int PRIMARY KEY, v text);
					INSERT INTO a SELECT g, 'v' || g FROM generate_series(1, 100) g;`,
				Tables: []string{"public.a"},
				Mode:   mode,
				// No maintenance commit finds the idle rollback by chance
				// (its failure restarted the loop a minute later): only the
				// idle check does.
				SinkExtra: "compaction: {interval: 1h}",
			})
			// The idle check runs every RetryInterval: 2 s here, 30 s by
			// default.
			knob := failpoint.KnobPrefix + "SINK_RETRY_INTERVAL_MS=2000"
			p.startArmed("", knob)
			p.waitCaughtUp()
			// The changelog's rows so far: the initial load's reads (and
			// the load's own record); then every change adds one.
			changes := 100
			if mode == "append" {
				rows, distinct := p.changelogOffsets("public.a")
				if rows < 100 || distinct != rows {
					t.Fatalf("after the initial load the changelog holds %d rows, %d distinct log offsets", rows, distinct)
				}
				changes = rows
			}
			// equal: the mirror equals the source (upsert) or holds every
			// change exactly once (append).
			equal := func() (bool, string) {
				if mode == "upsert" {
					d := p.diff("public.a")
					return d.Equal(), d.String()
				}
				rows, distinct := p.changelogOffsets("public.a")
				return rows == changes && distinct == changes,
					fmt.Sprintf("%d rows, %d distinct log offsets, want %d changes once each", rows, distinct, changes)
			}
			requireEqual := func(when string) {
				t.Helper()
				if ok, what := equal(); !ok {
					t.Fatalf("%s: %s", when, what)
				}
			}
			// waitEqual polls until the mirror is equal again (nothing
			// tells the test when cdcd has written the changes again).
			waitEqual := func(when string) {
				t.Helper()
				start := time.Now()
				deadline := start.Add(3 * time.Minute)
				for {
					ok, what := equal()
					if ok {
						t.Logf("%s: equal again after %s", when, time.Since(start).Round(10*time.Millisecond))
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: not equal after 3 minutes: %s", when, what)
					}
					time.Sleep(500 * time.Millisecond) // polling the catalog, not synchronising
				}
			}

			// A rollback, then a change.
			back := p.snapshotID("public.a")
			p.exec(`UPDATE a SET v = 'u1' WHERE id <= 20`)
			p.waitCaughtUp()
			p.exec(`INSERT INTO a SELECT g, 'n' || g FROM generate_series(101, 130) g`)
			p.waitCaughtUp()
			changes += 50
			p.rollbackMirror("public.a", back)
			p.exec(`DELETE FROM a WHERE id > 120`)
			changes += 10
			p.waitCaughtUp()
			waitEqual("a rollback followed by a change")

			// A rollback while idle: no change comes after it.
			back = p.snapshotID("public.a")
			p.exec(`UPDATE a SET v = 'u2' WHERE id > 50 AND id <= 65`)
			changes += 15
			p.waitCaughtUp()
			requireEqual("before the idle rollback")
			p.rollbackMirror("public.a", back)
			waitEqual("a rollback while idle")
			p.waitCaughtUp()

			// A rollback while the daemon is stopped.
			back = p.snapshotID("public.a")
			p.exec(`INSERT INTO a SELECT g, 's' || g FROM generate_series(131, 155) g`)
			changes += 25
			p.waitCaughtUp()
			p.stop()
			p.rollbackMirror("public.a", back)
			p.startArmed("", knob)
			waitEqual("a rollback while the daemon was stopped")
			p.exec(`UPDATE a SET v = 'u3' WHERE id <= 5`)
			changes += 5
			p.waitCaughtUp()
			requireEqual("the end")

			for _, tb := range p.status().Tables {
				if tb.Paused {
					t.Errorf("table %s paused: %s", tb.Table, tb.PausedReason)
				}
			}
			if !p.logContains("the table was rolled back under cdcd") {
				t.Error("the daemon's log does not say the table was rolled back")
			}
			if p.logContains("another writer is committing") {
				t.Error("the daemon took the rollback for another writer")
			}
		})
	}
}

// rollbackMirror sets the main branch of sourceTable's Iceberg table to
// snapshot id through a catalog commit, as Spark's CALL
// system.rollback_to_snapshot does; a commit of the daemon's in between
// is retried over.
func (p *pipeline) rollbackMirror(sourceTable string, id int64) {
	p.t.Helper()
	cat := p.openCatalog()
	defer closeCatalog(cat)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		tbl := p.icebergTable(cat, sourceTable)
		cur := tbl.CurrentSnapshot().SnapshotID
		_, _, err := cat.CommitTable(p.ctx, tbl.Identifier(),
			[]table.Requirement{table.AssertRefSnapshotID(table.MainBranch, &cur)},
			[]table.Update{table.NewSetSnapshotRefUpdate(table.MainBranch, id, table.BranchRef, -1, -1, -1)})
		if err == nil {
			fmt.Fprintf(p.logFile, "---- faultsuite: %s rolled back from snapshot %d to %d\n", sourceTable, cur, id)
			return
		}
		if !strings.Contains(strings.ToLower(err.Error()), "requirement failed") || time.Now().After(deadline) {
			p.t.Fatalf("roll %s back to snapshot %d: %v", sourceTable, id, err)
		}
	}
}

// changelogOffsets scans sourceTable's changelog (append mode) and returns
// its rows and how many distinct log positions (partition, offset) they
// hold.
func (p *pipeline) changelogOffsets(sourceTable string) (rows, distinct int) {
	p.t.Helper()
	cat := p.openCatalog()
	defer closeCatalog(cat)
	at, err := p.icebergTable(cat, sourceTable).Scan(table.WithSelectedFields("_cdc_partition", "_cdc_offset")).ToArrowTable(p.ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	defer at.Release()
	seen := map[[2]int64]bool{}
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		part := rec.Column(rec.Schema().FieldIndices("_cdc_partition")[0]).(*array.Int32)
		off := rec.Column(rec.Schema().FieldIndices("_cdc_offset")[0]).(*array.Int64)
		for i := range int(rec.NumRows()) {
			rows++
			seen[[2]int64{int64(part.Value(i)), off.Value(i)}] = true
		}
	}
	return rows, len(seen)
}
