package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Snapshots returns the incremental snapshot engine: Submit, Stop, Pause,
// Resume, Progress.
func (r *Reader) Snapshots() *snapshot.Engine { return r.inc }

func newEngine(cfg Config, state State, r *Reader) *snapshot.Engine {
	return snapshot.New(snapshot.Config{StateKey: "mysql/incremental", ChunkRows: cfg.ChunkRows,
		MaxRowsPerSecond: cfg.MaxRowsPerSecond}, state, r.logger)
}

// watermarkID is the pipeline's row in the watermark table.
func (r *Reader) watermarkID() string { return strconv.FormatUint(uint64(r.cfg.ServerID), 10) }

// Tables of the pipeline (State key "mysql/tables"): those captured from
// the start without a load (snapshot: never), and those whose snapshot is
// queued or done. A configured table not among them is new: a snapshot
// that replaces its contents is queued (unless snapshot: never), while the
// other tables stream on. A table dropped from the config is forgotten, so
// adding it back snapshots it again.
const tablesKey = "mysql/tables"

// queueTables loads the engine's state and queues the snapshots of tables
// new to the pipeline. newPipeline: no checkpoint exists yet, so the
// tables are recorded before it is (a pipeline whose first session ended
// after its checkpoint still loads every table).
func (r *Reader) queueTables(ctx context.Context, newPipeline bool) error {
	if err := r.inc.Load(ctx); err != nil {
		return err
	}
	var known []string
	raw, err := r.state.Load(ctx, tablesKey)
	if err != nil {
		return fmt.Errorf("mysql: load %s: %w", tablesKey, err)
	}
	if raw != nil {
		if err := json.Unmarshal(raw, &known); err != nil {
			return fmt.Errorf("mysql: stored %s is damaged: %v", tablesKey, err)
		}
	} else {
		// A pipeline from before tables were recorded captured its tables
		// without a load; a new one loads them all (unless snapshot: never).
		known = []string{}
		if !newPipeline || !r.cfg.Load {
			known = r.cfg.Tables
		}
		if err := r.saveTables(ctx, known); err != nil {
			return err
		}
	}
	origin := "added"
	if len(known) == 0 {
		origin = "initial"
	}
	var reqs []snapshot.Request
	for _, t := range r.cfg.Tables {
		if r.cfg.Load && !slices.Contains(known, t) && !r.inc.Queued(t) {
			reqs = append(reqs, snapshot.Request{Table: t, Replace: true, Origin: origin})
		}
	}
	if len(reqs) > 0 {
		if err := r.inc.Submit(ctx, reqs...); err != nil {
			return err
		}
	}
	var gone []string
	for _, p := range r.inc.Progress() {
		if p.Finished.IsZero() && !slices.Contains(r.cfg.Tables, p.Table) {
			gone = append(gone, p.Table)
		}
	}
	if len(gone) > 0 {
		if _, err := r.inc.Stop(ctx, gone...); err != nil {
			return err
		}
	}
	return r.saveTables(ctx, r.cfg.Tables)
}

func (r *Reader) saveTables(ctx context.Context, tables []string) error {
	raw, _ := json.Marshal(tables)
	if err := r.state.Save(ctx, tablesKey, raw); err != nil {
		return fmt.Errorf("mysql: save %s: %w", tablesKey, err)
	}
	return nil
}

// snapshotsPending reports whether a snapshot is queued or running.
func (r *Reader) snapshotsPending() bool {
	for _, p := range r.inc.Progress() {
		if p.Finished.IsZero() {
			return true
		}
	}
	return false
}

// incStream is the stream's side of incremental snapshots: the watermark
// table's rows, the windows, the engine's checkpoints. Its methods are
// called on the stream's goroutine; all are no-ops on nil.
type incStream struct {
	eng      *snapshot.Engine
	wmTable  string   // db.table of the watermark table; "" when not captured
	sigTable string   // db.table of the signal table; "" when none
	tables   []string // the pipeline's tables (a signal's data-collections)
	logger   *slog.Logger
	id       string     // the pipeline's row in it
	ro       *gtidMarks // read-only: watermarks at GTID positions
	resets   *resetPlacements
	// roOrd and roSeq number the read-only marks met after one transaction.
	roOrd uint64
	roSeq uint32

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	failed error // the engine's goroutine ended with it
}

// startIncremental starts the engine's goroutine on a pool of its own;
// close stops it. wmErr is why the watermark table is not captured (nil
// when it is); em is the stream's Emitter (snapshot.Engine.Run).
func (r *Reader) startIncremental(ctx context.Context, ci connInfo, flavor string, wmErr error, em source.Emitter) (*incStream, error) {
	db, err := ci.open()
	if err != nil {
		return nil, err
	}
	in := &incStream{eng: r.inc, id: r.watermarkID(), sigTable: r.cfg.SignalTable, tables: r.cfg.Tables, logger: r.logger}
	my := &myDatabase{db: db, flavor: flavor, wmErr: wmErr, dropped: r.dropped, ci: &ci, ddl: &r.ddl, bufs: r.chunkBufs}
	switch {
	case r.cfg.ReadOnly && flavor != FlavorMariaDB:
		if r.snapshotsPending() {
			db.Close()
			return nil, &PreconditionError{What: "read-only snapshots need MariaDB (its consistent snapshots name their binlog position); " +
				"this server is " + flavor, Fix: "set source.mysql.read_only: false and grant the watermark table, or snapshot: never"}
		}
	case r.cfg.ReadOnly:
		in.ro, in.resets = &gtidMarks{}, &resetPlacements{state: r.state}
		my.ro = &roState{marks: in.ro, resets: in.resets}
	case wmErr == nil && r.cfg.WatermarkTable != "":
		in.wmTable = r.cfg.WatermarkTable
		my.wm = &Watermarks{db: db, qn: r.cfg.WatermarkTable, id: in.id}
		dbName, name, _ := splitTable(r.cfg.WatermarkTable)
		my.wm.table = quoteIdent(dbName) + "." + quoteIdent(name)
	}
	if my.ro == nil && r.cfg.ReadOnly {
		my.wmErr = fmt.Errorf("read-only snapshots need MariaDB")
	}
	if flavor == FlavorMySQL && r.snapshotsPending() {
		if err := checkOrderedCommits(ctx, db); err != nil {
			db.Close()
			return nil, err
		}
	}
	var sdb snapshot.Database = my
	if my.ro == nil {
		sdb = &myParallel{my} // incremental_parallel.go
	}
	if err := r.inc.Prepare(ctx, sdb); err != nil {
		db.Close()
		return nil, in.wrap(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	in.cancel = cancel
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		defer db.Close()
		defer my.closeConns()
		err := r.inc.Run(wctx, sdb, em)
		if wctx.Err() == nil && err != nil {
			in.mu.Lock()
			in.failed = in.wrap(err)
			in.mu.Unlock()
		}
	}()
	return in, nil
}

// checkOrderedCommits refuses a MySQL server that may make transactions
// visible out of their binlog order (a chunk read after its low watermark
// could then miss a change streamed before it).
func checkOrderedCommits(ctx context.Context, db *sql.DB) error {
	v, err := globalVar(ctx, db, "binlog_order_commits")
	if err != nil {
		return err
	}
	if v != "ON" && v != "1" {
		return &PreconditionError{What: "binlog_order_commits is OFF: a snapshot's chunk could miss a change streamed before it",
			Fix: "SET PERSIST binlog_order_commits = ON"}
	}
	return nil
}

// wrap makes an engine error retryable (a new session) where it is.
func (in *incStream) wrap(err error) error {
	if retryable(err) {
		return &connError{err}
	}
	var pe *PreconditionError
	if errors.As(err, &pe) {
		return err
	}
	return fmt.Errorf("mysql: incremental snapshot: %w", err)
}

// close stops the engine's goroutine and waits for it.
func (in *incStream) close() {
	if in == nil {
		return
	}
	in.cancel()
	in.wg.Wait()
}

// err returns the engine goroutine's failure, if any.
func (in *incStream) err() error {
	if in == nil {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.failed
}

// watermark handles a row of a table version: true when it is the
// watermark table's (never emitted), with the changes the engine emits at
// it (a reset marker, a chunk's rows).
func (in *incStream) watermark(v *tableVersion, row []any, pos source.Position) (bool, []source.Change) {
	if !in.isWatermarkTable(v.qn) {
		return false, nil
	}
	c := source.Change{Table: v.table, After: row}
	mark, ok := watermarkOf(&c, in.id)
	if !ok {
		return true, nil // another pipeline's
	}
	return true, in.eng.Watermark(mark, pos)
}

// isWatermarkTable reports whether qn is the watermark table (never emitted).
func (in *incStream) isWatermarkTable(qn string) bool {
	return in != nil && in.wmTable != "" && qn == in.wmTable
}

// observe passes the changes batch[from:] through the engine (windows).
func (in *incStream) observe(batch []source.Change, from int) []source.Change {
	if in == nil {
		return batch
	}
	return in.eng.Observe(batch, from)
}

// checkpoint saves the snapshots' progress that is durable: everything
// emitted up to durable.
func (in *incStream) checkpoint(ctx context.Context, durable source.Position) error {
	if in == nil {
		return nil
	}
	return in.eng.Checkpoint(ctx, durable)
}
