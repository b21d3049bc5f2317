package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/cdcd-dev/cdcd/source"
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

// load runs or resumes the initial load. snapshot names the snapshot the
// slot exported; empty when resuming, which then reads the remaining
// chunks in a fresh snapshot (see the package doc for why that is safe).
func (r *Reader) load(ctx context.Context, conn *pgx.Conn, types *typeResolver, tables []*catalogTable,
	st *sourceState, snapshot string, e source.Emitter) error {
	lp := st.Load
	coord, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return fmt.Errorf("postgres: snapshot connection: %w", err)
	}
	defer coord.Close(context.WithoutCancel(ctx))
	tx, err := coord.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("postgres: snapshot transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if snapshot != "" {
		if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+snapshot+"'"); err != nil {
			return fmt.Errorf("postgres: import snapshot %s: %w", snapshot, err)
		}
	} else {
		if err := tx.QueryRow(ctx, "SELECT pg_export_snapshot()").Scan(&snapshot); err != nil {
			return fmt.Errorf("postgres: export snapshot: %w", err)
		}
		r.logger.Info("resuming the initial load in a new snapshot", "chunks_done", lp.Done, "rows_done", lp.Rows)
	}

	var plan loadPlan
	if lp.Planned {
		if _, err := loadJSON(ctx, r.state, r.planKey(), &plan); err != nil {
			return err
		}
	}
	changed := false
	for _, t := range tables {
		if !plan.has(t.qualified()) {
			tp, err := planTable(ctx, tx, t, r.cfg.SnapshotChunkRows)
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
		if err := saveJSON(ctx, r.state, r.planKey(), &plan); err != nil {
			return err
		}
		if !lp.Planned {
			lp.Planned, lp.Started = true, time.Now()
		}
		if err := saveJSON(ctx, r.state, r.stateKey(), st); err != nil {
			return err
		}
	}

	byName := map[string]*catalogTable{}
	rels := map[string]*relation{}
	for _, t := range tables {
		rel, err := catalogRelation(ctx, types, t)
		if err != nil {
			return err
		}
		rel.table = r.known.intern(rel.table)
		byName[t.qualified()], rels[t.qualified()] = t, rel
	}
	r.stats.SnapshotRows.Store(lp.Rows)
	r.stats.SnapshotEstimate.Store(lp.Estimate)
	r.stats.snapshotBase.Store(lp.Rows)
	r.stats.snapshotStarted.Store(time.Now().UnixNano())
	began := time.Now()
	if err := r.copyChunks(ctx, &plan, byName, rels, snapshot, st, e); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: end snapshot transaction: %w", err)
	}
	r.logger.Info("initial load done", "rows", lp.Rows, "chunks", plan.chunks(), "elapsed", time.Since(began).Round(time.Millisecond))
	st.SnapshotDone, st.Load = true, nil
	if err := saveJSON(ctx, r.state, r.stateKey(), st); err != nil {
		return err
	}
	return r.state.Save(ctx, r.planKey(), nil)
}

func (p *loadPlan) has(table string) bool {
	for _, t := range p.Tables {
		if t.Table == table {
			return true
		}
	}
	return false
}

// chunkBatches carries one chunk's rows from its worker to the emitter.
type chunkBatches chan []source.Change

// copyChunks copies the chunks not yet done with SnapshotWorkers
// connections in parallel, each in the snapshot, and emits them strictly
// in plan order, saving progress after each chunk. At most a few batches
// per worker wait in memory.
func (r *Reader) copyChunks(ctx context.Context, plan *loadPlan, tables map[string]*catalogTable, rels map[string]*relation,
	snapshot string, st *sourceState, e source.Emitter) error {
	lp := st.Load
	total := plan.chunks()
	if lp.Done >= total {
		return nil
	}
	outs := make([]chunkBatches, total)
	for i := lp.Done; i < total; i++ {
		outs[i] = make(chunkBatches, 2)
	}
	next := make(chan int)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(next)
		for i := lp.Done; i < total; i++ {
			select {
			case next <- i:
			case <-gctx.Done():
				return nil
			}
		}
		return nil
	})
	for w := 0; w < min(r.cfg.SnapshotWorkers, total-lp.Done); w++ {
		g.Go(func() error {
			return r.chunkWorker(gctx, plan, tables, rels, snapshot, lp.ConsistentPoint, lp.Started, next, outs)
		})
	}
	g.Go(func() error {
		for seq := lp.Done; seq < total; seq++ {
			if err := r.emitChunk(gctx, outs[seq], lp, e); err != nil {
				return err
			}
			lp.Done = seq + 1
			if err := saveJSON(gctx, r.state, r.stateKey(), st); err != nil {
				return err
			}
		}
		return nil
	})
	return g.Wait()
}

// emitChunk emits one chunk's batches as its worker delivers them.
func (r *Reader) emitChunk(ctx context.Context, out chunkBatches, lp *loadProgress, e source.Emitter) error {
	for {
		select {
		case batch, ok := <-out:
			if !ok {
				return nil // the whole chunk arrived
			}
			if err := e.Emit(ctx, batch); err != nil {
				return err
			}
			lp.Rows += int64(len(batch))
			r.stats.SnapshotRows.Store(lp.Rows)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// chunkWorker copies the chunks it takes from next, in the snapshot.
func (r *Reader) chunkWorker(ctx context.Context, plan *loadPlan, tables map[string]*catalogTable, rels map[string]*relation,
	snapshot string, cp uint64, started time.Time, next <-chan int, outs []chunkBatches) error {
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
		if err := r.copyChunk(ctx, conn, buildChunkQuery(t, rel, tp, i), rel, cp, seq, started, outs[seq]); err != nil {
			return fmt.Errorf("postgres: initial load of %s, chunk %d: %w", tp.Table, i, err)
		}
		close(outs[seq])
	}
	return nil
}

// copyChunk runs one chunk's COPY and sends its rows in batches.
func (r *Reader) copyChunk(ctx context.Context, conn *pgx.Conn, q chunkQuery, rel *relation, cp uint64, seq int,
	started time.Time, out chunkBatches) error {
	batch := make([]source.Change, 0, r.cfg.BatchMax)
	send := func() error {
		select {
		case out <- batch:
		case <-ctx.Done():
			return ctx.Err()
		}
		batch = make([]source.Change, 0, r.cfg.BatchMax)
		return nil
	}
	var key []byte
	p := &copyParser{row: func(fields [][]byte) error {
		row, err := decodeFields(rel, fields[:min(q.ncols, len(fields))])
		if err != nil {
			return err
		}
		key = key[:0]
		for _, part := range q.parts {
			if key, err = appendKeyPart(key, part, row, fields); err != nil {
				return err
			}
		}
		batch = append(batch, source.Change{
			Table: rel.table, Op: source.OpRead, After: row, Snapshot: true,
			Pos: snapshotPosition(cp, seq, key), LSN: cp, CommitTime: started,
		})
		if len(batch) >= r.cfg.BatchMax {
			return send()
		}
		return nil
	}}
	if _, err := conn.PgConn().CopyTo(ctx, p, q.sql); err != nil {
		return err
	}
	if err := p.finish(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return send()
	}
	return nil
}
