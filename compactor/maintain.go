package compactor

import (
	"context"
	"errors"
	iofs "io/fs"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/internal/icemeta"
)

// Metadata maintenance, run right after the writer's commits (and the
// compactor's), keeps commits from getting slower with the table's
// history: snapshots are expired beyond a count and an age (the newest
// snapshot carrying the writer's offsets is tagged, so it is always kept),
// and data manifests are merged once there are more than a few. Delete
// manifests stay few on their own: the writer rewrites those it touches.

// AfterCommit maintains the table's metadata after one of the writer's
// commits: it expires snapshots, merges manifests and sweeps orphan files
// when due. Failures are logged, not returned: the data stays correct
// without maintenance.
func (c *Compactor) AfterCommit(ctx context.Context) { c.maintain(ctx) }

func (c *Compactor) maintain(ctx context.Context) {
	tbl := c.t.Current()
	if tbl == nil || tbl.CurrentSnapshot() == nil {
		return
	}
	c.commitsSinceExpire++
	if c.commitsSinceExpire >= c.mc.ExpireEvery && icemeta.SnapshotCount(tbl.Metadata()) > c.mc.RetainSnapshots {
		c.commitsSinceExpire = 0
		c.expire(ctx)
	}
	tbl = c.t.Current()
	fs, err := tbl.FS(ctx)
	if err != nil {
		return
	}
	mfs, err := tbl.CurrentSnapshot().Manifests(fs)
	if err != nil {
		c.logger.Warn("maintenance: cannot read the manifest list", "err", err)
		return
	}
	data := 0
	for _, mf := range mfs {
		if mf.ManifestContent() == iceberg.ManifestContentData {
			data++
		}
	}
	if data > c.mc.MaxDataManifests {
		c.rewriteManifests(ctx, data)
	}
	if !c.cc.Disabled && time.Since(c.lastOrphans) >= c.cc.OrphanInterval {
		c.lastOrphans = time.Now()
		c.removeOrphans(ctx)
	}
}

// removeOrphans deletes files under the table's location that no snapshot
// references, once they are older than the orphan age — never a file a
// commit still settling may reference (Table.Pending).
func (c *Compactor) removeOrphans(ctx context.Context) {
	keep := map[string]bool{}
	for _, p := range c.t.Pending() {
		keep[p] = true
	}
	tbl := c.t.Current()
	fs, err := tbl.FS(ctx)
	if err != nil {
		return
	}
	started := time.Now()
	res, err := tbl.DeleteOrphanFiles(ctx, table.WithFilesOlderThan(c.cc.OrphanAge),
		table.WithDeleteFunc(func(path string) error {
			if keep[path] {
				return nil
			}
			return fs.Remove(path)
		}))
	if err != nil {
		c.logger.Warn("maintenance: orphan sweep failed; will retry", "err", err)
		return
	}
	if n := len(res.DeletedFiles); n > 0 {
		c.logger.Info("maintenance: removed orphan files", "files", n, "took", time.Since(started).Round(time.Millisecond))
	}
}

func (c *Compactor) expire(ctx context.Context) {
	pre := c.t.Current()
	before := icemeta.SnapshotCount(pre.Metadata())
	started := time.Now()
	tx := pre.NewTransaction()
	// The files the expiry leaves unreferenced are removed below, not by
	// iceberg-go (see manifests.go).
	if err := tx.ExpireSnapshots(table.WithRetainLast(c.mc.RetainSnapshots), table.WithOlderThan(c.mc.SnapshotMaxAge),
		table.WithPostCommit(false)); err != nil {
		c.logger.Warn("maintenance: expire snapshots", "err", err)
		return
	}
	if err := c.t.CommitMaintenance(ctx, tx); err != nil {
		c.logger.Warn("maintenance: expire snapshots reported an error", "err", err,
			"snapshots_before", before, "snapshots_now", icemeta.SnapshotCount(c.t.Current().Metadata()))
		return
	}
	post := c.t.Current()
	removed := c.removeExpiredFiles(ctx, pre, post)
	c.logger.Debug("maintenance: expired snapshots", "before", before, "after", icemeta.SnapshotCount(post.Metadata()),
		"files_removed", removed, "took", time.Since(started))
}

// removeExpiredFiles deletes what the expiry from pre to post left
// unreferenced (unless the table's gc.enabled is false) and returns how
// many files it removed. A file it fails to remove is left to the orphan
// sweep.
func (c *Compactor) removeExpiredFiles(ctx context.Context, pre, post *table.Table) int {
	if v, ok := post.Properties()[table.GCEnabledKey]; ok && !strings.EqualFold(v, "true") {
		return 0
	}
	fs, err := post.FS(ctx)
	if err != nil {
		c.logger.Warn("maintenance: files of expired snapshots left to the orphan sweep", "err", err)
		return 0
	}
	files, err := c.manifests.expiredFiles(fs, pre.Metadata(), post.Metadata())
	if err != nil {
		c.logger.Warn("maintenance: files of expired snapshots left to the orphan sweep", "err", err)
		return 0
	}
	if bulk, ok := fs.(icebergio.BulkRemovableIO); ok && len(files) > 0 {
		deleted, err := bulk.DeleteFiles(ctx, files)
		if err != nil {
			c.logger.Warn("maintenance: some files of expired snapshots left to the orphan sweep",
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
		c.logger.Warn("maintenance: some files of expired snapshots left to the orphan sweep",
			"files", len(files)-removed, "err", firstErr)
	}
	return removed
}

func (c *Compactor) rewriteManifests(ctx context.Context, data int) {
	started := time.Now()
	tx := c.t.Current().NewTransaction()
	res, err := tx.RewriteManifests(ctx)
	if err != nil {
		c.logger.Warn("maintenance: rewrite manifests", "err", err)
		return
	}
	if res.IsNoOp() {
		return
	}
	if err := c.t.CommitMaintenance(ctx, tx); err != nil {
		c.logger.Warn("maintenance: rewrite manifests", "err", err)
		return
	}
	c.logger.Debug("maintenance: merged data manifests", "before", data, "took", time.Since(started))
}
