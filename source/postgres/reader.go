package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Config configures a Reader. Zero values take the documented defaults.
type Config struct {
	// DSN of the source database (libpq URL or key=value). Required.
	DSN string
	// Slot and Publication names. Required.
	Slot, Publication string
	// Tables to capture, "schema.table" (a bare name means public). At least one.
	Tables []string
	// Snapshot loads the tables' existing rows before streaming.
	Snapshot bool
	// SnapshotWorkers is how many chunks the initial load copies at once;
	// default GOMAXPROCS, at least 2 and at most 4. The load is bound by
	// cdcd's CPU (decoding and encoding), not by one COPY, so workers past
	// the cores add only the decoded rows of the chunks in flight to the
	// peak RSS (docs/internals.md has the measurement).
	SnapshotWorkers int
	// SnapshotChunkRows is the target number of rows per chunk of the
	// initial load (the unit of parallelism and of resumption); default
	// 20000, raised for tables of more than 200M rows so a plan has at most
	// about 10000 chunks each.
	SnapshotChunkRows int64
	// BatchMax is the most changes handed to the Emitter at once; default 8192.
	BatchMax int
	// BatchDelay is the longest a received change waits for more before it
	// is emitted; default 20ms.
	BatchDelay time.Duration
	// StatusInterval is how often the flushed position is reported to the
	// server when it does not ask (and at most how long a long replay goes
	// without a report), and how often the initial load saves its progress;
	// default 1s, far inside wal_sender_timeout (60s by default).
	StatusInterval time.Duration
	// HeartbeatInterval: when no change has arrived for this long, the
	// reader writes a logical decoding message (pg_logical_emit_message),
	// whose arrival lets it confirm the slot forward although the captured
	// tables are idle; otherwise the slot would hold back WAL written for
	// other tables. Default 10s; negative disables heartbeats.
	HeartbeatInterval time.Duration
	// SpillDir holds the changes of large in-progress transactions that
	// PostgreSQL streams before they commit; default
	// $TMPDIR/cdcd-spill-<slot>. Its files do not need to survive a restart.
	SpillDir string
	// trackStream (tests) hands every streamed batch to a tracking
	// Emitter without waiting, not only while a snapshot's chunks are in
	// flight (see streamer.flushBatch).
	trackStream bool
	// ReconnectMin and ReconnectMax bound the backoff between attempts to
	// reconnect after a lost connection or a server restart; defaults
	// 200ms and 30s.
	ReconnectMin, ReconnectMax time.Duration
	// PublicationCheckInterval is how often, while streaming, the reader
	// checks that the publication still publishes every captured table and
	// operation, and that no table was dropped or re-created
	// (pubcheck.go); default 10s.
	PublicationCheckInterval time.Duration
	// Messages lists prefixes of transactional logical decoding messages
	// (pg_logical_emit_message(true, prefix, content)) to deliver as
	// changes (source.Change.Message), in their place in their
	// transaction; the outbox relay asks for its prefix. Messages with
	// other prefixes are passed over.
	Messages []string
	// WaitReportInterval is how often the reader says what a slow step
	// waits for (the slot's creation waits for running transactions to
	// end), in the log and in Stats.Waiting; default 10s.
	WaitReportInterval time.Duration
	// KeepsDefault reports whether the destination gives the rows written
	// before column c existed c's Default (defaults.go); when it does not
	// (or is nil), a table a column is added to with a default is read
	// again.
	KeepsDefault func(c schema.Column) bool `json:"-"`
	// Incremental configures incremental snapshots (incremental_stream.go).
	Incremental IncrementalConfig
	// CatchUpLag is how far (WAL bytes) the stream must have been behind
	// the server's WAL end for its catch-up to be announced to a
	// source.CatchUpNotifier (caughtup.go); default 16 MiB.
	CatchUpLag int64
}

func (c *Config) defaults() {
	if c.SnapshotWorkers <= 0 {
		c.SnapshotWorkers = min(4, max(2, runtime.GOMAXPROCS(0)))
	}
	if c.SnapshotChunkRows <= 0 {
		c.SnapshotChunkRows = 20_000
	}
	if c.BatchMax <= 0 {
		c.BatchMax = 8192
	}
	if c.BatchDelay <= 0 {
		c.BatchDelay = 20 * time.Millisecond
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if c.SpillDir == "" {
		c.SpillDir = filepath.Join(os.TempDir(), "cdcd-spill-"+c.Slot)
	}
	if c.ReconnectMin <= 0 {
		c.ReconnectMin = 200 * time.Millisecond
	}
	if c.ReconnectMax <= 0 {
		c.ReconnectMax = 30 * time.Second
	}
	if c.PublicationCheckInterval <= 0 {
		c.PublicationCheckInterval = 10 * time.Second
	}
	if c.WaitReportInterval <= 0 {
		c.WaitReportInterval = 10 * time.Second
	}
	if c.CatchUpLag <= 0 {
		c.CatchUpLag = 16 << 20
	}
}

// State is durable key/value storage for the reader's own state (system
// identifier, slot, confirmed position, initial-load plan and progress).
// Save must be durable when it returns.
type State interface {
	Load(ctx context.Context, key string) ([]byte, error) // nil, nil when absent
	Save(ctx context.Context, key string, value []byte) error
}

// Stats are the reader's counters, safe to read while it runs.
type Stats struct {
	Events        atomic.Int64  // changes emitted by streaming
	SnapshotRows  atomic.Int64  // rows emitted by the initial load (all runs)
	Flushed       atomic.Uint64 // LSN last confirmed to the server
	Received      atomic.Uint64 // end of WAL received
	LastCommitted atomic.Int64  // unix ms of the newest emitted commit
	Streaming     atomic.Bool   // the initial load is done and the slot streams
	Reconnects    atomic.Int64  // sessions that ended in a retryable error
	Heartbeats    atomic.Int64  // heartbeat messages written
	SpilledBytes  atomic.Int64  // bytes in spill files of in-progress transactions
	StreamedTxns  atomic.Int64  // transactions received streamed (before their commit) and replayed
	// Waiting says what the reader waits for while a step takes long (the
	// slot's creation waiting for running transactions); nil otherwise.
	Waiting atomic.Pointer[string]
	// Initial load progress: rows estimated in all tables, and when this
	// run's load started with how many rows already done.
	SnapshotEstimate atomic.Int64
	snapshotStarted  atomic.Int64 // unix nanos
	snapshotBase     atomic.Int64
}

// SnapshotProgress is the initial load's progress.
type SnapshotProgress struct {
	Done, Estimated int64
	RowsPerSecond   float64       // since this run's load started
	ETA             time.Duration // 0 when unknown or done
}

// SnapshotProgress reports the initial load's progress.
func (s *Stats) SnapshotProgress() SnapshotProgress {
	p := SnapshotProgress{Done: s.SnapshotRows.Load(), Estimated: s.SnapshotEstimate.Load()}
	started := s.snapshotStarted.Load()
	if started == 0 {
		return p
	}
	if el := time.Since(time.Unix(0, started)).Seconds(); el > 0 {
		p.RowsPerSecond = float64(p.Done-s.snapshotBase.Load()) / el
	}
	if p.RowsPerSecond > 0 && p.Estimated > p.Done && !s.Streaming.Load() {
		p.ETA = time.Duration(float64(p.Estimated-p.Done) / p.RowsPerSecond * float64(time.Second))
	}
	return p
}

// Reader is a PostgreSQL source.
type Reader struct {
	cfg    Config
	state  State
	logger *slog.Logger
	stats  Stats
	known  known
	cols   map[string]*tableColumns // columnsOf: each table's record, nil when none
	// Per session: the database stores text unchecked (SQL_ASCII), and
	// the renderer of faulty values.
	sqlASCII bool
	render   *valueRenderer
	inc      *snapshot.Engine // incremental snapshots
	// chunkBufs recycles the incremental snapshots' chunk slices.
	chunkBufs *snapshot.Bufs
	// faultsLogged is the reason last logged per table that fails the
	// publication check (pubcheck.go), so a standing fault is logged once.
	faultsLogged map[string]string
}

var _ source.Source = (*Reader)(nil)

// New returns a Reader; nothing connects until Run.
func New(cfg Config, state State, logger *slog.Logger) *Reader {
	cfg.defaults()
	r := &Reader{cfg: cfg, state: state, logger: logger.With("source", "postgres", "slot", cfg.Slot), known: known{}, cols: map[string]*tableColumns{}}
	r.inc = newEngine(cfg, state, r.logger)
	r.chunkBufs = r.inc.ChunkBufs()
	return r
}

// Stats returns the live counters.
func (r *Reader) Stats() *Stats { return &r.stats }

func (r *Reader) stateKey() string { return "postgres/" + r.cfg.Slot }

// Run prepares publication and slot, loads the tables if configured, then
// streams until ctx ends or a terminal error. A lost connection (a server
// restart, a terminated walsender, a network failure) is not terminal: Run
// reconnects with backoff and restarts replication from the slot, and the
// Emitter drops what it already holds. Terminal errors are *SlotError,
// *PublicationError, *TableError, *ValueError and the Emitter's own.
func (r *Reader) Run(ctx context.Context, e source.Emitter) error {
	backoff := r.cfg.ReconnectMin
	failed := 0 // connection attempts in a row that failed (unreachable.go)
	for {
		began := time.Now()
		err := r.session(ctx, e)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retryable(err) {
			return err
		}
		if time.Since(began) > time.Minute {
			backoff = r.cfg.ReconnectMin
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		r.stats.Reconnects.Add(1)
		if failed = failed + 1; !isConnectError(err) {
			failed = 0
		}
		r.logRetry(err, failed, wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(2*backoff, r.cfg.ReconnectMax)
	}
}

func parseLSN(s string) (uint64, error) {
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		return 0, fmt.Errorf("postgres: bad LSN %q: %w", s, err)
	}
	return uint64(lsn), nil
}

// replicationDSN adds replication=database to a DSN.
func replicationDSN(dsn string) string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil || cfg.RuntimeParams["replication"] != "" {
		return dsn
	}
	if len(dsn) > 0 && (hasPrefix(dsn, "postgres://") || hasPrefix(dsn, "postgresql://")) {
		sep := "?"
		if containsByte(dsn, '?') {
			sep = "&"
		}
		return dsn + sep + "replication=database"
	}
	return dsn + " replication=database"
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

func containsByte(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}

// sendStatus reports lsn as written, flushed and applied.
func sendStatus(ctx context.Context, repl *pgconn.PgConn, lsn uint64) error {
	p := pglogrepl.LSN(lsn)
	err := pglogrepl.SendStandbyStatusUpdate(ctx, repl, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: p, WALFlushPosition: p, WALApplyPosition: p, ClientTime: time.Now(),
	})
	if err != nil {
		return &connError{fmt.Errorf("postgres: send standby status: %w", err)}
	}
	return nil
}

// errorFromBackend turns an ErrorResponse on the replication stream into an error.
func errorFromBackend(msg *pgproto3.ErrorResponse) error {
	return fmt.Errorf("postgres: replication stream: %w", pgconn.ErrorResponseToPgError(msg))
}
