package iceberg

import (
	"context"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/schema"
)

// tableMode is what differs between the two kinds of table: a mirror of
// the source (upsert: upsert.go, upsert_commit.go) and a changelog
// (append: changelog.go). The table's loop and its commit path are the
// same for both and call the mode at these points only.
type tableMode interface {
	// name is the mode's name (ModeUpsert, ModeAppend), in the table's
	// cdcd.mode property.
	name() string
	// schema is the Iceberg schema of a table created for t.
	schema(t *schema.Table) (*iceberg.Schema, error)
	// created prepares a table just created (w.tbl).
	created(ctx context.Context) error
	// loaded brings the mode's state up to the table as loaded (w.tbl,
	// nil if it does not exist yet).
	loaded(ctx context.Context) error
	// cut is how far, per partition, the buffer can be committed now.
	cut() ([]int64, error)
	// attempt stages the buffer and commits it with props.
	attempt(ctx context.Context, props iceberg.Properties) error
	// landed adopts an attempt that reported an error but landed.
	landed(ctx context.Context) error
	// void drops what an attempt that did not land staged; tbl is the
	// table reloaded.
	void(ctx context.Context, tbl *table.Table) error
	// barriers says a truncate stops its partition until every partition
	// has reached it, and then empties the table (commitTruncate); else it
	// is a changelog row, written from partition 0's copy.
	barriers() bool
}

// mode is the table's mode, as configured.
func (w *tableWriter) mode() tableMode {
	if w.s.cfg.Mode == ModeUpsert {
		return upsertMode{w}
	}
	return changelogMode{w}
}

// upsertMode mirrors the source: see upsert.go.
type upsertMode struct{ w *tableWriter }

func (m upsertMode) name() string                                    { return ModeUpsert }
func (m upsertMode) schema(t *schema.Table) (*iceberg.Schema, error) { return upsertSchema(t) }
func (m upsertMode) created(ctx context.Context) error               { return m.w.initUpsert(ctx) }
func (m upsertMode) cut() ([]int64, error)                           { return m.w.commitCut() }
func (m upsertMode) landed(ctx context.Context) error                { return m.w.adoptUpsert(ctx) }
func (m upsertMode) barriers() bool                                  { return true }

func (m upsertMode) attempt(ctx context.Context, props iceberg.Properties) error {
	return m.w.attemptUpsert(ctx, props)
}

func (m upsertMode) loaded(ctx context.Context) error {
	w := m.w
	if w.resumed {
		w.seen = make([][]byte, w.partitions) // the table's offsets are not this log's
	} else {
		w.loadSeen(ctx)
	}
	return w.loadUpsert(ctx)
}

func (m upsertMode) void(ctx context.Context, tbl *table.Table) error {
	m.w.dropPending()
	if err := m.w.up.loadFiles(ctx, tbl); err != nil {
		return err
	}
	// Another engine's commit (a compaction by Spark or Trino rewrites
	// the rows into new files): the index points at files that are gone.
	// Rebuilt here, as at a start, rather than failing the next attempt.
	cur := tbl.CurrentSnapshot()
	if cur == nil || cur.SnapshotID == m.w.up.idx.snapshot || rowNeutralSince(tbl, m.w.up.idx.snapshot) {
		return nil
	}
	op := ""
	if cur.Summary != nil {
		op = string(cur.Summary.Operation)
	}
	m.w.logger.Warn("another writer committed to the table (cdcd is to be its only writer): rebuilding the key index from the table",
		"snapshot", cur.SnapshotID, "operation", op, "index_snapshot", m.w.up.idx.snapshot,
		"what_to_do", "if it changed rows (not a compaction), run cdcd reconcile on the table: the mirror follows the source from here on")
	return m.w.rebuildIndex(ctx)
}

// changelogMode appends every change as a row: see changelog.go.
type changelogMode struct{ w *tableWriter }

func (m changelogMode) name() string                                    { return ModeAppend }
func (m changelogMode) schema(t *schema.Table) (*iceberg.Schema, error) { return changelogSchema(t) }
func (m changelogMode) created(context.Context) error                   { return nil }
func (m changelogMode) loaded(context.Context) error                    { return nil }
func (m changelogMode) cut() ([]int64, error)                           { return m.w.next, nil }
func (m changelogMode) landed(context.Context) error                    { return nil }
func (m changelogMode) void(context.Context, *table.Table) error        { return nil }
func (m changelogMode) barriers() bool                                  { return false }

func (m changelogMode) attempt(ctx context.Context, props iceberg.Properties) error {
	return m.w.attemptChangelog(ctx, props)
}
