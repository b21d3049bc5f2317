package iceberg

import (
	"testing"
)

// TestTruncateBeforeFirstCommit: a table whose changes end in a truncate
// before its first commit is created (empty) and its offsets move past the
// truncate, so the sink reports it caught up; the first changes after a
// restart land in it. Before, the table was never created and its
// committed offsets stayed at zero: the daemon never caught up.
func TestTruncateBeforeFirstCommit(t *testing.T) {
	for _, mode := range []string{ModeUpsert, ModeAppend} {
		t.Run(mode, func(t *testing.T) {
			cat := testCatalog(t)
			reg := memRegistry(t)
			indexDir := t.TempDir()
			f := newFeed(t, t.TempDir(), reg, 3)
			f.upsert(1, 2, 3, 4, 5, 6)
			f.truncate("")
			r := startSink(t, cat, f.lg, reg, mode, indexDir)
			waitFor(t, "the truncate committed", func() bool { return r.committedTo(f.end()) })
			r.stop()
			if mode == ModeUpsert {
				wantKeys(t, tableKeys(t, cat))
			}
			f.upsert(7)
			r = startSink(t, cat, f.lg, reg, mode, indexDir)
			waitFor(t, "the change after it committed", func() bool { return r.committedTo(f.end()) })
			r.stop()
			if mode == ModeUpsert {
				wantKeys(t, tableKeys(t, cat), 7)
			}
		})
	}
}
