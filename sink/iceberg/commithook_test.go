package iceberg

import (
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestOnCommitSeesEveryCommit: the OnCommit hook runs once per landed
// commit, however close together (the daemon's commit-duration histogram
// observes each), and SnapshotRows counts the snapshot reads (op r) among
// the rows committed — a load's progress into the table.
func TestOnCommitSeesEveryCommit(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	var calls int
	var took []time.Duration
	w.s.cfg.OnCommit = func(ts *TableStats, d time.Duration) {
		if ts != w.stats {
			t.Errorf("OnCommit got another table's stats")
		}
		calls++
		took = append(took, d)
	}
	offset := int64(0)
	ops := [][]byte{{'r', 'r', 'r'}, {'r', 'c', 'u'}, {'d', 'r'}}
	for _, batch := range ops {
		for _, op := range batch {
			id := offset % 4
			c := change{table: kv, offset: offset, env: &schema.Envelope{Op: op, After: []any{id, "v", int64(1)}}}
			if op == 'd' {
				c.env.After, c.env.Before = nil, []any{id, nil, nil}
			}
			c.env.Source.Position = []byte{byte(offset)}
			w.buf = append(w.buf, encoded(c))
			offset++
		}
		w.next[0] = offset
		if err := w.commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if calls != len(ops) || w.stats.Commits.Load() != int64(len(ops)) {
		t.Fatalf("OnCommit ran %d times for %d commits", calls, w.stats.Commits.Load())
	}
	for i, d := range took {
		if d <= 0 {
			t.Errorf("commit %d took %s", i, d)
		}
	}
	if got := w.stats.SnapshotRows.Load(); got != 5 {
		t.Errorf("SnapshotRows = %d, want the 5 snapshot reads", got)
	}
	if got := w.stats.Rows.Load(); got != 8 {
		t.Errorf("Rows = %d, want 8", got)
	}
}
