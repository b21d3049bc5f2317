package compactor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table/dv"
)

// ErrWriterState: a rewrite's commit may have landed, but the writer's
// state (its key index, its files) did not follow. Table.CommitRewrite
// wraps it; Finish returns it, and the writer must reload the table
// before its next commit.
var ErrWriterState = errors.New("compactor: the writer's state did not follow the rewrite's commit")

// ErrFileMissing: a file of the table is missing from the warehouse
// (deleted under it): a rewrite cannot read it, and neither can the
// table's readers. Finish returns it, naming the file, instead of planning
// the same rewrite again and again: the table needs its writer's attention.
var ErrFileMissing = errors.New("compactor: a file of the table is missing")

// Compactor maintains one table. Its writer's loop calls it between two of
// its own commits — AfterCommit, Poll, Finish — so it never races the
// writer; only the rewrite itself runs in a goroutine of its own.
type Compactor struct {
	cc     CompactionConfig
	mc     MaintenanceConfig
	t      Table
	logger *slog.Logger
	// manifests caches manifest entries for the expiry's clean-up.
	manifests Manifests

	run   *compaction // the rewrite in flight
	force bool        // the next plan takes every small file (cdcd compact)
	// lastPlan and lastOrphans pace compaction and the orphan sweep; a
	// table catching up on a backlog defers compaction, since deferredSince.
	lastPlan, lastOrphans, deferredSince time.Time
	commitsSinceExpire                   int
	stats                                Stats
}

// New returns the compactor of table t. The first compaction and the first
// orphan sweep wait a full interval.
func New(cc CompactionConfig, mc MaintenanceConfig, t Table, logger *slog.Logger) *Compactor {
	now := time.Now()
	return &Compactor{cc: cc.WithDefaults(), mc: mc.WithDefaults(), t: t, logger: logger, lastPlan: now, lastOrphans: now}
}

// Manifests is the cache the writer records the manifests it writes in.
func (c *Compactor) Manifests() *Manifests { return &c.manifests }

// Force makes the next Poll plan a compaction of every small file now.
func (c *Compactor) Force() { c.lastPlan, c.force = time.Time{}, true }

// Done is closed when the rewrite in flight has finished (nil: none runs);
// the writer's loop then calls Finish.
func (c *Compactor) Done() <-chan struct{} {
	if c.run == nil {
		return nil
	}
	return c.run.done
}

// Wait waits for the rewrite in flight, if any, to end (its ctx is the
// writer's: cancelled, it ends soon). Its files are orphans then: the
// writer's next start or the orphan sweep removes them.
func (c *Compactor) Wait() {
	if c.run != nil {
		<-c.run.done
	}
}

// Stats are the table's compaction counters.
func (c *Compactor) Stats() Stats { return c.stats }

// compactDeferMax bounds how long a backlog defers compaction.
const compactDeferMax = 10 * time.Minute

// Poll starts a rewrite when one is due and none runs. catchingUp says the
// writer's last commit was forced by its buffer limits (a backlog): the
// rewrite would compete with it for CPU and memory, and the small files it
// merges keep coming, so compaction waits, for compactDeferMax at most.
func (c *Compactor) Poll(ctx context.Context, catchingUp bool) {
	if c.cc.Disabled || c.run != nil || c.t.Current() == nil || time.Since(c.lastPlan) < c.cc.Interval {
		return
	}
	if catchingUp {
		if c.deferredSince.IsZero() {
			c.deferredSince = time.Now()
		}
		if time.Since(c.deferredSince) < compactDeferMax {
			return
		}
	}
	c.deferredSince = time.Time{}
	c.lastPlan = time.Now()
	force := c.force
	c.force = false
	run, err := c.plan(ctx, force)
	if err != nil {
		c.logger.Warn("compaction: plan failed", "err", err)
		return
	}
	if run == nil {
		return
	}
	rw, err := c.t.Rewriter(ctx)
	if err != nil {
		c.logger.Warn("compaction: plan failed", "err", err)
		return
	}
	if rw == nil {
		return
	}
	c.run = run
	go func() {
		defer close(run.done)
		run.err = run.rewrite(ctx, rw, c.cc)
	}()
}

// plan picks the files of one partition to rewrite (pick) and takes their
// deleted rows as they are now.
func (c *Compactor) plan(ctx context.Context, force bool) (*compaction, error) {
	files := c.t.Files()
	var sch *iceberg.Schema
	if cur := c.t.Current(); cur != nil {
		sch = cur.Schema()
	}
	picked, capped := pick(files, c.cc, force, mergeFiles(c.cc, sch))
	if len(picked) == 0 {
		return nil, nil
	}
	if len(picked) == 1 {
		for _, f := range files {
			if f.DataFile.FilePath() == picked[0].FilePath() && f.Deleted == 0 {
				return nil, nil // one file without deletes: nothing to gain
			}
		}
	}
	deleted, err := c.t.Deleted(ctx, picked)
	if err != nil {
		return nil, err
	}
	run := &compaction{id: newID(), old: picked, capped: capped, started: time.Now(), done: make(chan struct{})}
	for _, df := range picked {
		var bm *dv.RoaringPositionBitmap
		if cur := deleted[df.FilePath()]; cur != nil {
			bm = dv.NewRoaringPositionBitmap()
			bm.Or(cur)
		}
		run.oldDV = append(run.oldDV, bm)
	}
	return run, nil
}

// Finish commits a finished rewrite (or drops a failed one), then
// maintains the table's metadata. Failures are logged and the next Poll
// plans again; only an error wrapping ErrWriterState or ErrFileMissing is
// returned.
func (c *Compactor) Finish(ctx context.Context) error {
	run := c.run
	c.run = nil
	st := c.stats
	st.Runs++
	st.Last, st.LastDuration, st.LastErr = time.Now(), time.Since(run.started), ""
	defer func() { c.stats = st }()
	if run.err != nil {
		st.LastErr = run.err.Error()
		c.drop(ctx, run, run.err)
		if errors.Is(run.err, iofs.ErrNotExist) {
			return fmt.Errorf("%w: %w", ErrFileMissing, run.err)
		}
		if ctx.Err() == nil {
			c.logger.Warn("compaction: rewrite failed; will plan again", "err", run.err)
		}
		return nil
	}
	if err := c.commit(ctx, run); err != nil {
		st.LastErr = err.Error()
		if errors.Is(err, iofs.ErrNotExist) {
			return fmt.Errorf("%w: %w", ErrFileMissing, err)
		}
		if errors.Is(err, ErrWriterState) {
			return err
		}
		c.logger.Warn("compaction: commit failed; will plan again", "err", err)
		return nil
	}
	for _, df := range run.old {
		st.FilesIn++
		st.BytesIn += df.FileSizeBytes()
		st.RowsIn += df.Count()
	}
	for _, df := range run.newFiles {
		st.FilesOut++
		st.BytesOut += df.FileSizeBytes()
	}
	c.logger.Info("compacted", "files_in", len(run.old), "files_out", len(run.newFiles), "took", time.Since(run.started).Round(time.Millisecond))
	if run.capped {
		// Files of the group were left for the merge's memory: plan the
		// next one at once rather than an Interval later, or a table
		// committed every second makes small files faster than capped
		// compactions a minute apart remove them.
		c.lastPlan = time.Time{}
	}
	c.maintain(ctx)
	return nil
}

// movedRef is a new file's row, by index.
type movedRef struct{ file, pos int32 }

// commit commits run between two of the writer's commits. Rows the writer
// deleted in the old files since the plan are deleted in the new files;
// every copied key not deleted since moves to its new place. No lookup is
// needed to know that a key still points at its old place: an index entry
// changes only when its key is written or deleted, and either deletes the
// key's old position, which the diff of deleted rows catches.
func (c *Compactor) commit(ctx context.Context, run *compaction) error {
	live := map[string]bool{}
	for _, f := range c.t.Files() {
		live[f.DataFile.FilePath()] = true
	}
	for _, df := range run.old {
		if !live[df.FilePath()] {
			c.drop(ctx, run, fmt.Errorf("%s is gone (truncated meanwhile)", df.FilePath()))
			return nil
		}
	}
	current, err := c.t.Deleted(ctx, run.old)
	if err != nil {
		c.drop(ctx, run, err)
		return err
	}
	deleted := map[string][]int64{}
	gone := map[movedRef]bool{}
	for i, df := range run.old {
		cur := current[df.FilePath()]
		if cur == nil {
			continue
		}
		for pos := range cur.Positions() {
			if run.oldDV[i] != nil && run.oldDV[i].Contains(pos) {
				continue
			}
			if loc := run.moved[i][pos]; loc.file >= 0 {
				nf := run.newFiles[loc.file].FilePath()
				deleted[nf] = append(deleted[nf], int64(loc.pos))
				gone[movedRef{loc.file, loc.pos}] = true
			}
		}
	}
	return c.t.CommitRewrite(ctx, &Rewrite{ID: run.id, Old: run.old, New: run.newFiles, Deleted: deleted,
		Moves: func(fn func(key []byte, file string, pos int64)) {
			for i := range run.keys.len() {
				key, at := run.keys.at(i)
				if !gone[movedRef{at.file, at.pos}] {
					fn(key, run.newFiles[at.file].FilePath(), int64(at.pos))
				}
			}
		}})
}

// drop abandons a rewrite: its files are deleted.
func (c *Compactor) drop(ctx context.Context, run *compaction, why error) {
	c.logger.Info("compaction abandoned", "id", run.id, "why", why)
	fs, err := c.t.Current().FS(ctx)
	if err != nil {
		return
	}
	for _, df := range run.newFiles {
		if err := fs.Remove(df.FilePath()); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			c.logger.Debug("could not remove an abandoned compaction's file; the orphan sweep will", "file", df.FilePath(), "err", err)
		}
	}
}

// newID returns a random commit id (32 hex digits).
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
