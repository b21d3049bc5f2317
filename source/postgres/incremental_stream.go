package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// IncrementalConfig configures incremental snapshots (package
// source/snapshot). Zero values take the documented defaults.
type IncrementalConfig struct {
	// Load makes the initial load incremental: no exported snapshot is
	// held; every table is read by chunks while the slot streams.
	Load bool
	// LoadResets makes the (COPY) initial load begin each table with a
	// reset marker, so a sink resumes a table it no longer trusts there.
	LoadResets bool
	// ChunkRows is the most rows a chunk reads; default 8192.
	ChunkRows int
	// SplitRows is the smallest range chunk read in two halves at once (on
	// two connections, in one snapshot); default and negative: never
	// (range chunks are read Ahead at once instead).
	SplitRows int
	// Ahead is how many range chunks are read at once, each on a
	// connection of its own between watermarks of its own; default 2
	// (defaultAhead).
	Ahead int
	// SamplePercent is the share of a table's pages (TABLESAMPLE SYSTEM)
	// whose keys place the range chunks' ends; default (0): chosen from
	// the table's statistics, about ten pages a chunk, or every key read
	// through the index (exact ends) when that sample would be more than
	// 30% of the table or the table has more than 4·65,536 chunks.
	// Negative: always the index read.
	SamplePercent float64
	// MaxRowsPerSecond throttles a snapshot; 0 does not.
	MaxRowsPerSecond int
	// SignalTable ("schema.table") is a Debezium-compatible signal table
	// (columns id, type, data): rows inserted into it start, stop, pause
	// and resume snapshots. Empty: none.
	SignalTable string
}

// Snapshots returns the incremental snapshot engine: Submit, Stop, Pause,
// Resume, Progress.
func (r *Reader) Snapshots() *snapshot.Engine { return r.inc }

// defaultAhead is IncrementalConfig.Ahead's default: two chunks read at
// once, where the engine's default (MariaDB's) is three. Each reader is a
// backend process of its own, and a fresh backend's index scans touch
// every page of shared_buffers once, a page fault each in that process
// (the load's COPY reads through a small ring of buffers instead): on the
// benchmark's machine, where a fault cost about 13 CPU-µs, a third
// reader's 8,192 faults are about 0.1 s, and the first snapshot of a
// 1M-row table cost PostgreSQL a median 1.42 CPU-µs a row with three
// against 1.27 with two, for no gain in rate. Two readers against three, eight alternated
// pairs: incremental / initial load higher in six, median 0.85 against
// 0.79, and the snapshot's peak RSS lower (BENCHMARKS.md, "The
// incremental benchmark like for like (lead, session 21)"). MariaDB's
// readers are threads of one process, sharing its page tables.
const defaultAhead = 2

func newEngine(cfg Config, state State, logger *slog.Logger) *snapshot.Engine {
	return snapshot.New(snapshot.Config{StateKey: "postgres/" + cfg.Slot + "/incremental",
		ChunkRows: cfg.Incremental.ChunkRows, MaxRowsPerSecond: cfg.Incremental.MaxRowsPerSecond,
		Ahead: cmp.Or(cfg.Incremental.Ahead, defaultAhead)}, state, logger)
}

// incStream is the stream's side of incremental snapshots: watermarks,
// the windows, the signal table, the commits the consistency check needs.
// Its methods are called on the stream's goroutine; all are no-ops on nil.
type incStream struct {
	s      *streamer
	eng    *snapshot.Engine
	ring   *xidRing
	signal map[*schema.Table]bool // table versions: is it the signal table?
	// changed are the relations the transaction being decoded changed
	// rows of (touched), for the ring.
	changed []uint32

	// synced is when a chunk last had the batch flushed next (syncEvery).
	synced time.Time

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	failed error // the engine's goroutine ended with it
}

// startIncremental describes the queued tables and starts the engine's
// goroutine on a connection of its own; close stops it.
func (r *Reader) startIncremental(ctx context.Context, s *streamer) (*incStream, error) {
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return nil, &connError{fmt.Errorf("postgres: snapshot connection: %w", err)}
	}
	in := &incStream{s: s, eng: r.inc, ring: newXidRing(), signal: map[*schema.Table]bool{}}
	_, holds := s.emit.(source.Holder)
	db := &pgDatabase{r: r, conn: conn, types: newTypeResolver(conn), ring: in.ring, reuse: !holds}
	if err := r.inc.Prepare(ctx, db); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, in.wrap(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	in.cancel = cancel
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		defer conn.Close(context.WithoutCancel(ctx))
		defer db.close()
		err := r.inc.Run(wctx, db, s.emit)
		if wctx.Err() == nil && err != nil {
			in.mu.Lock()
			in.failed = in.wrap(err)
			in.mu.Unlock()
		}
	}()
	return in, nil
}

// wrap makes an engine error retryable (a new session) where it is.
func (in *incStream) wrap(err error) error {
	if retryable(err) {
		return &connError{err}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return fmt.Errorf("postgres: incremental snapshot: %w (grant the pipeline's role EXECUTE on pg_logical_emit_message "+
			"and SELECT on the table)", err)
	}
	return fmt.Errorf("postgres: incremental snapshot: %w", err)
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

// begin starts a transaction's record of the relations it changed.
func (in *incStream) begin() {
	if in != nil {
		in.changed = in.changed[:0]
	}
}

// touched records that the transaction being decoded changed rows of
// relation rel (a row change's or a truncate's relation id: the pg_class
// oid pgoutput names, a partition's own or, with publish_via_partition_root,
// its root's), whether or not the pipeline captures it.
func (in *incStream) touched(rel uint32) {
	if in == nil {
		return
	}
	if n := len(in.changed); n > 0 && in.changed[n-1] == rel || slices.Contains(in.changed, rel) {
		return
	}
	in.changed = append(in.changed, rel)
}

// committed records a transaction's commit for the consistency check,
// with the relations whose rows it changed (touched). One that changed no
// row (the chunks' own watermarks, each a transaction holding only a
// message the stream takes out; a transaction of other logical messages
// or DDL only) cannot make a chunk's read stale, and is not recorded. Each
// was recorded once, and three readers' watermarks a few milliseconds
// apart made chunks fail the check and be read again, with the chunks
// read after them (BENCHMARKS.md, session 19). The relations let a chunk
// ask only about its own table's (session 20).
func (in *incStream) committed(xid uint32, lsn uint64) {
	if in == nil {
		return
	}
	if len(in.changed) > 0 {
		in.ring.add(xid, lsn, in.changed)
	}
	in.changed = in.changed[:0]
}

// message handles a logical decoding message; true when it was a
// watermark (a message with its prefix).
func (in *incStream) message(ctx context.Context, m *pglogrepl.LogicalDecodingMessageV2) (bool, error) {
	if in == nil || m.Prefix != watermarkPrefix {
		return false, nil
	}
	slot, id, ok := strings.Cut(string(m.Content), " ")
	if !ok || slot != in.s.r.cfg.Slot {
		return true, nil // another pipeline's
	}
	s := in.s
	if !s.inTx {
		return true, nil // written transactional; never outside a transaction
	}
	lsn := s.tx.commitLSN
	rows := in.eng.Watermark(id, pgpos.New(lsn, 0))
	if len(rows) == 0 {
		return true, nil
	}
	t, err := s.r.version(ctx, rows[0].Table, nil, 0, nil)
	if err != nil {
		return true, err
	}
	for i := range rows {
		rows[i].Table, rows[i].LSN = t, lsn
	}
	if s.track != nil {
		return true, in.submitTracked(ctx, rows)
	}
	pipelined := len(rows) > 1
	rows, err = in.submit(ctx, rows)
	if err != nil {
		return true, err
	}
	pipelined = pipelined && len(rows) == 1
	// A chunk handed over whole is a batch of its own: flushed next (its
	// rows are in memory already; adding up their bytes cost 5% of a
	// snapshot's CPU). A pipelined one is not: its last row waits in the
	// batch for the next flush, whose Emit syncs everything submitted, so
	// the stream reads on to the next chunk's high watermark instead of
	// waiting for the log's sync after each chunk (see syncEvery).
	if now := time.Now(); !pipelined || now.Sub(in.synced) >= syncEvery {
		s.batchSize = max(s.batchSize, source.BatchBytes)
		in.synced = now
	}
	if len(s.batch) == 0 {
		s.batchAt = time.Now()
	}
	s.batch = append(s.batch, rows...)
	return true, nil
}

// syncEvery is how long pipelined chunks go at most without a flush
// forced after one. Each chunk forced its batch's flush once, and the
// stream waited for the log's sync there: under load (load average 9) 17
// ms a chunk, 40% of a snapshot's wall time, while the chunks behind it
// waited for the stream to meet their high watermarks. Now chunks that
// follow each other closely are submitted one behind the other (each
// submit hands the batch so far over too, so the batch holds one row and
// its BatchDelay starts afresh), and the batch is flushed when the stream
// has a BatchDelay without a chunk, or a chunk comes syncEvery after the
// last forced flush: what bounds how long the snapshot's progress (saved
// only once durable) and the slot's confirmed position wait.
const syncEvery = 200 * time.Millisecond

// submitTracked hands the batch so far and then a chunk's rows to an
// Emitter that tracks its pipeline (source.Tracker), without waiting for
// them to be durable: the stream reads on to the next chunk's high
// watermark while the log syncs. The position the rows wait for is the
// watermark's transaction's commit (commit), confirmable once the chunk's
// batch is durable; the batch so far waits for the transactions before
// it. The chunk's slices go back to be read into again.
func (in *incStream) submitTracked(ctx context.Context, rows []source.Change) error {
	s := in.s
	if len(s.batch) > 0 {
		if err := s.flushBatch(ctx); err != nil {
			return err
		}
	}
	if err := s.submit(ctx, rows, s.committed); err != nil {
		return err
	}
	s.r.chunkBufs.GiveBack(rows)
	return nil
}

// submit hands a chunk's rows but the last to an Emitter that pipelines
// (source.Pipeliner), behind the batch so far, without waiting for them to
// be durable: the stream goes on while the log syncs. The last row stays in
// the batch, so the watermark's transaction is confirmed only after the
// next flush's Emit, whose sync covers everything submitted before it. It
// returns what is left for the batch, and gives the chunk's slices back.
func (in *incStream) submit(ctx context.Context, rows []source.Change) ([]source.Change, error) {
	s := in.s
	p, ok := s.emit.(source.Pipeliner)
	if !ok || len(rows) < 2 {
		return rows, nil
	}
	if len(s.batch) > 0 {
		if err := p.Submit(ctx, s.batch); err != nil {
			return nil, err
		}
		s.r.stats.Events.Add(int64(len(s.batch)))
		clear(s.batch)
		s.batch, s.batchSize = s.batch[:0], 0
	}
	if err := p.Submit(ctx, rows[:len(rows)-1]); err != nil {
		return nil, err
	}
	// The chunk's slices and slab go back to be read into again; the row
	// the batch keeps takes a copy of its values.
	last := rows[len(rows)-1]
	last.After = snapshot.OwnValues(last.After)
	s.r.chunkBufs.GiveBack(rows)
	return []source.Change{last}, nil
}

// observe passes the changes batch[from:] through the engine (windows,
// unchanged values) after taking out the signal table's.
func (in *incStream) observe(batch []source.Change, from int) []source.Change {
	if in == nil {
		return batch
	}
	if in.s.r.cfg.Incremental.SignalTable != "" {
		batch = in.signals(batch, from)
	}
	return in.eng.Observe(batch, from)
}

// finishing reports whether a snapshot run waits only for its rows to be
// durable (snapshot.Engine.Finishing).
func (in *incStream) finishing() bool { return in != nil && in.eng.Finishing() }

// active reports whether a snapshot run exists (snapshot.Engine.Active).
func (in *incStream) active() bool { return in != nil && in.eng.Active() }

// checkpoint saves the snapshots' progress that is durable at lsn.
func (in *incStream) checkpoint(ctx context.Context, lsn uint64) error {
	if in == nil {
		return nil
	}
	return in.eng.Checkpoint(ctx, pgpos.New(lsn, 0))
}
