package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/cdcd-dev/cdcd/internal/failpoint"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// loadProgress is the initial load's durable progress, kept in the
// reader's state and saved after every chunk.
type loadProgress struct {
	// ConsistentPoint is the slot's consistent point: the rows are
	// positioned just before it, and streaming starts from it.
	ConsistentPoint uint64    `json:"consistent_point"`
	Started         time.Time `json:"started,omitzero"`
	// Planned: the plan is saved and rows may have been emitted; from
	// here on a stopped load is resumed, never started over.
	Planned bool `json:"planned,omitempty"`
	// Done chunks, in plan order, are wholly in the log.
	Done     int   `json:"chunks_done"`
	Rows     int64 `json:"rows"`
	Estimate int64 `json:"estimate"`
}

func (r *Reader) planKey() string { return r.stateKey() + "/load-plan" }

// load runs the initial load in snapshot, the one the slot exported
// (resumeLoad finishes a load a stop interrupted).
func (s *session) load(ctx context.Context, snapshot string) error {
	lp := s.st.Load
	coord, err := pgx.Connect(ctx, s.cfg.DSN)
	if err != nil {
		return fmt.Errorf("postgres: snapshot connection: %w", err)
	}
	defer coord.Close(context.WithoutCancel(ctx))
	tx, err := coord.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("postgres: snapshot transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+snapshot+"'"); err != nil {
		return fmt.Errorf("postgres: import snapshot %s: %w", snapshot, err)
	}
	// The rows' txId, as Debezium gives snapshot reads one: the snapshot's
	// next transaction id (what txid_current() would have returned in it,
	// without assigning one).
	var xid uint64
	if err := tx.QueryRow(ctx, "SELECT txid_snapshot_xmax(txid_current_snapshot())").Scan(&xid); err != nil {
		return fmt.Errorf("postgres: snapshot transaction id: %w", err)
	}
	if err := lockLoaded(ctx, tx, s.tables); err != nil {
		return err
	}
	// The tables as the snapshot sees them (the catalog read in its
	// transaction): check described them before the slot was created, and
	// a column added in between is in the snapshot's rows. The COPY names
	// the described columns, so it would leave that column's values out of
	// the mirror, without a word, until each row changed again.
	for i, t := range s.tables {
		ct, err := describeTable(ctx, tx, t.oid)
		if err != nil {
			return fmt.Errorf("postgres: describe %s in the load's snapshot: %w", t.qualified(), err)
		}
		if !slices.Equal(ct.columnNames(), t.columnNames()) {
			s.logger.Info("the table changed shape between its description and the load's snapshot: loading the snapshot's columns",
				"table", t.qualified(), "described", t.columnNames(), "snapshot", ct.columnNames())
		}
		// The COPY names the snapshot's columns in today's table (it is
		// parsed against the current catalog): a column dropped, renamed or
		// retyped since the snapshot (before the lock above) would fail it
		// or be read as another type. The catalog as it is now (s.conn, out
		// of the snapshot; nothing changes it while the lock is held) must
		// still have each of them.
		now, err := describeTable(ctx, s.conn, t.oid)
		if err != nil {
			return fmt.Errorf("postgres: describe %s for the load: %w", t.qualified(), err)
		}
		if col, ok := sameColumns(ct, now); !ok {
			return &connError{fmt.Errorf("postgres: column %q of %s was %w, so the load's COPY cannot read it: the load starts again on a new slot",
				col, t.qualified(), errChangedSinceSnapshot)}
		}
		s.tables[i] = ct
	}

	var plan loadPlan
	if lp.Planned {
		if _, err := loadJSON(ctx, s.state, s.planKey(), &plan); err != nil {
			return err
		}
	}
	changed := false
	for _, t := range s.tables {
		if !plan.has(t.qualified()) {
			tp, err := planTable(ctx, tx, t, s.cfg.SnapshotChunkRows)
			if err != nil {
				return err
			}
			plan.Tables = append(plan.Tables, tp)
			lp.Estimate += tp.Estimate
			changed = true
		}
	}
	if changed || !lp.Planned {
		// From here on rows may reach the log: the plan must be durable first.
		if err := saveJSON(ctx, s.state, s.planKey(), &plan); err != nil {
			return err
		}
		if !lp.Planned {
			lp.Planned, lp.Started = true, time.Now()
		}
		if err := saveJSON(ctx, s.state, s.stateKey(), s.st); err != nil {
			return err
		}
	}

	byName := map[string]*catalogTable{}
	rels := map[string]*relation{}
	for _, t := range s.tables {
		rel, err := catalogRelation(ctx, s.types, t)
		if err != nil {
			return err
		}
		if rel.table, err = s.version(ctx, rel.table, t.attnums(rel.table), 0, nil); err != nil {
			return err
		}
		rel.checkUTF8 = s.sqlASCII
		byName[t.qualified()], rels[t.qualified()] = t, rel
	}
	s.stats.SnapshotRows.Store(lp.Rows)
	s.stats.SnapshotEstimate.Store(lp.Estimate)
	s.stats.snapshotBase.Store(lp.Rows)
	s.stats.snapshotStarted.Store(time.Now().UnixNano())
	began := time.Now()
	if err := s.copyChunks(ctx, &plan, byName, rels, snapshot, xid, s.st, s.emit); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: end snapshot transaction: %w", err)
	}
	s.logger.Info("initial load done", "rows", lp.Rows, "chunks", plan.chunks(), "elapsed", time.Since(began).Round(time.Millisecond))
	s.st.SnapshotDone, s.st.Load = true, nil
	if err := saveJSON(ctx, s.state, s.stateKey(), s.st); err != nil {
		return err
	}
	return s.state.Save(ctx, s.planKey(), nil)
}

// resumeLoad finishes an initial load a stop interrupted. Its exported
// snapshot died with its connection, and the stream replays every change
// since the consistent point, so the tables the load had not wholly put
// in the log get incremental snapshots (package source/snapshot), read in
// step with the stream. The tables wholly loaded stream on. A table whose
// first chunks are durable goes on after them: its run reads the keys
// after the greatest key below the first chunk not durable (Request.After;
// the rows up to it are in the log as of the load's snapshot, and the
// stream replays their changes since), and drops a replayed change whose
// unchanged TOASTed value the sink has no row for, reading its key later,
// as a replacing run does. A table with no durable chunk gets a replacing
// run, which begins with a reset marker. Reading the remaining chunks in a
// fresh snapshot instead, positioned before the stream, gave rows newer
// than the changes replayed after them: an update whose unchanged TOASTed
// value the sink takes from the row, for a row that snapshot no longer
// held, left it nothing to take the value from (the table paused).
//
// The runs are saved before the load is marked done: a stop in between
// finds them queued and does not ask again.
func (s *session) resumeLoad(ctx context.Context) error {
	lp := s.st.Load
	var plan loadPlan
	if _, err := loadJSON(ctx, s.state, s.planKey(), &plan); err != nil {
		return err
	}
	durable := map[string]int{} // chunks of the table in the log
	plans := map[string]tablePlan{}
	seq := 0
	for _, tp := range plan.Tables {
		n := len(tp.Bounds) + 1
		durable[tp.Table], plans[tp.Table] = min(max(lp.Done-seq, 0), n), tp
		seq += n
	}
	var reqs []snapshot.Request
	var tables []string
	for _, t := range s.tables {
		q := t.qualified()
		tp, planned := plans[q]
		if planned && durable[q] == len(tp.Bounds)+1 || s.inc.Queued(q) {
			continue
		}
		req := snapshot.Request{Table: q, Replace: true, Origin: "load-resumed"}
		if d := durable[q]; d > 0 {
			after, err := lastKeyBelow(ctx, s.conn, t, tp.Bounds[d-1])
			if err != nil {
				return err
			}
			if after != nil {
				req.Replace, req.After = false, after
				s.logger.Info("the initial load of a table goes on after its durable chunks", "table", q, "after_key", []string(after), "below", tp.Bounds[d-1])
			}
		}
		reqs = append(reqs, req)
		tables = append(tables, q)
	}
	s.logger.Warn("resuming the initial load: the tables it had not wholly loaded are snapshotted again, incrementally, while the stream goes on",
		"chunks_done", lp.Done, "rows_done", lp.Rows, "tables", tables)
	if len(reqs) > 0 {
		if err := s.inc.Submit(ctx, reqs...); err != nil {
			return err
		}
	}
	s.st.SnapshotDone, s.st.Load = true, nil
	if err := saveJSON(ctx, s.state, s.stateKey(), s.st); err != nil {
		return err
	}
	return s.state.Save(ctx, s.planKey(), nil)
}

// lastKeyBelow returns the greatest key of t below bound (a load plan's,
// compared in the key's own order as the load's chunks were), as text;
// nil when there is none.
func lastKeyBelow(ctx context.Context, conn *pgx.Conn, t *catalogTable, bound []string) (snapshot.Key, error) {
	keys, sel, lits, desc := make([]string, len(t.key)), make([]string, len(t.key)), make([]string, len(t.key)), make([]string, len(t.key))
	for i, k := range t.key {
		keys[i] = tableAlias + "." + pgx.Identifier{k}.Sanitize() // never the output column of that name (text)
		sel[i], desc[i] = keys[i]+"::text", keys[i]+" DESC"
		lits[i] = quoteLiteral(bound[i]) + "::" + t.column(k).typeName
	}
	sql := "SELECT " + strings.Join(sel, ", ") + " FROM " + t.from() + " AS " + tableAlias + " WHERE (" + strings.Join(keys, ", ") + ") < (" +
		strings.Join(lits, ", ") + ") ORDER BY " + strings.Join(desc, ", ") + " LIMIT 1"
	key := make(snapshot.Key, len(t.key))
	ptrs := make([]any, len(key))
	for i := range key {
		ptrs[i] = &key[i]
	}
	switch err := conn.QueryRow(ctx, sql).Scan(ptrs...); {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("postgres: where the initial load of %s stopped: %w", t.qualified(), err)
	}
	return key, nil
}

func (p *loadPlan) has(table string) bool {
	for _, t := range p.Tables {
		if t.Table == table {
			return true
		}
	}
	return false
}

// loadBatch is the most rows the load hands the Emitter at once: up to
// twice BatchMax, since nothing waits for a load batch's acknowledgement
// and fewer, larger appends sync the log less often; and a chunk of the
// planned size (SnapshotChunkRows) cut into batches of even size. Every
// batch's buffer (its changes and values, about 330 bytes a row of the
// benchmark's 8 columns) is made for loadBatch rows, and a load holds about
// seven of them (two batches for each chunk in flight, and the one held
// back). A chunk of 20,000 rows went as 16,384 rows and 3,616 in two
// buffers of 16,384 (5.3 MB each, 37 MB of a load's peak heap of 113 MB);
// now it goes as two of 10,000: as many appends, buffers 39% smaller.
func (r *Reader) loadBatch() int {
	most, chunk := 2*r.cfg.BatchMax, int(r.cfg.SnapshotChunkRows)
	if chunk <= 0 {
		return most
	}
	batches := (chunk + most - 1) / most
	return (chunk + batches - 1) / batches
}

// chunkBatches carries one chunk's rows from its worker to the emitter.
type chunkBatches chan *loadBuf

// loadBuf is a load batch, the slice its rows' values are cut from and the
// slab its numbers and texts are boxed from. Once the Emitter has taken a
// batch (it keeps nothing of it after Emit or Submit returns) all three go
// back to the load's free list for another batch, which saves two large
// slices a batch, the slab's chunks (about 150 bytes a row of the
// benchmark's table: a seventh of what a load allocated), their zeroing and
// the collector work they pace. The slab is the buffer's own, so a value of
// one batch never shares a chunk with another batch's. The positions are
// not recycled: an Emitter may keep them (its newest positions, headers of
// records still being appended).
type loadBuf struct {
	changes []source.Change
	values  []any
	slab    *pgdecode.Slab
}

// loadFree is a load's free list of buffers; a buffered channel, not a
// sync.Pool, which every collection empties (the load collects often).
type loadFree struct {
	ch chan *loadBuf
	// reuse: the buffers' slabs are reusable. Not for an Emitter that
	// delivers some changes after Emit returned (source.Holder: the outbox
	// relay's queued webhooks), whose events may keep a text of a row.
	reuse bool
}

// newLoadFree returns a free list of up to n buffers for batches emitted
// to e.
func newLoadFree(n int, e source.Emitter) loadFree {
	_, holds := e.(source.Holder)
	return loadFree{ch: make(chan *loadBuf, n), reuse: !holds}
}

// get returns an empty buffer for batches of n rows of cols values.
func (f loadFree) get(n, cols int) *loadBuf {
	select {
	case b := <-f.ch:
		if cap(b.changes) >= n && len(b.values) >= n*cols {
			b.slab.Reset()
			return b
		}
	default:
	}
	slab := &pgdecode.Slab{}
	if f.reuse {
		slab = pgdecode.NewReusableSlab()
	}
	return &loadBuf{changes: make([]source.Change, 0, n), values: make([]any, n*cols), slab: slab}
}

// put recycles b, or drops it when the list is full. Not cleared (that
// would cost the zeroing saved): what its changes and values refer to stays
// reachable until the next batch overwrites it.
func (f loadFree) put(b *loadBuf) {
	b.changes = b.changes[:0]
	select {
	case f.ch <- b:
	default:
	}
}

// copyChunks copies the chunks not yet done with SnapshotWorkers
// connections in parallel, each in the snapshot, and emits them strictly
// in plan order. Workers run ahead of the emitter by workers+2 chunks at
// most, which bounds memory (about that many chunks of decoded rows) while
// the emitter rarely waits. Progress is saved every StatusInterval and at
// the end: a resumed load re-reads the chunks since the last save,
// and the Emitter's dedupe drops what the log already holds.
func (r *Reader) copyChunks(ctx context.Context, plan *loadPlan, tables map[string]*catalogTable, rels map[string]*relation,
	snapshot string, xid uint64, st *sourceState, e source.Emitter) error {
	lp := st.Load
	total := plan.chunks()
	if lp.Done >= total {
		return nil
	}
	workers := min(r.cfg.SnapshotWorkers, total-lp.Done)
	// Room for a whole chunk of the planned size (twice, for a chunk the
	// table's growth made larger; a larger one makes its worker wait).
	perChunk := 2*int(r.cfg.SnapshotChunkRows)/r.loadBatch() + 2
	outs := make([]chunkBatches, total)
	for i := lp.Done; i < total; i++ {
		outs[i] = make(chunkBatches, perChunk)
	}
	// Room for the buffers in flight: chunks handed out, two batches each.
	free := newLoadFree(2*(workers+1), e)
	next := make(chan int)
	// Chunks handed out and not yet emitted: one a worker may start while
	// the emitter still takes the oldest. More only holds decoded rows in
	// memory (the emitter, not the workers, is the slower side).
	inflight := make(chan struct{}, workers+1)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(next)
		for i := lp.Done; i < total; i++ {
			select {
			case inflight <- struct{}{}:
			case <-gctx.Done():
				return nil
			}
			select {
			case next <- i:
			case <-gctx.Done():
				return nil
			}
		}
		return nil
	})
	// An Emitter that encodes ahead gets each batch on its worker: the
	// Avro encoding then runs on the workers, in parallel, instead of in
	// the emitter's one goroutine under its lock.
	prep, _ := e.(source.Preparer)
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			return r.chunkWorker(gctx, plan, tables, rels, snapshot, lp.ConsistentPoint, lp.Started, next, outs, free, prep)
		})
	}
	g.Go(func() error {
		// An Emitter that pipelines gets the next batch while the last one
		// syncs; progress is saved only for what Sync says is durable.
		emit, sync := e.Emit, func(context.Context) error { return nil }
		if p, ok := e.(source.Pipeliner); ok {
			emit, sync = p.Submit, p.Sync
		}
		le := &loadEmitter{emit: emit, free: free, xid: xid, first: lp.Done == 0, stats: &r.stats}
		if lp.Done > 0 {
			if tp, _ := plan.chunk(lp.Done - 1); tp != nil {
				le.table = tp.Table // a resumed table goes on: its first row was emitted before
			}
		}
		saved := time.Now()
		for seq := lp.Done; seq < total; seq++ {
			tp, i := plan.chunk(seq)
			if i == 0 {
				if err := r.loadReset(gctx, rels[tp.Table], lp.ConsistentPoint, seq, lp.Started, emit); err != nil {
					return err
				}
			}
			if err := r.emitChunk(gctx, outs[seq], le, seq, tp.Table); err != nil {
				return err
			}
			outs[seq] = nil
			<-inflight
			failpoint.Hit("source.load-chunk-emitted")
			if seq+1 == total {
				if err := le.flush(gctx, true, true); err != nil {
					return err
				}
			}
			if time.Since(saved) >= r.cfg.StatusInterval || seq+1 == total {
				if err := sync(gctx); err != nil {
					return err
				}
				lp.Done, lp.Rows = le.done(seq+1), lp.Rows+le.emittedRows()
				if err := saveJSON(gctx, r.state, r.stateKey(), st); err != nil {
					return err
				}
				if lp.Done > 0 && seq+1 < total {
					failpoint.Hit("source.load-progress-saved") // durable chunks, more to load
				}
				saved = time.Now()
			}
		}
		return nil
	})
	return g.Wait()
}

// emitChunk hands one chunk's batches to le as its worker delivers them.
func (r *Reader) emitChunk(ctx context.Context, out chunkBatches, le *loadEmitter, seq int, table string) error {
	for {
		select {
		case buf, ok := <-out:
			if !ok {
				return nil // the whole chunk arrived
			}
			if err := le.take(ctx, buf, seq, table); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// chunkWorker copies the chunks it takes from next, in the snapshot.
func (r *Reader) chunkWorker(ctx context.Context, plan *loadPlan, tables map[string]*catalogTable, rels map[string]*relation,
	snapshot string, cp uint64, started time.Time, next <-chan int, outs []chunkBatches, free loadFree, prep source.Preparer) error {
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return fmt.Errorf("postgres: snapshot worker connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("postgres: snapshot worker transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+snapshot+"'"); err != nil {
		return fmt.Errorf("postgres: import snapshot %s: %w", snapshot, err)
	}
	if err := lockForWorker(ctx, tx, tables); err != nil {
		return err
	}
	for seq := range next {
		tp, i := plan.chunk(seq)
		t, rel := tables[tp.Table], rels[tp.Table]
		if t == nil {
			// A table planned in an earlier run and no longer configured.
			close(outs[seq])
			continue
		}
		// A failed chunk's channel stays open: only a whole chunk is closed,
		// so the emitter never takes a failed one for done.
		if err := r.copyChunk(ctx, conn, buildChunkQuery(t, rel, tp, i), rel, cp, seq, started, outs[seq], free, prep); err != nil {
			return fmt.Errorf("postgres: initial load of %s, chunk %d: %w", tp.Table, i, err)
		}
		close(outs[seq])
	}
	return nil
}

// copyChunk runs one chunk's COPY and sends its rows in batches, each
// prepared by prep (when not nil) first. The rows and positions of a batch
// are cut from one allocation each.
func (r *Reader) copyChunk(ctx context.Context, conn *pgx.Conn, q chunkQuery, rel *relation, cp uint64, seq int,
	started time.Time, out chunkBatches, free loadFree, prep source.Preparer) error {
	n := len(rel.types)
	var (
		buf    *loadBuf
		batch  []source.Change
		size   int            // the batch's field bytes
		values []any          // the batch's rows, n values each
		arena  []byte         // the batch's positions
		scalar *pgdecode.Slab // the batch's numbers and texts
	)
	prefix := pgpos.New(cp-1, uint32(seq))
	// A buffer is taken when a row needs one, not after each send: a chunk
	// ends with a send, and a buffer taken then went unused to the
	// collector — one 4 MB allocation a chunk, most of the load's.
	send := func() error {
		buf.changes, size = batch, 0
		if prep != nil {
			prep.Prepare(batch)
		}
		select {
		case out <- buf:
		case <-ctx.Done():
			return ctx.Err()
		}
		buf = nil
		return nil
	}
	p := &pgdecode.CopyParser{Row: func(fields [][]byte) error {
		if buf == nil {
			buf = free.get(r.loadBatch(), n)
			batch, values, scalar = buf.changes, buf.values, buf.slab
			arena = make([]byte, 0, r.loadBatch()*(len(prefix)+8*len(q.parts)+4))
		}
		i := len(batch)
		row := values[i*n : (i+1)*n : (i+1)*n]
		var fault *source.Fault
		if err := decodeFieldsInto(rel, fields[:min(q.ncols, len(fields))], row, scalar); err != nil {
			ve := asValueError(err)
			if ve == nil {
				return err
			}
			// The load goes on; the emitter pauses the table at this row.
			fault = r.fault(ctx, rel, ve)
			r.logger.Warn("a row of the initial load holds a value cdcd cannot carry; its table pauses", "table", ve.Table,
				"column", ve.Column, "err", ve.Err)
		}
		start := len(arena)
		arena = append(arena, prefix...)
		var err error
		for _, part := range q.parts {
			if arena, err = appendKeyPart(arena, part, row, fields); err != nil {
				return err
			}
		}
		batch = append(batch, source.Change{
			Table: rel.table, Op: source.OpRead, After: row, Snapshot: true,
			Pos: source.Position(arena[start:len(arena):len(arena)]), LSN: cp, CommitTime: started, Fault: fault,
		})
		for _, f := range fields {
			size += len(f)
		}
		if len(batch) >= r.loadBatch() || size >= source.BatchBytes {
			return send()
		}
		return nil
	}}
	if _, err := conn.PgConn().CopyTo(ctx, p, q.sql); err != nil {
		return err
	}
	if err := p.Finish(); err != nil {
		return err
	}
	if buf != nil {
		return send()
	}
	return nil
}

// errRewritten: a table was rewritten after the load's snapshot was taken.
var errRewritten = errors.New("rewritten after the load's snapshot was taken")

// errChangedSinceSnapshot: a column of the load's snapshot is gone or of
// another type now.
var errChangedSinceSnapshot = errors.New("dropped, renamed or retyped after the load's snapshot was taken")

// sameColumns reports whether every column of snap is in now with the same
// type; else the first that is not.
func sameColumns(snap, now *catalogTable) (string, bool) {
	for _, c := range snap.columns {
		cur := now.column(c.name)
		if cur.name != c.name || cur.oid != c.oid || cur.typmod != c.typmod {
			return c.name, false
		}
	}
	return "", true
}

// lockForWorker takes a chunk worker's ACCESS SHARE locks on the load's
// tables before its first COPY, NOWAIT. The load's own transaction holds
// them (lockLoaded), so DDL on a table (ACCESS EXCLUSIVE) waits for the
// load; a worker whose COPY then asked for the lock would queue behind
// that DDL, and the load would wait for its worker: a deadlock through
// cdcd that the server cannot see (the crash suite's ALTER TABLEs hung a
// load so). Taken first and at once, the worker never queues; taken while
// DDL already waits, it fails at once, and the load starts again after
// the DDL (nothing of a load is acknowledged before it is durable).
func lockForWorker(ctx context.Context, tx pgx.Tx, tables map[string]*catalogTable) error {
	if len(tables) == 0 {
		return nil
	}
	idents := make([]string, 0, len(tables))
	for _, t := range tables {
		idents = append(idents, t.ident())
	}
	slices.Sort(idents)
	if _, err := tx.Exec(ctx, "LOCK TABLE "+strings.Join(idents, ", ")+" IN ACCESS SHARE MODE NOWAIT"); err != nil {
		err = fmt.Errorf("postgres: a snapshot worker could not lock the tables (DDL waits for the load's lock?): %w", err)
		if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "55P03" {
			return &connError{err} // the load starts again, after the DDL
		}
		return err
	}
	return nil
}

// lockLoaded takes ACCESS SHARE locks on the tables in the load's
// transaction, so that no table-rewriting DDL (ALTER TABLE that changes a
// column's type, VACUUM FULL, CLUSTER) commits while the load reads them,
// and checks that none was rewritten since the slot exported the snapshot:
// a rewrite is not MVCC-safe, and an older snapshot sees the rewritten
// table empty (a load would have copied no row of it, and the stream sends
// none of its rows). A table rewritten in between fails the load before
// anything was emitted: the next session creates the slot again and loads
// from its new snapshot (prepareSlot).
func lockLoaded(ctx context.Context, tx pgx.Tx, tables []*catalogTable) error {
	if len(tables) == 0 {
		return nil
	}
	idents := make([]string, len(tables))
	oids := make([]uint32, len(tables))
	for i, t := range tables {
		idents[i], oids[i] = t.ident(), t.oid
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+strings.Join(idents, ", ")+" IN ACCESS SHARE MODE"); err != nil {
		err = fmt.Errorf("postgres: lock the tables for the load: %w", err)
		if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "40P01" {
			// A deadlock with DDL that locks several of the tables: the
			// server gave up this side; the load starts again.
			return &connError{err}
		}
		return err
	}
	// The snapshot's pg_class against the current file of each table and
	// of each partition under it (as the snapshot knows them).
	rows, err := tx.Query(ctx, `WITH RECURSIVE tree(oid, top) AS (
		SELECT oid, oid FROM pg_class WHERE oid = ANY($1)
		UNION ALL SELECT i.inhrelid, t.top FROM pg_inherits i JOIN tree t ON i.inhparent = t.oid)
	  SELECT t.top, c.relname, c.relfilenode, pg_relation_filenode(c.oid)
	  FROM tree t JOIN pg_class c ON c.oid = t.oid WHERE c.relkind = 'r'`, oids)
	if err != nil {
		return fmt.Errorf("postgres: check the tables for the load: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var top, then uint32
		var name string
		var now *uint32
		if err := rows.Scan(&top, &name, &then, &now); err != nil {
			return err
		}
		if now == nil || *now != then {
			for _, t := range tables {
				if t.oid == top {
					name = t.qualified()
				}
			}
			// Retried (connError) as a session that lost its connection is.
			return &connError{fmt.Errorf("postgres: table %s was %w (ALTER TABLE ... TYPE, VACUUM FULL or CLUSTER), so the snapshot sees it empty: "+
				"the load starts again on a new slot", name, errRewritten)}
		}
	}
	return rows.Err()
}
