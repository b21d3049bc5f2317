package bench

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/internal/dbproc"
	"github.com/cdcd-dev/cdcd/sink/iceberg"
)

// tableState is what the benchmark sees of the Iceberg table: its current
// snapshot as the catalog serves it.
type tableState struct {
	snapshotID int64
	// rows is total-records minus total-position-deletes of the snapshot
	// summary: the live rows of an upsert table.
	rows int64
	// lsn is the commit LSN of cdcd.source-position, the newest source
	// change the table holds (0: none): where its transaction's commit
	// record starts.
	lsn uint64
	// offsets is cdcd.offsets: the next log offset per partition the
	// table holds; consumed is their sum, the records the table has
	// taken in (the log's offsets start at 0 and nothing is cleaned up
	// during a run).
	offsets  []int64
	consumed int64
	// seen is when the benchmark first saw this snapshot.
	seen time.Time
}

// watcher polls the catalog for the table's current snapshot.
type watcher struct {
	cat   catalog.Catalog
	ident table.Identifier
	last  tableState
	// loc is the metadata file last read, when the catalog names it
	// without loading the table (metadataLocator): a poll that finds it
	// unchanged reads nothing more.
	loc string
}

// metadataLocator is a catalog that can name a table's current metadata
// file in one read (the SQL catalog's MetadataLocation); ok false: not
// for this table.
type metadataLocator interface {
	MetadataLocation(ctx context.Context, ident table.Identifier) (loc string, ok bool, err error)
}

func openWatcher(ctx context.Context, cfg iceberg.CatalogConfig, ident table.Identifier) (*watcher, error) {
	cat, err := iceberg.OpenCatalog(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &watcher{cat: cat, ident: ident}, nil
}

func (w *watcher) close() {
	if c, ok := w.cat.(interface{ Close() error }); ok {
		_ = c.Close()
	}
}

// poll reads the table's current snapshot; a table that does not exist
// yet is the zero state.
//
// The benchmark polls (every 100 ms, the latency phase every 50) while the
// daemon it measures runs on the same two cores. iceberg-go's LoadTable
// parses the whole metadata file, which grows a snapshot a commit: 11 ms a
// poll at 230 snapshots (a 257 KB file, the end of a full-size MariaDB
// stream), about 0.34 CPU-s of the benchmark's own during a full-size
// PostgreSQL load — CPU the daemon did not get, where the raw limits it is
// compared with ran alone. So a poll first asks the catalog which file is
// current (one row); an unchanged name ends the poll, and a new local
// file is read for what the state needs alone (readState: the current
// snapshot's id, parent and summary; 2 ms at 230 snapshots). Anything
// else loads the table as before. (The throughput phases polled every
// 200 ms while every poll loaded the table.)
func (w *watcher) poll(ctx context.Context) (tableState, error) {
	if l, ok := w.cat.(metadataLocator); ok {
		loc, ok, err := l.MetadataLocation(ctx, w.ident)
		switch {
		case err != nil:
			return w.last, err
		case ok && loc == "":
			return tableState{}, nil
		case ok && loc == w.loc:
			return w.last, nil
		case ok && strings.HasPrefix(loc, "file://"):
			data, err := os.ReadFile(strings.TrimPrefix(loc, "file://"))
			if err != nil {
				return w.last, err
			}
			if snap, byID, ok := readState(data); ok {
				w.loc = loc
				return w.observe(snap, byID), nil
			}
		}
	}
	tbl, err := w.cat.LoadTable(ctx, w.ident)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return tableState{}, nil
	}
	if err != nil {
		return w.last, err
	}
	w.loc = tbl.MetadataLocation()
	return w.observe(tbl.CurrentSnapshot(), tbl.Metadata().SnapshotByID), nil
}

// observe makes snap (nil: none yet) the state last seen.
func (w *watcher) observe(snap *table.Snapshot, byID func(int64) *table.Snapshot) tableState {
	if snap == nil {
		return tableState{}
	}
	if snap.SnapshotID == w.last.snapshotID {
		return w.last
	}
	st, ok := stateOf(snap, byID)
	if !ok { // no ancestor left to say
		st.offsets, st.consumed, st.lsn = w.last.offsets, w.last.consumed, w.last.lsn
	}
	st.seen = time.Now()
	w.last = st
	return st
}

// leanMetadata is what readState decodes of a metadata file; everything
// else (schemas, specs, logs, properties) is skipped by the decoder, and
// summaries are decoded only for the snapshots asked for.
type leanMetadata struct {
	Current   *int64 `json:"current-snapshot-id"`
	Snapshots []struct {
		ID      int64           `json:"snapshot-id"`
		Parent  *int64          `json:"parent-snapshot-id"`
		Summary json.RawMessage `json:"summary"`
	} `json:"snapshots"`
}

// readState reads a metadata file's current snapshot (nil: none) and a
// lookup of its snapshots by id, as far as stateOf reads them; ok false
// when the file does not decode so (the caller loads the table instead).
func readState(data []byte) (cur *table.Snapshot, byID func(int64) *table.Snapshot, ok bool) {
	var m leanMetadata
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, nil, false
	}
	at := make(map[int64]int, len(m.Snapshots))
	for i, s := range m.Snapshots {
		at[s.ID] = i
	}
	byID = func(id int64) *table.Snapshot {
		i, found := at[id]
		if !found {
			return nil
		}
		s := m.Snapshots[i]
		snap := &table.Snapshot{SnapshotID: s.ID, ParentSnapshotID: s.Parent}
		if len(s.Summary) > 0 {
			var sum table.Summary
			if json.Unmarshal(s.Summary, &sum) != nil {
				return nil
			}
			snap.Summary = &sum
		}
		return snap
	}
	if m.Current == nil || *m.Current == -1 {
		return nil, byID, true
	}
	if cur = byID(*m.Current); cur == nil {
		return nil, nil, false
	}
	return cur, byID, true
}

// stateOf is what snapshot snap says of the table; byID finds its
// ancestors. A maintenance commit (compaction, manifest rewrite) carries
// neither offsets nor a source position: the table holds what the newest
// ancestor that carries them held. Not the last state polled: the writer's
// commit before the maintenance one may never have been polled, and its
// offsets would be missed for good (a stream phase then waited out its
// whole timeout on a table that held every record), or its position read
// as none (a stream phase failed with every record consumed, "source
// position 0"). ok is false when no ancestor carries offsets.
func stateOf(snap *table.Snapshot, byID func(int64) *table.Snapshot) (st tableState, ok bool) {
	st.snapshotID = snap.SnapshotID
	if snap.Summary == nil {
		return st, false
	}
	p := snap.Summary.Properties
	recs, _ := strconv.ParseInt(p["total-records"], 10, 64)
	dels, _ := strconv.ParseInt(p["total-position-deletes"], 10, 64)
	st.rows = recs - dels
	at := snap
	for at != nil && at.Summary != nil && at.Summary.Properties[iceberg.PropOffsets] == "" && at.ParentSnapshotID != nil {
		at = byID(*at.ParentSnapshotID)
	}
	if at == nil || at.Summary == nil || at.Summary.Properties[iceberg.PropOffsets] == "" {
		return st, false
	}
	if pos, err := hex.DecodeString(at.Summary.Properties[iceberg.PropSourcePosition]); err == nil && len(pos) >= 8 {
		st.lsn = binary.BigEndian.Uint64(pos)
	}
	var offs map[string]int64
	if err := json.Unmarshal([]byte(at.Summary.Properties[iceberg.PropOffsets]), &offs); err != nil {
		return st, true
	}
	for k, v := range offs {
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || i > 1<<16 {
			continue
		}
		for len(st.offsets) <= i {
			st.offsets = append(st.offsets, 0)
		}
		st.offsets[i] = v
		st.consumed += v
	}
	return st, true
}

// waitFor polls every interval until done holds for the table's state,
// the child exits or ctx ends. Catalog errors (the writer holding the
// SQLite file) are retried.
func (w *watcher) waitFor(ctx context.Context, interval time.Duration, child *child, done func(tableState) bool, onSnapshot func(tableState)) (tableState, error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var prev int64
	var lastErr error
	for {
		st, err := w.poll(ctx)
		switch {
		case err != nil:
			lastErr = err
		case st.snapshotID != prev:
			prev = st.snapshotID
			if onSnapshot != nil {
				onSnapshot(st)
			}
		}
		if err == nil && done(st) {
			return st, nil
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return st, fmt.Errorf("%w (last catalog error: %v)", ctx.Err(), lastErr)
			}
			return st, ctx.Err()
		case <-child.proc.Done():
			return st, fmt.Errorf("bench: cdcd exited early (%v); the end of its log:\n%s", child.proc.Err(), dbproc.Tail(child.logPath, 20))
		case <-t.C:
		}
	}
}

// scanCount counts the table's live rows with iceberg-go's scan (deletion
// vectors applied), reading only the key column.
func (w *watcher) scanCount(ctx context.Context, key string) (int64, error) {
	tbl, err := w.cat.LoadTable(ctx, w.ident)
	if err != nil {
		return 0, err
	}
	_, recs, err := tbl.Scan(table.WithSelectedFields(key)).ToArrowRecords(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for rec, err := range recs {
		if err != nil {
			return n, err
		}
		n += rec.NumRows()
		rec.Release()
	}
	return n, nil
}

// scanIDs returns the table's live ids (diagnostics after a mismatch).
func (w *watcher) scanIDs(ctx context.Context) (map[int64]int, error) {
	tbl, err := w.cat.LoadTable(ctx, w.ident)
	if err != nil {
		return nil, err
	}
	_, recs, err := tbl.Scan(table.WithSelectedFields("id")).ToArrowRecords(ctx)
	if err != nil {
		return nil, err
	}
	ids := map[int64]int{}
	for rec, err := range recs {
		if err != nil {
			return ids, err
		}
		col, ok := rec.Column(0).(*array.Int64)
		if !ok {
			rec.Release()
			return ids, fmt.Errorf("bench: id column is %s", rec.Column(0).DataType())
		}
		for i := 0; i < col.Len(); i++ {
			ids[col.Value(i)]++
		}
		rec.Release()
	}
	return ids, nil
}
