package iceberg

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"
	"github.com/cockroachdb/pebble/v2"

	"github.com/cdcd-dev/cdcd/compactor"
)

// The compactor's configuration and figures, as the sink's users know them.
type (
	CompactionConfig  = compactor.CompactionConfig
	MaintenanceConfig = compactor.MaintenanceConfig
	CompactionStats   = compactor.Stats
	MaintenanceStatus = compactor.Status
)

// compactor returns the table's compactor, made at the first call of a
// writer's run.
func (w *tableWriter) compactor() *compactor.Compactor {
	if w.comp == nil {
		cc := w.s.cfg.Compaction
		cc.TargetFileSize = int64(w.s.cfg.TargetFileSize)
		w.comp = compactor.New(cc, w.s.cfg.Maintenance, tableHandle{w}, w.logger)
	}
	return w.comp
}

// compactionDone is the in-flight rewrite's done channel (nil: none).
func (w *tableWriter) compactionDone() <-chan struct{} {
	if w.comp == nil {
		return nil
	}
	return w.comp.Done()
}

// finishCompaction commits a finished rewrite in the slot between two of
// the sink's commits.
func (w *tableWriter) finishCompaction(ctx context.Context) error {
	err := w.comp.Finish(ctx)
	st := w.comp.Stats()
	w.stats.Compaction.Store(&st)
	w.publishMaintenance() // the files as the rewrite left them, not as of the last commit
	return err
}

// publishMaintenance publishes the table's maintenance status.
func (w *tableWriter) publishMaintenance() {
	if st := w.compactor().Status(); st != nil {
		w.stats.Maintenance.Store(st)
	}
}

// tableHandle is the table as the compactor sees it (compactor.Table).
type tableHandle struct{ w *tableWriter }

var _ compactor.Table = tableHandle{}

func (h tableHandle) Current() *table.Table { return h.w.tbl }

func (h tableHandle) Files() []compactor.File {
	u := h.w.up
	if u == nil {
		return nil
	}
	out := make([]compactor.File, 0, len(u.data))
	for _, df := range u.data {
		f := compactor.File{DataFile: df}
		if d, ok := u.dvs[df.FilePath()]; ok {
			f.Deleted = d.Count()
		}
		out = append(out, f)
	}
	return out
}

func (h tableHandle) DeleteFiles() int {
	if u := h.w.up; u != nil {
		return len(u.dvs) + len(u.posDeletes)
	}
	return 0
}

func (h tableHandle) Manifests() (data, deletes int) {
	if sp := h.w.prod; sp != nil && sp.ms != nil {
		return len(sp.ms.data), len(sp.ms.deletes)
	}
	return 0, 0
}

func (h tableHandle) Deleted(ctx context.Context, files []iceberg.DataFile) (map[string]*dv.RoaringPositionBitmap, error) {
	fs, err := h.w.tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	return h.w.deletedIn(ctx, fs, files)
}

func (h tableHandle) Pending() []string {
	w := h.w
	if w.up == nil || w.up.idx == nil {
		return nil
	}
	in, ok, _ := w.up.idx.intent()
	out := append([]string(nil), w.unsettled...)
	if ok {
		out = append(out, in.New...)
	}
	return out
}

// CommitMaintenance commits tx, which changes no rows, and adopts the
// table; a new current snapshot (a manifest rewrite) moves the key index's
// tag along. After a failure the table is reloaded.
func (h tableHandle) CommitMaintenance(ctx context.Context, tx *table.Transaction) error {
	w := h.w
	if err := checkCatalog(w.s.cat); err != nil {
		return err
	}
	if err := w.fence(w.tbl, nil); err != nil {
		return err
	}
	before := w.tbl.CurrentSnapshot()
	tbl, err := tx.Commit(ctx)
	if err != nil {
		// A commit that landed may still report an error: see what the
		// table says.
		// A table rolled back under the sink is not adopted: the next
		// data commit would land on it with offsets it does not hold.
		// The loop loads it again instead (rollback.go).
		if fresh, lerr := w.s.cat.LoadTable(ctx, w.cfg.Ident); lerr == nil {
			if rb := w.rolledBack(w.tbl, fresh, w.committed); rb != nil {
				return rb
			}
			w.tbl = fresh
		}
		return err
	}
	w.tbl = tbl
	if cur := tbl.CurrentSnapshot(); w.up != nil && w.up.idx != nil && cur != nil && (before == nil || cur.SnapshotID != before.SnapshotID) {
		if err := w.up.idx.newBatch().apply(cur.SnapshotID); err != nil {
			w.logger.Warn("maintenance: retag key index", "err", err)
		}
	}
	return nil
}

// CommitRewrite commits a compactor's rewrite: one REPLACE snapshot
// removes the old files (and their vectors, and the position-delete files
// that apply to nothing left) and adds the new ones with the rows deleted
// meanwhile, carrying the table's offsets; the key index moves the copied
// keys in the same batch that removes the intent stored before the commit.
func (h tableHandle) CommitRewrite(ctx context.Context, r *compactor.Rewrite) error {
	w := h.w
	// A stop does not cut the commit short: cancelled in the middle, the
	// catalog's commit could land and still report the cancel, and the read
	// back that settles it would fail on the same context, leaving the
	// outcome unknown — the intent stays in the key index, its tag behind
	// the table, and the next start rebuilds the whole index. Bounded like
	// the stopping sink's final commit.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopCommitTimeout)
	defer cancel()
	fs, err := w.tbl.FS(ctx)
	if err != nil {
		return err
	}
	w.files = newAttemptFiles()
	abandon := func(err error) error {
		removeFiles(fs, r.New)
		w.discardAttempt(ctx, err)
		return err
	}
	wfs, _ := fs.(icebergio.WriteFileIO)
	p := &plan{batch: w.up.idx.newBatch(), newDVs: map[string]iceberg.DataFile{}, bitmaps: map[string]*dv.RoaringPositionBitmap{},
		added: r.New, removedData: r.Old}
	obsolete, err := w.prunePosDeletes(fs, wfs, r.Old, r.New, p)
	if err != nil {
		p.batch.discard()
		return abandon(err)
	}
	p.removedDVs = append(p.removedDVs, obsolete...)
	for _, df := range r.Old {
		if d, ok := w.up.dvs[df.FilePath()]; ok {
			p.removedDVs = append(p.removedDVs, d)
		}
	}
	if len(r.Deleted) > 0 {
		for _, df := range r.New {
			w.up.data[df.FilePath()] = df // the delete writer looks data files up
		}
		err := w.up.writeDeletes(ctx, w, fs, wfs, w.tbl, r.Deleted, p)
		for _, df := range r.New {
			delete(w.up.data, df.FilePath())
		}
		if err != nil {
			p.batch.discard()
			return abandon(err)
		}
	}
	r.Moves(func(key []byte, file string, pos int64) { p.batch.set(key, location{file: file, pos: pos}) })
	intent := compactionIntent{ID: r.ID, Old: paths(r.Old), New: paths(r.New)}
	if err := w.up.idx.putIntent(intent); err != nil {
		p.batch.discard()
		return abandon(err)
	}
	p.batch.delIntent()
	w.pending = p
	props := iceberg.Properties(w.offsetProps(w.committed))
	props[PropCommitID], props[PropCompactionID] = r.ID, r.ID
	if err := w.fence(w.tbl, props); err != nil {
		w.dropPending()
		w.forgetIntent(fs, intent)
		w.discardAttempt(ctx, err)
		return err
	}
	if err := w.produce(ctx, p, props); err != nil {
		landed, serr := w.settle(ctx, r.ID)
		switch {
		case serr != nil:
			// Its outcome is unknown: the intent stays, and the loop's
			// restart settles it by the commit id (resolveIntent).
			w.dropPending()
			w.keepAttempt()
			return fmt.Errorf("iceberg: compaction commit of %s failed (%v), and its outcome could not be read back: %w: %w",
				identString(w.cfg.Ident), err, compactor.ErrWriterState, serr)
		case !landed:
			w.dropPending()
			w.forgetIntent(fs, intent)
			w.discardAttempt(ctx, err)
			return fmt.Errorf("iceberg: compaction commit of %s: %w", identString(w.cfg.Ident), err)
		}
	}
	w.failpoint("after-compaction-commit")
	w.files = nil // the table's files now
	if err := w.adoptUpsert(ctx); err != nil {
		return fmt.Errorf("iceberg: compaction of %s committed, but the key index did not follow: %w: %w", identString(w.cfg.Ident), compactor.ErrWriterState, err)
	}
	for _, df := range r.Old {
		delete(w.up.data, df.FilePath())
		delete(w.up.dvs, df.FilePath())
		delete(w.up.dvCache, df.FilePath())
	}
	if len(obsolete) > 0 {
		gone := map[string]bool{}
		for _, d := range obsolete {
			gone[d.FilePath()] = true
		}
		w.up.posDeletes = slices.DeleteFunc(w.up.posDeletes, func(d iceberg.DataFile) bool { return gone[d.FilePath()] })
	}
	return nil
}

func paths(files []iceberg.DataFile) []string {
	out := make([]string, len(files))
	for i, df := range files {
		out[i] = df.FilePath()
	}
	return out
}

// removeFiles removes files of a commit that did not land; a file it
// cannot remove is left to the orphan sweep.
func removeFiles(fs icebergio.IO, files []iceberg.DataFile) {
	for _, df := range files {
		_ = fs.Remove(df.FilePath())
	}
}

// deletedIn returns the deleted positions of files: their deletion vectors
// (v3), or what the live position-delete files say about them (v2).
func (w *tableWriter) deletedIn(ctx context.Context, fs icebergio.IO, files []iceberg.DataFile) (map[string]*dv.RoaringPositionBitmap, error) {
	out := map[string]*dv.RoaringPositionBitmap{}
	if len(w.up.posDeletes) > 0 {
		all, err := w.up.deletedPositions(ctx, fs, w.tbl)
		if err != nil {
			return nil, err
		}
		for _, df := range files {
			out[df.FilePath()] = all[df.FilePath()]
		}
		return out, nil
	}
	for _, df := range files {
		if d, ok := w.up.dvs[df.FilePath()]; ok {
			cur, err := w.up.currentDV(fs, df.FilePath(), d)
			if err != nil {
				return nil, err
			}
			out[df.FilePath()] = cur
		}
	}
	return out, nil
}

// compactionIntent is stored in the key index while a compaction commits.
type compactionIntent struct {
	ID  string   `json:"id"`
	Old []string `json:"old"`
	New []string `json:"new"`
}

// obsoletePosDeletes returns the live position-delete files (v2) that
// apply to no data file once removed are replaced by added: no remaining
// data file's path lies within their file_path bounds. Such a file would
// stay live forever (a compaction's new files have newer sequence numbers,
// so it deletes nothing in them) and be read by every scan and compaction.
// Files without bounds are kept.
func (u *upsert) obsoletePosDeletes(removed, added []iceberg.DataFile) []iceberg.DataFile {
	if len(u.posDeletes) == 0 {
		return nil
	}
	gone := make(map[string]bool, len(removed))
	for _, df := range removed {
		gone[df.FilePath()] = true
	}
	remaining := make([]string, 0, len(u.data)+len(added))
	for path := range u.data {
		if !gone[path] {
			remaining = append(remaining, path)
		}
	}
	for _, df := range added {
		remaining = append(remaining, df.FilePath())
	}
	slices.Sort(remaining)
	pathField, _ := iceberg.PositionalDeleteSchema.FindFieldByName("file_path")
	var out []iceberg.DataFile
	for _, d := range u.posDeletes {
		lo, okLo := d.LowerBoundValues()[pathField.ID]
		hi, okHi := d.UpperBoundValues()[pathField.ID]
		if !okLo || !okHi {
			continue
		}
		// Truncated bounds (older files) only widen the range: still safe.
		if i, _ := slices.BinarySearch(remaining, string(lo)); i < len(remaining) && remaining[i] <= string(hi) {
			continue // a remaining file may be one it deletes from
		}
		out = append(out, d)
	}
	return out
}

// forgetIntent removes an intent whose commit did not land, and its files.
func (w *tableWriter) forgetIntent(fs icebergio.IO, in compactionIntent) {
	for _, p := range in.New {
		_ = fs.Remove(p)
	}
	b := w.up.idx.newBatch()
	b.delIntent()
	_ = b.apply(w.up.idx.snapshot)
}

// resolveIntent settles a compaction intent left by a crash: if its commit
// landed, the index (behind the table) is rebuilt by loadUpsert; if not,
// its files are removed.
func (w *tableWriter) resolveIntent(ctx context.Context) error {
	in, ok, err := w.up.idx.intent()
	if err != nil || !ok {
		return err
	}
	if w.tbl != nil && hasCommit(w.tbl, in.ID) {
		w.logger.Info("a compaction committed before the last stop; its index update is redone by a rebuild", "id", in.ID)
		b := w.up.idx.newBatch()
		b.delIntent()
		return b.apply(w.up.idx.snapshot)
	}
	w.logger.Info("a compaction did not commit before the last stop; removing its files", "id", in.ID, "files", len(in.New))
	fs, err := w.tbl.FS(ctx)
	if err != nil {
		return err
	}
	w.forgetIntent(fs, in)
	return nil
}

func (x *keyIndex) putIntent(in compactionIntent) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return x.db.Set(idxIntentKey, b, pebble.Sync)
}

func (x *keyIndex) intent() (compactionIntent, bool, error) {
	var in compactionIntent
	v, closer, err := x.db.Get(idxIntentKey)
	if isNotFound(err) {
		return in, false, nil
	}
	if err != nil {
		return in, false, err
	}
	defer closer.Close()
	return in, true, json.Unmarshal(v, &in)
}

func (b *indexBatch) delIntent() { _ = b.b.Delete(idxIntentKey, nil) }

// Compact asks the table's loop to plan a compaction now.
func (s *Sink) Compact(tableName string) error {
	for i, t := range s.cfg.Tables {
		if identString(t.Ident) == tableName || t.Ident[len(t.Ident)-1] == tableName || t.Topic == tableName {
			select {
			case s.compactNow[i] <- struct{}{}:
			default: // one request is pending already
			}
			return nil
		}
	}
	return fmt.Errorf("iceberg: no table %q in this pipeline", tableName)
}
