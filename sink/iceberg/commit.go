package iceberg

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// commit writes the buffer as one snapshot carrying the next offsets. An
// error of unknown outcome is settled by looking for the commit id. In
// upsert mode the half of a key change whose other half is not buffered
// yet waits, with what follows it in its partition (commitCut).
func (w *tableWriter) commit(ctx context.Context) error {
	cut, err := w.mode().cut()
	if err != nil {
		return badData(err)
	}
	if !slices.Equal(cut, w.next) {
		if err := w.drain(ctx); err != nil {
			return err
		}
		return w.commitHolding(ctx, cut)
	}
	if w.pipelines() {
		return w.commitAhead(ctx)
	}
	if err := w.drain(ctx); err != nil {
		return err
	}
	return w.commitWith(ctx, w.next, w.attempt)
}

// commitProps are the properties of a commit of the buffer up to next.
func (w *tableWriter) commitProps(next []int64) iceberg.Properties {
	props := iceberg.Properties(w.offsetProps(next))
	props[PropSourcePosition] = hex.EncodeToString(w.lastPos)
	props[PropCommitID] = newCommitID()
	return props
}

// commitWith lands one commit of the buffer carrying next (see land), then
// makes it the writer's state: the buffer is emptied, the offsets and
// stats move on, and the table's maintenance runs.
func (w *tableWriter) commitWith(ctx context.Context, next []int64, attempt func(context.Context, iceberg.Properties) error) error {
	started := time.Now()
	if err := w.ensureTable(ctx); err != nil {
		return err
	}
	props := w.commitProps(next)
	if err := w.land(ctx, props, attempt); err != nil {
		return err
	}
	w.committedNow(ctx, &w.buffer, next, started)
	return nil
}

// errNotAdopted: a commit landed but the writer's state (the key index,
// the live files) could not follow it. The table's loop restarts, and its
// start brings the index up to the table.
type errNotAdopted struct{ err error }

func (e errNotAdopted) Error() string {
	return "iceberg: the commit landed but the writer could not record it: " + e.err.Error()
}
func (e errNotAdopted) Unwrap() error { return e.err }

// land runs attempt until it lands, within the commit budget. After a
// failure the table is reloaded and the commit id looked for (settle), so
// an attempt whose outcome was unknown is never repeated blindly. Then the
// failure's class (classify) decides: ErrPaused returns at once; a
// conflict is replayed at once; an unknown outcome that did not land and a
// temporary failure are retried with backoff.
func (w *tableWriter) land(ctx context.Context, props iceberg.Properties, attempt func(context.Context, iceberg.Properties) error) error {
	return w.landAfter(ctx, props, attempt, nil)
}

// landAfter is land whose first attempt already ran and failed with first
// (nil: none ran yet), its files and plan the writer's (w.files,
// w.pending): a commit that failed on its own goroutine (flight.go).
func (w *tableWriter) landAfter(ctx context.Context, props iceberg.Properties, attempt func(context.Context, iceberg.Properties) error, first error) error {
	id := props[PropCommitID]
	b := newBackoff(w.s.cfg.CommitBudget)
	for n := 1; ; n++ {
		err := first
		if n > 1 || first == nil {
			err = checkCatalog(w.s.cat)
			if err == nil {
				err = w.fence(w.tbl, props)
			}
			if err == nil {
				err = attempt(ctx, props)
			}
		}
		var na errNotAdopted
		if err == nil || errors.As(err, &na) {
			w.files = nil // landed: the table's files now
			return err
		}
		class := classify(err)
		if class == ErrPaused {
			w.discardAttempt(ctx, err)
			return err
		}
		landed, serr := w.settleWithin(ctx, id, b)
		if errors.Is(serr, errReload) {
			// Rolled back or dropped under the sink: the attempt did not
			// land, and the table's loop starts again from load.
			w.discardAttempt(ctx, err)
			return serr
		}
		if serr != nil {
			w.keepAttempt()
			return fmt.Errorf("iceberg: commit to %s failed (%v), and then: %w", identString(w.cfg.Ident), err, serr)
		}
		if landed {
			w.logger.Warn("commit reported an error but landed", "commit_id", id, "err", err)
			w.files = nil
			if err := w.landed(ctx); err != nil {
				return errNotAdopted{err}
			}
			return nil
		}
		w.discardAttempt(ctx, err)
		if ctx.Err() != nil || b.spent() {
			return fmt.Errorf("iceberg: commit to %s: %w (after %d attempts in %s)", identString(w.cfg.Ident), err, n, b.elapsed().Round(time.Second))
		}
		w.logger.Warn("commit failed; retrying", "attempt", n, "class", class, "err", err)
		if class != ErrConflict {
			if err := b.wait(ctx); err != nil {
				return err
			}
		}
	}
}

// settleWithin settles commit id (settle), retrying a settle that fails
// for a temporary reason within b: the attempt may not be replayed before
// its outcome is known.
func (w *tableWriter) settleWithin(ctx context.Context, id string, b *backoff) (bool, error) {
	for {
		landed, err := w.settle(ctx, id)
		if err == nil {
			return landed, nil
		}
		if classify(err) == ErrPaused || errors.Is(err, errReload) {
			return false, err
		}
		if ctx.Err() != nil || b.spent() {
			return false, fmt.Errorf("its outcome could not be read back: %w", err)
		}
		w.logger.Warn("cannot read the table back to settle a failed commit; retrying", "commit_id", id, "err", err)
		if err := b.wait(ctx); err != nil {
			return false, err
		}
	}
}

// committedNow makes a landed commit of buffer b (the writer's, or a
// flight's) up to next the writer's state.
func (w *tableWriter) committedNow(ctx context.Context, b *buffer, next []int64, started time.Time) {
	rows, reads := b.emptied(w.windows)
	w.committedRows(ctx, rows, reads, next, started)
}

// emptied empties the buffer, handing its windows back to pool, and
// returns the changes it held that are rows, and of them the snapshot
// reads.
func (b *buffer) emptied(pool *windowPool) (rows, reads int) {
	for i := range b.buf {
		if !b.buf[i].skip {
			rows++
			if b.buf[i].op() == 'r' {
				reads++
			}
		}
	}
	clear(b.buf)
	b.buf, b.bufBytes, b.others = b.buf[:0], 0, 0
	// Nothing refers to the changes' windows any more.
	pool.release(b.held)
	clear(b.held)
	b.held = b.held[:0]
	return rows, reads
}

// committedRows makes a landed commit of rows (reads of them snapshot
// reads) up to next the writer's state.
func (w *tableWriter) committedRows(ctx context.Context, rows, reads int, next []int64, started time.Time) {
	w.serialFirst = false
	copy(w.committed, next)
	for p := range next {
		// A commit that held changes back committed less than was read.
		w.next[p] = max(w.next[p], next[p])
	}
	w.publishCommitted()
	took := time.Since(started)
	w.stats.Rows.Add(int64(rows))
	w.stats.SnapshotRows.Add(int64(reads))
	w.stats.Commits.Add(1)
	w.stats.LastCommit.Store(time.Now().UnixMilli())
	w.stats.LastCommitDur.Store(int64(took))
	if f := w.s.cfg.OnCommit; f != nil {
		f(w.stats, took)
	}
	w.stats.healthy()
	w.removeUnsettled(ctx)
	if w.resumed {
		// Past the reset markers: nothing before them matters any more.
		w.s.untrusted.clear(w.cfg.Topic)
		w.resumed = false
	}
	if snap := w.tbl.CurrentSnapshot(); snap != nil {
		w.stats.SnapshotID.Store(snap.SnapshotID)
	}
	w.stats.Current.Store(w.tbl)
	w.logger.Debug("committed", "rows", rows, "offsets", encodeOffsets(next), "took", time.Since(started))
	offs := make(map[int32]int64, len(next))
	for p, o := range next {
		offs[int32(p)] = o
	}
	if err := w.s.lg.CommitOffsets(ctx, w.s.cfg.Group, w.cfg.Topic, offs); err != nil {
		w.logger.Warn("could not record consumer offsets (lag metrics only)", "err", err)
	}
	w.compactor().AfterCommit(ctx)
	w.publishMaintenance()
}

func (w *tableWriter) publishCommitted() {
	c := append([]int64(nil), w.committed...)
	w.stats.Committed.Store(&c)
}

// attempt makes one commit attempt of the buffer in the table's mode.
func (w *tableWriter) attempt(ctx context.Context, props iceberg.Properties) error {
	if err := w.checkKey(ctx); err != nil {
		return err
	}
	if err := w.evolve(ctx); err != nil {
		return err
	}
	w.files = newAttemptFiles()
	return w.mode().attempt(ctx, props)
}

// finish commits tx and adopts the resulting table.
func (w *tableWriter) finish(ctx context.Context, tx *table.Transaction) error {
	return w.finishData(ctx, tx, true)
}

// finishData is finish; rows says the commit changes rows, the commits
// crash tests aim the catalog-commit failpoints at.
func (w *tableWriter) finishData(ctx context.Context, tx *table.Transaction, rows bool) error {
	if rows {
		w.failpoint("before-catalog-commit")
	}
	tbl, err := tx.Commit(ctx)
	if err != nil {
		return err
	}
	w.tbl = tbl
	if rows {
		w.failpoint("after-catalog-commit")
	}
	return nil
}

// landed adopts a commit that reported an error but is in the table.
func (w *tableWriter) landed(ctx context.Context) error { return w.mode().landed(ctx) }

// settle reloads the table after a failed commit: true if the commit landed
// anyway. Otherwise the table must still hold the offsets this writer
// started from, or it was rolled back under the writer (a
// *rolledBackError: rollback.go), or someone else is writing it.
func (w *tableWriter) settle(ctx context.Context, id string) (bool, error) {
	tbl, err := w.s.cat.LoadTable(ctx, w.cfg.Ident)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return false, fmt.Errorf("%w: %w", errTableGone, err)
	}
	if err != nil {
		return false, err
	}
	known := w.tbl
	w.tbl = tbl
	if hasCommit(tbl, id) {
		return true, nil
	}
	if err := w.rolledBack(known, tbl, w.committed); err != nil {
		return false, err
	}
	if err := w.fence(tbl, nil); err != nil {
		return false, err
	}
	now, snap, err := committedOffsets(tbl, w.s.cfg.Pipeline, w.partitions)
	if err != nil {
		return false, err
	}
	if theirs := topicOf(snap); theirs != "" && w.topicID != "" && theirs != w.topicID {
		return false, &PauseError{Table: identString(w.cfg.Ident),
			What: fmt.Sprintf("the table's offsets now belong to log topic %s, not this log's %s: another writer with another log is committing to it", theirs, w.topicID),
			Fix:  "stop the other writer; each table has exactly one"}
	}
	for p := range now {
		if now[p] != w.committed[p] {
			return false, &PauseError{Table: identString(w.cfg.Ident),
				What: fmt.Sprintf("the table moved to offsets %s while this writer held %s: another writer is committing to it",
					encodeOffsets(now), encodeOffsets(w.committed)),
				Fix: "stop the other writer (another cdcd with this pipeline's name and catalog?); each table has exactly one"}
		}
	}
	// The attempt did not land: its staged state is void.
	return false, w.mode().void(ctx, tbl)
}

// backoff paces retries within a budget: 100 ms doubling to 5 s.
type backoff struct {
	start, deadline time.Time
	next            time.Duration
	timer           *time.Timer
}

func newBackoff(budget time.Duration) *backoff {
	now := time.Now()
	return &backoff{start: now, deadline: now.Add(budget), next: 100 * time.Millisecond}
}

func (b *backoff) spent() bool            { return time.Now().After(b.deadline) }
func (b *backoff) elapsed() time.Duration { return time.Since(b.start) }

// wait sleeps the next interval, or until ctx ends.
func (b *backoff) wait(ctx context.Context) error {
	if b.timer == nil {
		b.timer = time.NewTimer(b.next)
	} else {
		b.timer.Reset(b.next)
	}
	defer b.timer.Stop()
	b.next = min(b.next*2, 5*time.Second)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-b.timer.C:
		return nil
	}
}
