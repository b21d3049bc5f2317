package iceberg

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// A table set back under the sink: another engine (Spark's CALL
// system.rollback_to_snapshot, or any catalog commit that moves the main
// branch to an older snapshot) makes an ancestor of the snapshot this
// writer last knew current again. The rows of the snapshots after it are
// gone from the mirror, though the writer committed them. It is told
// apart from another writer (whose snapshots descend from ours and whose
// offsets are not ours) by the ancestry and the offsets: the current
// snapshot is an ancestor of the one this writer last knew (or there is
// none), and its offsets are at or behind the ones the writer holds. The
// table's loop then starts again at once from load, which reads the older
// offsets, rebuilds the key index (its snapshot tag is no longer the
// table's) and writes the log's changes since again; a log that no longer
// holds them pauses the table as lost offsets do. The settle of a failed
// commit (every commit after the rollback fails: its parent is no longer
// the branch's head) and the idle loop's look every RetryInterval
// (checkUnderneath) both find it.

// errReload: the table's loop must start again at once from load (a
// rollback under it, the table dropped). RunTable restarts it without
// waiting RetryInterval, but at most once per RetryInterval, so a table
// that keeps being set back does not spin.
var errReload = errors.New("iceberg: the table must be loaded again")

// reloadError is a sentinel of class errReload.
type reloadError struct{ msg string }

func (e *reloadError) Error() string { return e.msg }
func (e *reloadError) Unwrap() error { return errReload }

// rolledBackError: the table's current snapshot was set back behind the
// snapshot this writer last knew (class errReload).
type rolledBackError struct {
	Table string
	// Current is the snapshot now current (0: none), Known the one the
	// writer last knew.
	Current, Known int64
	// Offsets are those the current snapshot carries (nil: none), Held
	// those the writer held.
	Offsets, Held []int64
}

func (e *rolledBackError) Error() string {
	offs := "none"
	if e.Offsets != nil {
		offs = encodeOffsets(e.Offsets)
	}
	return fmt.Sprintf("iceberg: table %s was rolled back under the sink: its current snapshot %d (offsets %s) is an ancestor of snapshot %d (offsets %s) that cdcd last knew",
		e.Table, e.Current, offs, e.Known, encodeOffsets(e.Held))
}

func (e *rolledBackError) Unwrap() error { return errReload }

// rolledBack returns a *rolledBackError when fresh, the table as reloaded,
// is known (the table as this writer last knew it) set back: fresh's
// current snapshot is a proper ancestor of known's current one (or there
// is none) and its offsets are at or behind held. Otherwise nil: the same
// table, or another writer's commits on top of it (the settle decides),
// or an error reading fresh's offsets.
func (w *tableWriter) rolledBack(known, fresh *table.Table, held []int64) error {
	if known == nil || fresh == nil || known.CurrentSnapshot() == nil {
		return nil
	}
	was := known.CurrentSnapshot().SnapshotID
	e := &rolledBackError{Table: identString(w.cfg.Ident), Known: was, Held: held}
	if cur := fresh.CurrentSnapshot(); cur != nil {
		if cur.SnapshotID == was {
			return nil
		}
		// The chain as known holds every snapshot up to was; fresh's
		// metadata may have expired some of them since.
		lookup := func(id int64) *table.Snapshot {
			if s := known.Metadata().SnapshotByID(id); s != nil {
				return s
			}
			return fresh.Metadata().SnapshotByID(id)
		}
		if !table.IsAncestorOf(was, cur.SnapshotID, lookup) {
			return nil
		}
		e.Current = cur.SnapshotID
	}
	now, snap, err := committedOffsets(fresh, w.s.cfg.Pipeline, len(held))
	if err != nil {
		return nil
	}
	for p := range now {
		if now[p] > held[p] {
			return nil
		}
	}
	if snap != nil {
		e.Offsets = now
	}
	return e
}

// checkUnderneath looks at the catalog while the table's loop is idle
// (every RetryInterval, nothing buffered): a table rolled back or dropped
// under the sink would otherwise stay behind its source with no word until
// its next change. Errors reading the catalog are left to the next commit.
func (w *tableWriter) checkUnderneath(ctx context.Context) error {
	if w.tbl == nil {
		return nil // not created yet: nothing to lose
	}
	fresh, err := w.s.cat.LoadTable(ctx, w.cfg.Ident)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return fmt.Errorf("%w: %w", errTableGone, err)
	}
	if err != nil {
		w.logger.Debug("idle check: cannot load the table; the next commit tries again", "err", err)
		return nil
	}
	return w.rolledBack(w.tbl, fresh, w.committed)
}
