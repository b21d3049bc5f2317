package iceberg

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/log"
)

// TestInsertsLandInFlight: without PipelineCommits, a backlog of inserts
// only is committed with commits landing beside the loop (flight.go), and
// so is a backlog with updates and deletes after it (each landing before
// the next is staged); with SerialInserts the first lands on the loop,
// with SerialUpserts the second. Each way the table ends equal to its
// changes.
func TestInsertsLandInFlight(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		serialInserts, serialUpserts bool
	}{{"default", false, false}, {"serial-inserts", true, false}, {"serial-upserts", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cat := testCatalog(t)
			reg := memRegistry(t)
			f := newFeed(t, filepath.Join(dir, "log"), reg, 2)
			want, changes := model{}, map[string]int{}
			produce := func(recs []log.Record) {
				for len(recs) > 0 {
					n := min(len(recs), 50)
					if err := f.lg.Produce(t.Context(), "t", recs[:n]); err != nil {
						t.Fatal(err)
					}
					recs = recs[n:]
				}
			}
			// run runs the table's loop until it has committed the log and
			// returns how many commits it landed in flight.
			run := func() int {
				end := f.end()
				s := New(Config{Pipeline: "p", Group: "g", Mode: ModeUpsert, FormatVersion: 3, IndexDir: filepath.Join(dir, "index"),
					Tables:         []TableConfig{{Topic: "t", Ident: table.Identifier{"ns", "tbl"}}},
					CommitInterval: 50 * time.Millisecond, MaxBufferedBytes: 256 << 10, FetchBytes: 64 << 10, RetryInterval: 200 * time.Millisecond,
					Compaction: CompactionConfig{Disabled: true}, SerialInserts: tc.serialInserts, SerialUpserts: tc.serialUpserts}, cat, f.lg, reg, slog.New(slog.DiscardHandler))
				return runBacklog(t, s, end).launched
			}

			// Inserts only: about 3,000 rows a commit of 256 KiB.
			const rows = 30_000
			var recs []log.Record
			for id := range int64(rows) {
				recs = append(recs, f.change('c', id, 0, want, changes))
			}
			produce(recs)
			launched := run()
			switch {
			case tc.serialInserts && launched != 0:
				t.Errorf("%d commits of inserts landed in flight with SerialInserts", launched)
			case !tc.serialInserts && launched < 3:
				t.Errorf("%d commits of inserts landed in flight, want most of about 10", launched)
			}
			compareModel(t, want, scanTable(t, cat, table.Identifier{"ns", "tbl"}))

			// Updates and deletes among inserts: every buffer holds some.
			recs = recs[:0]
			for id := range int64(rows) {
				op := byte('u')
				switch id % 5 {
				case 0:
					op = 'd'
				case 1:
					recs = append(recs, f.change('c', rows+id, 1, want, changes))
				}
				recs = append(recs, f.change(op, id, 1, want, changes))
			}
			produce(recs)
			switch launched := run(); {
			case tc.serialUpserts && launched != 0:
				t.Errorf("%d commits with updates and deletes landed in flight with SerialUpserts", launched)
			case !tc.serialUpserts && launched < 3:
				t.Errorf("%d commits with updates and deletes landed in flight, want most of about 15", launched)
			}
			compareModel(t, want, scanTable(t, cat, table.Identifier{"ns", "tbl"}))
		})
	}
}
