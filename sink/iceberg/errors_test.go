package iceberg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

func TestClassify(t *testing.T) {
	lost := &log.DataLossError{Topic: "t", Partition: 2, From: 10, To: 20, Reason: "damaged segment"}
	for _, c := range []struct {
		err  error
		want error
	}{
		{&PauseError{What: "x", Fix: "y"}, ErrPaused},
		{fmt.Errorf("fetch: %w", lost), ErrPaused},
		{&fs.PathError{Op: "open", Path: "/w/data/a.parquet", Err: fs.ErrNotExist}, ErrPaused},
		{fmt.Errorf("commit: %w", rest.ErrForbidden), ErrPaused},
		{fmt.Errorf("%w: metadata-location moved", table.ErrCommitFailed), ErrConflict},
		{errors.New("requirement failed: branch \"main\" has changed: expected id 1, found 2"), ErrConflict},
		{fmt.Errorf("commit: %w", rest.ErrCommitStateUnknown), ErrCommitUnknown},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, ErrTransient},
		{errors.New("something nobody foresaw"), ErrTransient},
	} {
		if got := classify(c.err); got != c.want {
			t.Errorf("classify(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	// A paused table's reason names what and where, and the fix.
	pe := asPause("cdc.orders", fmt.Errorf("fetch: %w", lost))
	if !strings.Contains(pe.What, "[10, 20)") || !strings.Contains(pe.What, "partition 2") ||
		!strings.Contains(pe.Fix, "cdcd snapshot -c FILE --replace cdc.orders") {
		t.Errorf("data loss: %q / %q", pe.What, pe.Fix)
	}
	pe = asPause("cdc.orders", fmt.Errorf("read: %w", &fs.PathError{Op: "open", Path: "/w/data/a.parquet", Err: fs.ErrNotExist}))
	if !strings.Contains(pe.What, "/w/data/a.parquet") || !strings.Contains(pe.Fix, "--replace cdc.orders") {
		t.Errorf("missing file: %q / %q", pe.What, pe.Fix)
	}
	if pe := asPause("cdc.orders", badData(errors.New("iceberg: key column NULL"))); pe.Table != "cdc.orders" ||
		pe.What != "key column NULL" || !strings.Contains(pe.Fix, "--replace cdc.orders") {
		t.Errorf("bad data: %+v", pe)
	}
}

// scriptedCatalog runs its hook around each CommitTable (the n-th call,
// from 1); nil passes the call through.
type scriptedCatalog struct {
	catalog.Catalog
	calls atomic.Int32
	hook  func(n int32, commit func() (table.Metadata, string, error)) (table.Metadata, string, error)
}

func (c *scriptedCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	n := c.calls.Add(1)
	commit := func() (table.Metadata, string, error) { return c.Catalog.CommitTable(ctx, ident, reqs, updates) }
	if c.hook == nil {
		return commit()
	}
	return c.hook(n, commit)
}

// commitsWithID counts the table's snapshots carrying commit id.
func commitsWithID(t *testing.T, cat catalog.Catalog, ident table.Identifier, id string) int {
	tbl, err := cat.LoadTable(t.Context(), ident)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range tbl.Metadata().Snapshots() {
		if s.Summary != nil && s.Summary.Properties[PropCommitID] == id {
			n++
		}
	}
	return n
}

// classWriter is an upsert writer over a scripted catalog, with a first
// commit landed.
func classWriter(t *testing.T) (*tableWriter, *scriptedCatalog, catalog.Catalog, model, *int64, *rand.Rand) {
	base := testCatalog(t)
	sc := &scriptedCatalog{Catalog: base}
	w := upsertWriter(t, sc, 3, 1)
	rng := rand.New(rand.NewPCG(9, 9))
	want := model{}
	off := new(int64)
	w.buf = randomChanges(rng, want, 40, off)
	w.next[0] = *off
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	sc.calls.Store(0)
	return w, sc, base, want, off, rng
}

// TestCommitConflictReplayed: another commit lands between the writer's
// read and its write; the catalog refuses the commit (a requirement), the
// writer reloads, revalidates and replays it at once, and it lands once.
func TestCommitConflictReplayed(t *testing.T) {
	w, sc, base, want, off, rng := classWriter(t)
	sc.hook = func(n int32, commit func() (table.Metadata, string, error)) (table.Metadata, string, error) {
		if n == 1 { // a maintenance-like commit by someone else, first
			tbl, err := base.LoadTable(t.Context(), w.cfg.Ident)
			if err != nil {
				return nil, "", err
			}
			tx := tbl.NewTransaction()
			if err := tx.AddFiles(t.Context(), nil, nil, false); err != nil {
				return nil, "", err
			}
			if _, err := tx.Commit(t.Context()); err != nil {
				return nil, "", err
			}
		}
		return commit()
	}
	w.buf = randomChanges(rng, want, 40, off)
	w.next[0] = *off
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := sc.calls.Load(); n != 2 {
		t.Errorf("%d catalog commits, want 2 (the refused one, the replay)", n)
	}
	id := w.tbl.CurrentSnapshot().Summary.Properties[PropCommitID]
	if n := commitsWithID(t, base, w.cfg.Ident, id); n != 1 {
		t.Errorf("the commit is in the table %d times", n)
	}
	compareModel(t, want, scanTable(t, base, w.cfg.Ident))
	checkInvariants(t, base, w.cfg.Ident)
}

// TestCommitUnknownSettled: a commit whose outcome the catalog could not
// tell is settled by its commit id: when it landed it is not replayed;
// when it did not, it is replayed, and lands once.
func TestCommitUnknownSettled(t *testing.T) {
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%t", applied), func(t *testing.T) {
			w, sc, base, want, off, rng := classWriter(t)
			sc.hook = func(n int32, commit func() (table.Metadata, string, error)) (table.Metadata, string, error) {
				if n > 1 {
					return commit()
				}
				if applied {
					if _, _, err := commit(); err != nil {
						return nil, "", err
					}
				}
				return nil, "", fmt.Errorf("%w: 504 gateway timeout", rest.ErrCommitStateUnknown)
			}
			w.buf = randomChanges(rng, want, 40, off)
			w.next[0] = *off
			if err := w.commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			wantCalls := int32(2)
			if applied {
				wantCalls = 1
			}
			if n := sc.calls.Load(); n != wantCalls {
				t.Errorf("%d catalog commits, want %d", n, wantCalls)
			}
			id := w.tbl.CurrentSnapshot().Summary.Properties[PropCommitID]
			if n := commitsWithID(t, base, w.cfg.Ident, id); n != 1 {
				t.Errorf("the commit is in the table %d times", n)
			}
			// The writer's state followed: the next commit builds on it.
			w.buf = randomChanges(rng, want, 40, off)
			w.next[0] = *off
			if err := w.commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			compareModel(t, want, scanTable(t, base, w.cfg.Ident))
			checkInvariants(t, base, w.cfg.Ident)
			spotCheckIndex(t, w)
		})
	}
}

// TestCommitTransientRetried: a catalog that cannot be reached is retried
// with backoff until the commit lands; past the commit budget the commit
// fails as ErrTransient and the table is marked failing, not paused.
func TestCommitTransientRetried(t *testing.T) {
	w, sc, base, want, off, rng := classWriter(t)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	failFor := int32(2)
	sc.hook = func(n int32, commit func() (table.Metadata, string, error)) (table.Metadata, string, error) {
		if n <= failFor {
			return nil, "", refused
		}
		return commit()
	}
	w.buf = randomChanges(rng, want, 40, off)
	w.next[0] = *off
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := sc.calls.Load(); n != 3 {
		t.Errorf("%d catalog commits, want 3", n)
	}
	compareModel(t, want, scanTable(t, base, w.cfg.Ident))

	sc.calls.Store(0)
	failFor = 1 << 30
	w.s.cfg.CommitBudget = 300 * time.Millisecond
	w.buf = randomChanges(rng, model{}, 10, off)
	w.next[0] = *off
	err := w.commit(t.Context())
	if err == nil || classify(err) != ErrTransient || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("past the budget: %v (class %v)", err, classify(err))
	}
	if n := sc.calls.Load(); n < 2 {
		t.Errorf("%d catalog commits: not retried", n)
	}
	w.s.tableFailed(w.stats, w.logger, "ns.tbl", err, w.s.cfg.RetryInterval)
	if w.stats.Failing.Load() == nil || w.stats.Paused.Load() != nil {
		t.Errorf("failing %v, paused %v: want failing, not paused", w.stats.Failing.Load(), w.stats.Paused.Load())
	}
}

// TestCommitRefusalPausesAtOnce: a change Iceberg cannot apply (a column's
// type changed in a way it cannot follow) pauses the table at once — no
// retry, no catalog commit — with the reason and the fix; the same reason
// again keeps the pause's start; a landed commit clears it.
func TestCommitRefusalPausesAtOnce(t *testing.T) {
	w, sc, _, _, off, _ := classWriter(t)
	text := &schema.Table{Namespace: "public", Name: "kv", Columns: []schema.Column{{Name: "id", Kind: schema.Int64},
		{Name: "v", Kind: schema.String, Nullable: true}, {Name: "n", Kind: schema.String, Nullable: true, SourceType: "text"}}, Key: []int{0}}
	w.buf = []change{encoded(change{table: text, env: &schema.Envelope{Op: 'c', After: []any{int64(1), "a", "b"},
		Source: schema.SourceInfo{Position: []byte(fmt.Sprintf("%012d", *off))}}, offset: *off})}
	w.next[0] = *off + 1
	started := time.Now()
	err := w.commit(t.Context())
	if classify(err) != ErrPaused || !strings.Contains(err.Error(), `column "n"`) {
		t.Fatalf("refused type change: %v", err)
	}
	if n := sc.calls.Load(); n != 0 || time.Since(started) > 5*time.Second {
		t.Errorf("%d catalog commits, %s: want none, at once", n, time.Since(started))
	}
	w.s.tableFailed(w.stats, slog.New(slog.DiscardHandler), "ns.tbl", err, w.s.cfg.RetryInterval)
	reason, fix, at := w.stats.Paused.Load(), w.stats.PausedFix.Load(), w.stats.PausedAt.Load()
	if reason == nil || fix == nil || !strings.Contains(*reason, `column "n"`) || !strings.Contains(*fix, "rename or drop the column") {
		t.Fatalf("paused %v, fix %v", reason, fix)
	}
	time.Sleep(5 * time.Millisecond)
	w.s.tableFailed(w.stats, slog.New(slog.DiscardHandler), "ns.tbl", err, w.s.cfg.RetryInterval)
	if w.stats.PausedAt.Load() != at {
		t.Error("the same reason again restarted the pause's clock")
	}
	w.stats.healthy()
	if w.stats.Paused.Load() != nil || w.stats.PausedFix.Load() != nil {
		t.Error("still paused once well")
	}
}
