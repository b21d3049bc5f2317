package iceberg

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"

	"github.com/cdcd-dev/cdcd/schema"
)

// upsertSchema is an upsert table's schema: the source's columns, the
// primary key as required identifier fields (so engines know the key).
func upsertSchema(t *schema.Table) (*iceberg.Schema, error) {
	if len(t.Key) == 0 {
		return nil, fmt.Errorf("iceberg: %s has no primary key; upsert mode needs one", t.QualifiedName())
	}
	isKey := map[int]bool{}
	for _, k := range t.Key {
		isKey[k] = true
		if c := t.Columns[k]; c.Kind == schema.List {
			return nil, fmt.Errorf("iceberg: %s: primary-key column %q is an array (%s); an Iceberg identifier field cannot be a list, "+
				"so upsert mode cannot key this table: give it a primary key without arrays, or mirror it in append mode",
				t.QualifiedName(), c.Name, c.SourceType)
		}
	}
	fields := make([]iceberg.NestedField, 0, len(t.Columns))
	var keyIDs []int
	for i, c := range t.Columns {
		typ, err := icebergType(c)
		if err != nil {
			return nil, fmt.Errorf("iceberg: table %s: %w", t.QualifiedName(), err)
		}
		fields = append(fields, iceberg.NestedField{ID: i + 1, Name: c.Name, Type: typ, Required: isKey[i], Doc: c.SourceType})
	}
	for _, k := range t.Key {
		keyIDs = append(keyIDs, k+1)
	}
	return iceberg.NewSchemaWithIdentifiers(0, keyIDs, fields...), nil
}

// indexDir is where a table's key index lives.
func (w *tableWriter) indexDir() string {
	return filepath.Join(w.s.cfg.IndexDir, identString(w.cfg.Ident))
}

// initUpsert prepares a table just created: the sort order by key, and an
// empty key index.
func (w *tableWriter) initUpsert(ctx context.Context) error {
	keys, err := keyFields(w.tbl.Schema())
	if err != nil {
		return err
	}
	fields := make([]table.SortField, len(keys))
	for i, k := range keys {
		fields[i] = table.SortField{SourceIDs: []int{k.ID}, Transform: iceberg.IdentityTransform{}, Direction: table.SortASC, NullOrder: table.NullsFirst}
	}
	order, err := table.NewSortOrder(1, fields)
	if err != nil {
		return err
	}
	tx := w.tbl.NewTransaction()
	if err := tx.ReplaceSortOrder(order); err != nil {
		return fmt.Errorf("iceberg: sort order of %s: %w", identString(w.cfg.Ident), err)
	}
	if w.tbl, err = tx.Commit(ctx); err != nil {
		return fmt.Errorf("iceberg: sort order of %s: %w", identString(w.cfg.Ident), err)
	}
	if err := w.openIndex(); err != nil {
		return err
	}
	w.up.keys = keys
	b := w.up.idx.newBatch()
	b.clear()
	return b.apply(0)
}

func (w *tableWriter) openIndex() error {
	if w.up == nil {
		w.up = &upsert{data: map[string]iceberg.DataFile{}, dvs: map[string]iceberg.DataFile{}}
	}
	if w.up.idx != nil {
		return nil
	}
	if err := os.MkdirAll(w.indexDir(), 0o755); err != nil {
		return err
	}
	idx, err := openIndex(w.indexDir(), w.s.tune.index)
	if err != nil {
		return err
	}
	w.up.idx = idx
	return nil
}

// loadUpsert opens the key index and brings it to the table's current
// snapshot: nothing to do when it is tagged with it; a retag when the
// snapshots since its tag changed no rows; a rebuild otherwise (a crash
// between a commit and the index update).
func (w *tableWriter) loadUpsert(ctx context.Context) error {
	if err := w.openIndex(); err != nil {
		return err
	}
	if w.tbl == nil {
		if w.up.idx.snapshot != 0 || len(w.up.idx.files()) > 0 {
			b := w.up.idx.newBatch()
			b.clear()
			return b.apply(0)
		}
		return nil
	}
	keys, err := keyFields(w.tbl.Schema())
	if err != nil {
		return err
	}
	w.up.keys = keys
	if err := w.up.loadFiles(ctx, w.tbl); err != nil {
		return err
	}
	if err := w.resolveIntent(ctx); err != nil {
		return err
	}
	cur := int64(0)
	if s := w.tbl.CurrentSnapshot(); s != nil {
		cur = s.SnapshotID
	}
	if w.up.idx.snapshot == cur {
		return nil
	}
	if cur == 0 {
		// No current snapshot (its main branch removed by another
		// engine: rollback.go): the table holds no rows.
		b := w.up.idx.newBatch()
		b.clear()
		return b.apply(0)
	}
	if rowNeutralSince(w.tbl, w.up.idx.snapshot) {
		b := w.up.idx.newBatch()
		return b.apply(cur)
	}
	w.logger.Warn("key index is behind the table; rebuilding it from the table",
		"index_snapshot", w.up.idx.snapshot, "table_snapshot", cur)
	return w.rebuildIndex(ctx)
}

// rowNeutralSince reports whether every snapshot after since (walking back
// from the current one) is marked as leaving the rows unchanged (cdcd's
// offsets-only commits carry cdcd.rows=0). Anything else — a data commit
// whose index update was lost, or another writer's snapshot — is not.
func rowNeutralSince(tbl *table.Table, since int64) bool {
	meta := tbl.Metadata()
	for snap := tbl.CurrentSnapshot(); snap != nil; {
		if snap.SnapshotID == since {
			return true
		}
		if !rowNeutral(snap) {
			return false
		}
		if snap.ParentSnapshotID == nil {
			return since == 0
		}
		snap = meta.SnapshotByID(*snap.ParentSnapshotID)
	}
	return since == 0
}

// rebuildIndex re-derives the key index from the table: the key columns of
// every live data file, minus deleted positions. The index is emptied and
// tagged rebuildingTag first, then filled in batches of rebuildBatchRows
// keys and tagged with the current snapshot at the end, so memory does not
// grow with the table (one batch holds about 30 bytes a key). A crash in
// between leaves a tag no snapshot has, and the next start rebuilds again.
func (w *tableWriter) rebuildIndex(ctx context.Context) error {
	started := time.Now()
	b := w.up.idx.newBatch()
	b.clear()
	if err := b.apply(rebuildingTag); err != nil {
		return err
	}
	b = w.up.idx.newBatch()
	b.bulk = true
	var rows, inBatch int64
	err := w.up.liveKeys(ctx, w.tbl, func(k []byte, loc location) error {
		b.set(k, loc)
		rows++
		if inBatch++; inBatch == cmp.Or(w.s.tune.rebuildBatch, rebuildBatchRows) {
			if err := b.apply(rebuildingTag); err != nil {
				return err
			}
			b, inBatch = w.up.idx.newBatch(), 0
			b.bulk = true
		}
		return nil
	})
	if err != nil {
		b.discard()
		return err
	}
	if err := b.apply(w.tbl.CurrentSnapshot().SnapshotID); err != nil {
		return err
	}
	w.logger.Info("key index rebuilt", "rows", rows, "files", len(w.up.data), "took", time.Since(started).Round(time.Millisecond))
	return nil
}

// rebuildingTag tags an index being rebuilt: no snapshot has this id.
const rebuildingTag = -1

// rebuildBatchRows is how many keys a rebuild writes at a time, unless
// the sink's tuning says otherwise.
const rebuildBatchRows = 1 << 18

// liveKeys calls fn with the key and location of every live row of tbl's
// current snapshot (u's files, loaded from it): the key columns of every
// live data file, minus deleted positions. fn must copy the key to keep it.
func (u *upsert) liveKeys(ctx context.Context, tbl *table.Table, fn func(key []byte, loc location) error) error {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	deleted, err := u.deletedPositions(ctx, fs, tbl)
	if err != nil {
		return err
	}
	var k []byte
	kv := make([]any, len(u.keys))
	for path := range u.data {
		pf, closeFn, err := parquetFile(fs, path)
		if err != nil {
			return err
		}
		gone := deleted[path]
		err = readColumns(pf, u.keys, func(pos int64, vals []any) error {
			if gone != nil && gone.Contains(uint64(pos)) {
				return nil
			}
			for i, v := range vals {
				nv, err := keyValue(u.keys[i].Type, v)
				if err != nil {
					return err
				}
				kv[i] = nv
			}
			if k, err = encodeKey(k[:0], kv); err != nil {
				return err
			}
			return fn(k, location{file: path, pos: pos})
		})
		closeFn()
		if err != nil {
			return fmt.Errorf("iceberg: read the keys of %s: %w", path, err)
		}
	}
	return nil
}

// deletedPositions returns each live data file's deleted row positions.
func (u *upsert) deletedPositions(ctx context.Context, fs icebergio.IO, tbl *table.Table) (map[string]*dv.RoaringPositionBitmap, error) {
	out := map[string]*dv.RoaringPositionBitmap{}
	for ref, d := range u.dvs {
		bm, err := dv.ReadDV(fs, d)
		if err != nil {
			return nil, fmt.Errorf("iceberg: read deletion vector of %s: %w", ref, err)
		}
		out[ref] = bm
	}
	pathField, _ := iceberg.PositionalDeleteSchema.FindFieldByName("file_path")
	posField, _ := iceberg.PositionalDeleteSchema.FindFieldByName("pos")
	for _, d := range u.posDeletes {
		pf, closeFn, err := parquetFile(fs, d.FilePath())
		if err != nil {
			return nil, err
		}
		err = readColumns(pf, []iceberg.NestedField{pathField, posField}, func(_ int64, vals []any) error {
			path, _ := vals[0].(string)
			pos, _ := vals[1].(int64)
			bm := out[path]
			if bm == nil {
				bm = dv.NewRoaringPositionBitmap()
				out[path] = bm
			}
			bm.Set(uint64(pos))
			return nil
		})
		closeFn()
		if err != nil {
			return nil, fmt.Errorf("iceberg: read position deletes %s: %w", d.FilePath(), err)
		}
	}
	return out, nil
}

// rowNeutral reports whether a snapshot left the rows as they were: cdcd's
// offsets-only commits, and manifest rewrites (REPLACE snapshots that add
// and remove no files).
func rowNeutral(snap *table.Snapshot) bool {
	if snap.Summary == nil {
		return false
	}
	if snap.Summary.Properties[PropRows] == "0" {
		return true
	}
	if snap.Summary.Operation != table.OpReplace {
		return false
	}
	for _, k := range []string{"added-data-files", "deleted-data-files", "added-delete-files", "removed-delete-files"} {
		if v, ok := snap.Summary.Properties[k]; ok && v != "0" {
			return false
		}
	}
	return true
}

// attemptUpsert stages the buffer and commits it as one snapshot (see
// producer.go).
func (w *tableWriter) attemptUpsert(ctx context.Context, props iceberg.Properties) error {
	p, props, err := w.stagePlan(ctx, props)
	if err != nil {
		return err
	}
	w.pending = p
	if err := w.produce(ctx, p, props); err != nil {
		return err
	}
	if err := w.adoptUpsert(ctx); err != nil {
		return errNotAdopted{err}
	}
	return nil
}

// stagePlan stages the buffer against w.tbl; props, returned, gain the
// rows marker when the plan changes no rows.
func (w *tableWriter) stagePlan(ctx context.Context, props iceberg.Properties) (*plan, iceberg.Properties, error) {
	if w.up.keys == nil {
		keys, err := keyFields(w.tbl.Schema())
		if err != nil {
			return nil, props, err
		}
		w.up.keys = keys
	}
	p, err := w.up.stage(ctx, w, w.tbl, w.buf)
	if err != nil {
		return nil, props, err
	}
	if p.empty() {
		props = withRowsMarker(props)
	}
	return p, props, nil
}

// adoptUpsert makes the landed commit's plan current: the index (tagged
// with the new snapshot) and the live files.
func (w *tableWriter) adoptUpsert(context.Context) error {
	p := w.pending
	w.pending = nil
	if p == nil {
		return nil
	}
	for _, df := range p.added {
		w.up.data[df.FilePath()] = df
	}
	if w.up.dvCache == nil {
		w.up.dvCache = map[string]cachedDV{}
	}
	for ref, d := range p.newDVs {
		w.up.dvs[ref] = d
		if bm := p.bitmaps[ref]; bm != nil {
			w.up.dvCache[ref] = cachedDV{puffin: d.FilePath(), bm: bm}
		}
	}
	if !p.empty() && w.tbl.Metadata().Version() < 3 {
		w.up.posDeletes = append(w.up.posDeletes, p.deletes...)
	}
	p.batch.bulk = w.catchingUp // a backlog: a load's keys are ingested (index_ingest.go)
	return p.batch.apply(w.tbl.CurrentSnapshot().SnapshotID)
}

// dropPending discards a staged plan that did not land.
func (w *tableWriter) dropPending() {
	if w.pending != nil {
		w.pending.batch.discard()
		w.pending = nil
	}
}

// commitTruncate empties the table once every partition has reached the
// same truncate: the changes buffered before it are moot, and one commit
// removes every data and delete file and records next (past the truncate).
// A table not created yet is created empty from the truncate's version
// (shape), so its offsets move past the truncate although no change may
// ever follow it.
func (w *tableWriter) commitTruncate(ctx context.Context, next []int64, shape *schema.Table) error {
	clear(w.buf)
	w.buf, w.bufBytes, w.others = w.buf[:0], 0, 0
	if w.tbl == nil {
		if shape == nil {
			return badData(fmt.Errorf("iceberg: %s: a truncate without a table version", w.cfg.Topic))
		}
		if err := w.createTable(ctx, shape); err != nil {
			return err
		}
	}
	attempt := func(ctx context.Context, props iceberg.Properties) error { return w.attemptTruncate(ctx, props, shape) }
	if err := w.commitWith(ctx, next, attempt); err != nil {
		return err
	}
	w.logger.Info("table truncated", "offsets", encodeOffsets(next))
	return nil
}

// attemptTruncate empties the table, keyed from then on by shape's
// primary key when it changed (rekey.go).
func (w *tableWriter) attemptTruncate(ctx context.Context, props iceberg.Properties, shape *schema.Table) error {
	tx := w.tbl.NewTransaction()
	rekeyed, err := w.rekey(tx, shape)
	if err != nil {
		return err
	}
	data := make([]iceberg.DataFile, 0, len(w.up.data))
	for _, df := range w.up.data {
		data = append(data, df)
	}
	dels := make([]iceberg.DataFile, 0, len(w.up.dvs)+len(w.up.posDeletes))
	for _, d := range w.up.dvs {
		dels = append(dels, d)
	}
	dels = append(dels, w.up.posDeletes...)
	rows := len(data) > 0
	if !rows {
		if err := tx.AddFiles(ctx, nil, withRowsMarker(props), false); err != nil {
			return err
		}
	} else if err := tx.ReplaceFiles(ctx, data, nil, dels, props); err != nil {
		return err
	}
	if err := w.finishData(ctx, tx, rows); err != nil {
		return err
	}
	w.up.data, w.up.dvs, w.up.posDeletes = map[string]iceberg.DataFile{}, map[string]iceberg.DataFile{}, nil
	w.up.dvCache = map[string]cachedDV{}
	if rekeyed {
		keys, err := keyFields(w.tbl.Schema())
		if err != nil {
			return errNotAdopted{err}
		}
		w.up.keys = keys
		w.logger.Warn("the table is keyed by the source's new primary key from this truncate on", "identifier_fields", strings.Join(fieldNames(keys), ","))
	}
	b := w.up.idx.newBatch()
	b.clear()
	if err := b.apply(w.tbl.CurrentSnapshot().SnapshotID); err != nil {
		return errNotAdopted{err}
	}
	return nil
}

// withRowsMarker marks a commit that changes no rows.
func withRowsMarker(props iceberg.Properties) iceberg.Properties {
	out := make(iceberg.Properties, len(props)+1)
	for k, v := range props {
		out[k] = v
	}
	out[PropRows] = "0"
	return out
}
