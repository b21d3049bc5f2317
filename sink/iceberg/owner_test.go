package iceberg

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/log"
)

// sharedSink runs one table of a shared sink (Config.Shared) in the
// background, as a sink process that owns it does.
type sharedSink struct {
	s      *Sink
	cancel context.CancelFunc
	done   chan error
}

func newSharedSink(cat catalog.Catalog, lg log.Log, reg Registry, indexDir string) *Sink {
	return New(Config{Pipeline: "p", Group: "g", Mode: ModeUpsert, IndexDir: indexDir, Shared: true,
		Tables:         []TableConfig{{Topic: "t", Ident: table.Identifier{"ns", "tbl"}}},
		CommitInterval: 50 * time.Millisecond, RetryInterval: 200 * time.Millisecond,
		Compaction: CompactionConfig{Disabled: true}}, cat, lg, reg, slog.New(slog.DiscardHandler))
}

// startShared runs fn (a RunTable, or one writer's run) until stop.
func startShared(t *testing.T, s *Sink, fn func(context.Context) error) *sharedSink {
	ctx, cancel := context.WithCancel(context.Background())
	r := &sharedSink{s: s, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- fn(ctx) }()
	t.Cleanup(func() { cancel(); <-r.done; r.done <- nil })
	return r
}

// wait waits up to a minute for the run to end and returns its error.
func (r *sharedSink) wait(t *testing.T, what string) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
		return nil
	}
}

func (r *sharedSink) committedTo(end []int64) bool {
	return (&runningSink{s: r.s}).committedTo(end)
}

func currentEpoch(t *testing.T, cat catalog.Catalog) int64 {
	tbl, err := cat.LoadTable(t.Context(), table.Identifier{"ns", "tbl"})
	if err != nil {
		return -1
	}
	return ownerEpoch(tbl)
}

// TestZombieOwnerFenced: two sink processes share a table. The second
// claims it (owner epoch 2) while the first still runs it: the first's
// next commit is refused with ErrFenced, naming both epochs, and its loop
// of the table ends; a writer of the first process started afresh from
// the table (its loop restarted) is refused too, before its commit lands.
// The owner's commits go on; every key is in the table once.
func TestZombieOwnerFenced(t *testing.T) {
	cat := testCatalog(t)
	reg := memRegistry(t)
	f := newFeed(t, t.TempDir(), reg, 3)
	dirA, dirB := t.TempDir(), t.TempDir()

	sa := newSharedSink(cat, f.lg, reg, dirA)
	a := startShared(t, sa, func(ctx context.Context) error { return sa.RunTable(ctx, "t") })
	f.upsert(1, 2, 3, 4, 5, 6)
	waitFor(t, "the first owner committed", func() bool { return a.committedTo(f.end()) })
	if e := currentEpoch(t, cat); e != 1 {
		t.Fatalf("owner epoch in the table %d, want 1", e)
	}

	sb := newSharedSink(cat, f.lg, reg, dirB)
	b := startShared(t, sb, func(ctx context.Context) error { return sb.RunTable(ctx, "t") })
	waitFor(t, "the second owner's claim", func() bool { return currentEpoch(t, cat) == 2 })
	f.upsert(7, 8)
	err := a.wait(t, "the stale owner to be fenced")
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("stale owner's table loop ended with %v, want ErrFenced", err)
	}
	why := *sa.Stats()[0].Paused.Load()
	for _, s := range []string{"owner epoch 1", "epoch 2", "ns.tbl"} {
		if !strings.Contains(err.Error()+why, s) {
			t.Errorf("fenced error %q / pause %q lacks %q", err, why, s)
		}
	}
	waitFor(t, "the owner committed", func() bool { return b.committedTo(f.end()) })

	// The owner stops; a writer of the stale owner (epoch 1) starts again
	// from the table, which now holds the owner's offsets: its commit is
	// refused before it lands.
	b.cancel()
	if err := b.wait(t, "the owner's stop"); err != nil {
		t.Fatalf("owner: %v", err)
	}
	before := currentSnapshotID(t, cat)
	z := startShared(t, sa, func(ctx context.Context) error {
		w := &tableWriter{s: sa, cfg: sa.cfg.Tables[0], stats: sa.stats[0], logger: sa.logger, compactNow: sa.compactNow[0], epoch: 1}
		return w.run(ctx)
	})
	f.upsert(9)
	if err := z.wait(t, "the restarted stale writer to be fenced"); !errors.Is(err, ErrFenced) {
		t.Fatalf("restarted stale writer ended with %v, want ErrFenced", err)
	}
	if after := currentSnapshotID(t, cat); after != before {
		t.Fatalf("the stale writer's commit landed: snapshot %d -> %d", before, after)
	}

	// The owner's next run (a new claim, epoch 3) commits the rest.
	sc := newSharedSink(cat, f.lg, reg, dirB)
	c := startShared(t, sc, func(ctx context.Context) error { return sc.RunTable(ctx, "t") })
	waitFor(t, "the owner caught up", func() bool { return c.committedTo(f.end()) })
	if e := currentEpoch(t, cat); e != 3 {
		t.Errorf("owner epoch %d after the third claim, want 3", e)
	}
	if p := sc.Stats()[0].Paused.Load(); p != nil {
		t.Errorf("the owner paused: %s", *p)
	}
	wantKeys(t, tableKeys(t, cat), 1, 2, 3, 4, 5, 6, 7, 8, 9)
}

func currentSnapshotID(t *testing.T, cat catalog.Catalog) int64 {
	tbl, err := cat.LoadTable(t.Context(), table.Identifier{"ns", "tbl"})
	if err != nil {
		t.Fatal(err)
	}
	return tbl.CurrentSnapshot().SnapshotID
}
