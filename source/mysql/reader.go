package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Config configures a Reader. Zero values take the documented defaults.
type Config struct {
	// DSN of the server: mysql://user:password@host:3306/db (a
	// go-sql-driver DSN, user:password@tcp(host:3306)/db, is read too).
	// Required.
	DSN string
	// ServerID is the replica id the reader registers with; unique among
	// the server's replicas. Required (the daemon derives one from the
	// pipeline name).
	ServerID uint32
	// Flavor is FlavorMySQL or FlavorMariaDB; default: detected from the
	// server's version. A configured flavor the server does not have is
	// refused.
	Flavor string
	// Tables to capture, "database.table". At least one.
	Tables []string
	// WatermarkTable, "database.table", is the watermark table of
	// incremental snapshots (see Watermarks): created when missing, its
	// rows are read from the binlog and handed to the snapshot engine,
	// never emitted. Empty: no snapshots.
	WatermarkTable string
	// SignalTable, "database.table", is a Debezium-compatible signal table
	// (signal.go): its inserted rows start, stop, pause and resume
	// snapshots; never emitted. Empty: none.
	SignalTable string
	// ReadOnly makes snapshots write nothing to the source: watermarks are
	// GTID positions of consistent snapshots (MariaDB only; readonly.go),
	// and WatermarkTable is not used.
	ReadOnly bool
	// Load makes a new pipeline snapshot every table, and a running one
	// every table added to Tables, while the binlog streams (incremental,
	// lock-free); without it they are captured from now on.
	Load bool
	// ChunkRows is the most rows a snapshot's chunk reads; default 8192.
	ChunkRows int
	// MaxRowsPerSecond throttles a snapshot; 0 does not.
	MaxRowsPerSecond int
	// BatchMax is the most changes handed to the Emitter at once; default 8192.
	BatchMax int
	// BatchDelay is the longest a received change waits for more before it
	// is emitted; default 20ms.
	BatchDelay time.Duration
	// CheckpointInterval is how often the GTID set of the last transaction
	// durable in the log is saved in the State; default 1s.
	CheckpointInterval time.Duration
	// HeartbeatInterval is the binlog heartbeat period the server is asked
	// for: an idle server sends a heartbeat event this often, and a read
	// that waits three times as long is a dead connection. Default 10s.
	HeartbeatInterval time.Duration
	// KeepsDefault reports whether the destination gives the rows written
	// before a column was added the column's Default (schema.Column.Default);
	// where it does not, a table whose rows hold the default of a column
	// added to it is read again (defaults.go). Nil: never.
	KeepsDefault func(c schema.Column) bool
	// ReconnectMin and ReconnectMax bound the backoff between attempts to
	// reconnect after a lost connection or a server restart; defaults
	// 200ms and 30s.
	ReconnectMin, ReconnectMax time.Duration
	// CatchUpLag is how many bytes of binlog the stream must have been
	// behind the server's end for its catch-up to be announced to a
	// source.CatchUpNotifier (caughtup.go); default 16 MiB.
	CatchUpLag int64
}

func (c *Config) defaults() {
	if c.BatchMax <= 0 {
		c.BatchMax = 8192
	}
	if c.BatchDelay <= 0 {
		c.BatchDelay = 20 * time.Millisecond
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if c.ReconnectMin <= 0 {
		c.ReconnectMin = 200 * time.Millisecond
	}
	if c.ReconnectMax <= 0 {
		c.ReconnectMax = 30 * time.Second
	}
	if c.CatchUpLag <= 0 {
		c.CatchUpLag = 16 << 20
	}
}

// State is durable key/value storage for the reader's checkpoint. Save
// must be durable when it returns.
type State interface {
	Load(ctx context.Context, key string) ([]byte, error) // nil, nil when absent
	Save(ctx context.Context, key string, value []byte) error
}

// checkpoint is what the reader saves: the GTID set of every transaction
// durable in the log and the ordinal of the last of them. Frozen JSON
// field names.
type checkpoint struct {
	Flavor  string `json:"flavor"`
	GTID    string `json:"gtid"`
	Ordinal uint64 `json:"ordinal"`
	// XA names, by xid, the captured tables each prepared XA transaction
	// read up to GTID changed while it is not resolved (xa.go).
	XA map[string][]string `json:"xa,omitempty"`
}

// Stats are the reader's counters, safe to read while it runs.
type Stats struct {
	Events        atomic.Int64  // changes emitted
	Transactions  atomic.Int64  // transactions seen (captured or not)
	Ordinal       atomic.Uint64 // ordinal of the last checkpointed transaction
	LastCommitted atomic.Int64  // unix ms of the newest emitted commit
	Streaming     atomic.Bool   // connected and reading the binlog
	Reconnects    atomic.Int64  // sessions that ended in a retryable error
	BinlogPos     atomic.Uint32 // position in BinlogFile after the last event
	mu            sync.Mutex
	gtid          string // checkpointed GTID set
	binlogFile    string
}

// GTID returns the GTID set of the last checkpoint.
func (s *Stats) GTID() string { s.mu.Lock(); defer s.mu.Unlock(); return s.gtid }

// BinlogFile returns the binlog file being read.
func (s *Stats) BinlogFile() string { s.mu.Lock(); defer s.mu.Unlock(); return s.binlogFile }

func (s *Stats) setGTID(g string)       { s.mu.Lock(); s.gtid = g; s.mu.Unlock() }
func (s *Stats) setBinlogFile(f string) { s.mu.Lock(); s.binlogFile = f; s.mu.Unlock() }

// Reader is a MySQL or MariaDB source.
type Reader struct {
	// xaResume is what the checkpoint a session resumed from kept of the
	// open prepared XA transactions (xa.go).
	xaResume map[string][]string
	cfg      Config
	state    State
	logger   *slog.Logger
	stats    Stats
	inc      *snapshot.Engine

	// columns caches the tables' column records (columns.go); the stream
	// and the snapshot engine's goroutine both read them.
	colMu   sync.Mutex
	columns map[string]*tableColumns

	// ddl counts the DDL statements (and TRUNCATEs) naming a captured
	// table that the stream has handled:
	// the snapshot engine's cached descriptions are read again after one
	// (myDatabase.described).
	ddl atomic.Uint64
	// chunkBufs recycles the load's chunk slices: lent by the chunk reads,
	// given back by the stream once it has submitted a chunk's rows.
	chunkBufs *snapshot.Bufs
}

var _ source.Source = (*Reader)(nil)

// New returns a Reader; nothing connects until Run.
func New(cfg Config, state State, logger *slog.Logger) *Reader {
	cfg.defaults()
	r := &Reader{cfg: cfg, state: state, logger: logger.With("source", "mysql", "server_id", cfg.ServerID)}
	r.inc = newEngine(cfg, state, r)
	r.chunkBufs = r.inc.ChunkBufs() // one more than the chunks read at once: with two, one chunk in three read into new slices and slabs
	return r
}

// Stats returns the live counters.
func (r *Reader) Stats() *Stats { return &r.stats }

// stateKey names the checkpoint in the State (one source per pipeline).
func (r *Reader) stateKey() string { return "mysql/checkpoint" }

// Run checks the preconditions, then streams the binlog from the
// checkpoint (the server's current position on a first start) until ctx
// ends or a terminal error. A lost connection is not terminal: Run
// reconnects with backoff from the checkpoint, and the Emitter drops what
// it already holds. Terminal errors are *PreconditionError, *PurgedError,
// *TableError, *ValueError and the Emitter's own.
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
		if failed = failed + 1; !connectFailed(err) {
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

// session is one connection's life: check, resume, stream.
func (r *Reader) session(ctx context.Context, e source.Emitter) error {
	ci, err := parseDSN(r.cfg.DSN)
	if err != nil {
		return &PreconditionError{What: err.Error(), Fix: "correct source.mysql.dsn"}
	}
	db, err := ci.open()
	if err != nil {
		return err
	}
	defer db.Close()
	flavor, version, err := detectFlavor(ctx, db)
	if err != nil {
		return err
	}
	if r.cfg.Flavor != "" && r.cfg.Flavor != flavor {
		return &PreconditionError{What: fmt.Sprintf("source.mysql.flavor is %s but the server is %s (%s)", r.cfg.Flavor, flavor, version),
			Fix: "set flavor: " + flavor + ", or leave it out to detect it"}
	}
	if err := checkServer(ctx, db, flavor, r.cfg.ServerID, r.cfg.Tables); err != nil {
		return err
	}
	cp, err := r.state.Load(ctx, r.stateKey())
	if err != nil {
		return fmt.Errorf("mysql: load checkpoint: %w", err)
	}
	if err := r.queueTables(ctx, cp == nil); err != nil {
		return err
	}
	tables, wmErr, err := r.describeTables(ctx, db, flavor)
	if err != nil {
		return err
	}
	colls, err := readCollations(ctx, db)
	if err != nil {
		return err
	}
	st, err := r.resumePoint(ctx, db, flavor)
	if err != nil {
		return err
	}
	if err := checkPurged(ctx, db, st); err != nil {
		return err
	}
	return r.stream(ctx, ci, db, flavor, colls, tables, st, wmErr, e)
}

// describeTables describes every configured table, refusing each that
// cannot be captured (all of them named in one error), and the watermark
// table. Without snapshots queued, a watermark table that cannot be made
// is not an error: wmErr says why snapshots cannot run.
func (r *Reader) describeTables(ctx context.Context, db *sql.DB, flavor string) (_ map[string]*tableDesc, wmErr error, _ error) {
	if len(r.cfg.Tables) == 0 {
		return nil, nil, &PreconditionError{What: "no tables to capture", Fix: "list them in source.mysql.tables as database.table"}
	}
	out := map[string]*tableDesc{}
	var errs []error
	names := r.cfg.Tables
	if r.cfg.WatermarkTable != "" && !r.cfg.ReadOnly {
		wmErr = ensureWatermarkTable(ctx, db, r.cfg.WatermarkTable)
		if wmErr == nil {
			names = append(names[:len(names):len(names)], r.cfg.WatermarkTable)
		} else if r.snapshotsPending() || retryable(wmErr) {
			errs = append(errs, wmErr)
		} else {
			r.logger.Warn("snapshots cannot run: no watermark table", "err", wmErr)
		}
	}
	if r.cfg.SignalTable != "" {
		d, err := describeSignalTable(ctx, db, flavor, r.cfg.SignalTable)
		if err != nil {
			errs = append(errs, err)
		} else {
			out[d.qualified()] = d
		}
	}
	for _, name := range names {
		dbName, t, err := splitTable(name)
		if err != nil {
			errs = append(errs, &TableError{Table: name, Err: err})
			continue
		}
		d, err := describeTable(ctx, db, flavor, dbName, t)
		if err == nil {
			err = checkSelect(ctx, db, d)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[d.qualified()] = d
	}
	return out, wmErr, errors.Join(errs...)
}

// resumePoint loads the checkpoint, or on a first start takes the server's
// current position and saves it before anything is read, so a restart
// never starts later than the first run did.
func (r *Reader) resumePoint(ctx context.Context, db *sql.DB, flavor string) (gtidState, error) {
	raw, err := r.state.Load(ctx, r.stateKey())
	if err != nil {
		return gtidState{}, fmt.Errorf("mysql: load checkpoint: %w", err)
	}
	var cp checkpoint
	if raw != nil {
		if err := json.Unmarshal(raw, &cp); err != nil {
			return gtidState{}, fmt.Errorf("mysql: checkpoint %s is damaged: %v", r.stateKey(), err)
		}
		if cp.Flavor != flavor {
			return gtidState{}, &PreconditionError{What: fmt.Sprintf("this pipeline read a %s server, the server now is %s", cp.Flavor, flavor),
				Fix: "point the dsn at the original server, or start the pipeline afresh (new data_dir)"}
		}
		st, err := newGTIDState(flavor, cp.GTID, cp.Ordinal)
		r.xaResume = cp.XA
		if err == nil {
			r.stats.setGTID(cp.GTID)
			r.stats.Ordinal.Store(cp.Ordinal)
		}
		return st, err
	}
	pos, err := serverPosition(ctx, db, flavor)
	if err != nil {
		return gtidState{}, err
	}
	st, err := newGTIDState(flavor, pos, 0)
	if err != nil {
		return gtidState{}, err
	}
	st.ord = startOrdinal(st.set)
	if err := r.saveCheckpoint(ctx, checkpoint{Flavor: flavor, GTID: st.String(), Ordinal: st.ord}); err != nil {
		return gtidState{}, err
	}
	r.logger.Info("first start: streaming from the server's current position", "gtid", st.String(), "ordinal", st.ord)
	return st, nil
}

func (r *Reader) saveCheckpoint(ctx context.Context, cp checkpoint) error {
	raw, _ := json.Marshal(cp)
	if err := r.state.Save(ctx, r.stateKey(), raw); err != nil {
		return fmt.Errorf("mysql: save checkpoint: %w", err)
	}
	r.stats.setGTID(cp.GTID)
	r.stats.Ordinal.Store(cp.Ordinal)
	return nil
}
