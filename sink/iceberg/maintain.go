package iceberg

import (
	"context"
	"errors"
	iofs "io/fs"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// Metadata maintenance, run by each table's own loop right after a data
// commit, so it never races the table's writer. It keeps commits from
// getting slower with history: iceberg-go's RowDelta reads every data
// manifest of the parent snapshot (to validate that the data files its
// deletes reference still exist) and every snapshot adds one, and the
// metadata file grows with every snapshot kept. So: snapshots are expired
// beyond a count and an age (the newest snapshot carrying offsets is
// always among the kept ones: it is the current one or its parent), and
// data manifests are merged once there are more than a few. Delete
// manifests stay few on their own: each RowDelta that replaces deletion
// vectors rewrites the delete manifests it touches.
//
// Data-file compaction (small files, applied deletes) is the compactor's.

// MaintenanceConfig says when each table's metadata is maintained.
type MaintenanceConfig struct {
	// MaxDataManifests triggers a manifest merge when the current snapshot
	// has more data manifests; default 16.
	MaxDataManifests int
	// RetainSnapshots is how many snapshots are always kept; default 100,
	// at least 2.
	RetainSnapshots int
	// SnapshotMaxAge is the age beyond which snapshots past RetainSnapshots
	// expire; default 1h. Zero expires them at once.
	SnapshotMaxAge time.Duration
	// ExpireEvery is how many commits pass between expiry runs; default 20.
	ExpireEvery int
}

func (c *MaintenanceConfig) defaults() {
	if c.MaxDataManifests <= 0 {
		c.MaxDataManifests = 16
	}
	if c.RetainSnapshots < 2 {
		c.RetainSnapshots = max(c.RetainSnapshots, 100)
		if c.RetainSnapshots < 2 {
			c.RetainSnapshots = 2
		}
	}
	if c.SnapshotMaxAge < 0 {
		c.SnapshotMaxAge = 0
	}
	if c.ExpireEvery <= 0 {
		c.ExpireEvery = 20
	}
}

// maintain expires snapshots and merges manifests when due. Failures are
// logged, not returned: the data stays correct without maintenance.
func (w *tableWriter) maintain(ctx context.Context) {
	if w.tbl == nil || w.tbl.CurrentSnapshot() == nil {
		return
	}
	mc := w.s.cfg.Maintenance
	w.commitsSinceExpire++
	if w.commitsSinceExpire >= mc.ExpireEvery && len(w.tbl.Metadata().Snapshots()) > mc.RetainSnapshots {
		w.commitsSinceExpire = 0
		w.expire(ctx)
	}
	fs, err := w.tbl.FS(ctx)
	if err != nil {
		return
	}
	mfs, err := w.tbl.CurrentSnapshot().Manifests(fs)
	if err != nil {
		w.logger.Warn("maintenance: cannot read the manifest list", "err", err)
		return
	}
	data := 0
	for _, mf := range mfs {
		if mf.ManifestContent() == iceberg.ManifestContentData {
			data++
		}
	}
	if data > mc.MaxDataManifests {
		w.rewriteManifests(ctx, data)
	}
	if cc := w.s.cfg.Compaction; !cc.Disabled && time.Since(w.lastOrphans) >= cc.OrphanInterval {
		w.lastOrphans = time.Now()
		w.removeOrphans(ctx)
	}
}

// removeOrphans deletes files under the table's location that no snapshot
// references, once they are older than the orphan age — never a file a
// compaction intent names (its commit may be settling).
func (w *tableWriter) removeOrphans(ctx context.Context) {
	keep := map[string]bool{}
	if w.up != nil && w.up.idx != nil {
		if in, ok, _ := w.up.idx.intent(); ok {
			for _, p := range in.New {
				keep[p] = true
			}
		}
	}
	fs, err := w.tbl.FS(ctx)
	if err != nil {
		return
	}
	started := time.Now()
	res, err := w.tbl.DeleteOrphanFiles(ctx, table.WithFilesOlderThan(w.s.cfg.Compaction.OrphanAge),
		table.WithDeleteFunc(func(path string) error {
			if keep[path] {
				return nil
			}
			return fs.Remove(path)
		}))
	if err != nil {
		w.logger.Warn("maintenance: orphan sweep failed; will retry", "err", err)
		return
	}
	if n := len(res.DeletedFiles); n > 0 {
		w.logger.Info("maintenance: removed orphan files", "files", n, "took", time.Since(started).Round(time.Millisecond))
	}
}

func (w *tableWriter) expire(ctx context.Context) {
	mc := w.s.cfg.Maintenance
	before := len(w.tbl.Metadata().Snapshots())
	started := time.Now()
	pre := w.tbl
	tx := w.tbl.NewTransaction()
	// The files the expiry leaves unreferenced are removed below, not by
	// iceberg-go (see expire.go).
	if err := tx.ExpireSnapshots(table.WithRetainLast(mc.RetainSnapshots), table.WithOlderThan(mc.SnapshotMaxAge),
		table.WithPostCommit(false)); err != nil {
		w.logger.Warn("maintenance: expire snapshots", "err", err)
		return
	}
	tbl, err := tx.Commit(ctx)
	if err != nil {
		// The cleanup after a landed expiry may fail on its own: reload and
		// see what the table says.
		if fresh, lerr := w.s.cat.LoadTable(ctx, w.cfg.Ident); lerr == nil {
			w.tbl = fresh
		}
		w.logger.Warn("maintenance: expire snapshots reported an error", "err", err,
			"snapshots_before", before, "snapshots_now", len(w.tbl.Metadata().Snapshots()))
		return
	}
	w.tbl = tbl
	removed := w.removeExpiredFiles(ctx, pre, tbl)
	w.logger.Debug("maintenance: expired snapshots", "before", before, "after", len(tbl.Metadata().Snapshots()),
		"files_removed", removed, "took", time.Since(started))
}

// removeExpiredFiles deletes what the expiry from pre to post left
// unreferenced (unless the table's gc.enabled is false) and returns how
// many files it removed. A file it fails to remove is left to the orphan
// sweep.
func (w *tableWriter) removeExpiredFiles(ctx context.Context, pre, post *table.Table) int {
	if v, ok := post.Properties()[table.GCEnabledKey]; ok && !strings.EqualFold(v, "true") {
		return 0
	}
	fs, err := post.FS(ctx)
	if err != nil {
		w.logger.Warn("maintenance: files of expired snapshots left to the orphan sweep", "err", err)
		return 0
	}
	files, err := w.manifests.expiredFiles(fs, pre.Metadata(), post.Metadata())
	if err != nil {
		w.logger.Warn("maintenance: files of expired snapshots left to the orphan sweep", "err", err)
		return 0
	}
	if bulk, ok := fs.(icebergio.BulkRemovableIO); ok && len(files) > 0 {
		deleted, err := bulk.DeleteFiles(ctx, files)
		if err != nil {
			w.logger.Warn("maintenance: some files of expired snapshots left to the orphan sweep",
				"files", len(files)-len(deleted), "err", err)
		}
		return len(deleted)
	}
	removed := 0
	var firstErr error
	for _, p := range files {
		if err := fs.Remove(p); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		removed++
	}
	if firstErr != nil {
		w.logger.Warn("maintenance: some files of expired snapshots left to the orphan sweep",
			"files", len(files)-removed, "err", firstErr)
	}
	return removed
}

func (w *tableWriter) rewriteManifests(ctx context.Context, data int) {
	started := time.Now()
	tx := w.tbl.NewTransaction()
	res, err := tx.RewriteManifests(ctx)
	if err != nil {
		w.logger.Warn("maintenance: rewrite manifests", "err", err)
		return
	}
	if res.IsNoOp() {
		return
	}
	tbl, err := tx.Commit(ctx)
	if err != nil {
		w.logger.Warn("maintenance: rewrite manifests", "err", err)
		if fresh, lerr := w.s.cat.LoadTable(ctx, w.cfg.Ident); lerr == nil {
			w.tbl = fresh
		}
		return
	}
	w.tbl = tbl
	// A manifest rewrite changes no rows: move the key index's tag along.
	if w.up != nil && w.up.idx != nil {
		if err := w.up.idx.newBatch().apply(tbl.CurrentSnapshot().SnapshotID); err != nil {
			w.logger.Warn("maintenance: retag key index", "err", err)
		}
	}
	w.logger.Debug("maintenance: merged data manifests", "before", data, "took", time.Since(started))
}
