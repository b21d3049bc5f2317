// Package postgres reads a PostgreSQL database's changes through a logical
// replication slot with the pgoutput plugin (binary tuples), after an
// optional consistent initial load of the captured tables.
//
// Exactly-once into the log: the reader tells PostgreSQL a position is
// flushed only after the Emitter has returned for every change of every
// transaction committed up to it. After a restart PostgreSQL re-sends from
// the slot's confirmed position and the Emitter drops what it already holds.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// Config configures a Reader.
type Config struct {
	// DSN of the source database (libpq URL or key=value). Required.
	DSN string
	// Slot and Publication names. Required.
	Slot, Publication string
	// Tables to capture, "schema.table" (a bare name means public). At least one.
	Tables []string
	// Snapshot loads the tables' existing rows when the slot is created.
	Snapshot bool
	// BatchMax is the most changes handed to the Emitter at once; default 8192.
	BatchMax int
	// BatchDelay is the longest a received change waits for more before it
	// is emitted; default 20ms.
	BatchDelay time.Duration
	// StatusInterval is how often the flushed position is reported to the
	// server when it does not ask; default 1s, so a restart re-reads little
	// (wal_sender_timeout is 60s).
	StatusInterval time.Duration
}

func (c *Config) defaults() {
	if c.BatchMax <= 0 {
		c.BatchMax = 8192
	}
	if c.BatchDelay <= 0 {
		c.BatchDelay = 20 * time.Millisecond
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = time.Second
	}
}

// State is durable key/value storage for the reader's own state (system
// identifier, whether the initial load finished). Save must be durable when
// it returns.
type State interface {
	Load(ctx context.Context, key string) ([]byte, error) // nil, nil when absent
	Save(ctx context.Context, key string, value []byte) error
}

// Stats are the reader's counters, safe to read while it runs.
type Stats struct {
	Events        atomic.Int64  // changes emitted
	SnapshotRows  atomic.Int64  // rows emitted by the initial load
	Flushed       atomic.Uint64 // LSN last confirmed to the server
	Received      atomic.Uint64 // end of WAL received
	LastCommitted atomic.Int64  // unix ms of the newest emitted commit
	Streaming     atomic.Bool   // the initial load is done and the slot streams
}

// Reader is a PostgreSQL source.
type Reader struct {
	cfg    Config
	state  State
	logger *slog.Logger
	stats  Stats
	// known holds the newest version of each table, so the snapshot and the
	// stream share one *schema.Table while the shape does not change.
	known map[string]*schema.Table
}

var _ source.Source = (*Reader)(nil)

// New returns a Reader; nothing connects until Run.
func New(cfg Config, state State, logger *slog.Logger) *Reader {
	cfg.defaults()
	return &Reader{cfg: cfg, state: state, logger: logger.With("source", "postgres", "slot", cfg.Slot), known: map[string]*schema.Table{}}
}

// Stats returns the live counters.
func (r *Reader) Stats() *Stats { return &r.stats }

func (r *Reader) stateKey() string { return "postgres/" + r.cfg.Slot }

// Run prepares publication and slot, loads the tables if the slot is new and
// a snapshot is configured, then streams until ctx ends or an error.
func (r *Reader) Run(ctx context.Context, e source.Emitter) error {
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	tables, err := r.describeTables(ctx, conn)
	if err != nil {
		return err
	}
	st, err := loadState(ctx, r.state, r.stateKey())
	if err != nil {
		return err
	}
	var sysID string
	if err := conn.QueryRow(ctx, "SELECT system_identifier::text FROM pg_control_system()").Scan(&sysID); err != nil {
		return fmt.Errorf("postgres: read system identifier: %w", err)
	}
	if st.SystemID != "" && st.SystemID != sysID {
		return fmt.Errorf("postgres: the server's system identifier is %s, but this pipeline captured from %s: "+
			"a different cluster answers at this DSN (failover to a non-replica, or a restored backup); "+
			"refusing to continue because changes may be missing. Point the DSN at the original cluster or start a new pipeline", sysID, st.SystemID)
	}
	st.SystemID = sysID
	if created, err := ensurePublication(ctx, conn, r.cfg.Publication, tables); err != nil {
		return err
	} else if created {
		r.logger.Info("created publication", "publication", r.cfg.Publication, "tables", len(tables))
	}

	repl, err := pgconn.Connect(ctx, replicationDSN(r.cfg.DSN))
	if err != nil {
		return fmt.Errorf("postgres: open replication connection: %w", err)
	}
	defer repl.Close(context.WithoutCancel(ctx))

	start, err := r.prepareSlot(ctx, conn, repl, tables, &st, e)
	if err != nil {
		return err
	}
	return r.stream(ctx, conn, repl, start, tables, e)
}

func (r *Reader) describeTables(ctx context.Context, conn *pgx.Conn) ([]*catalogTable, error) {
	var tables []*catalogTable
	var errs []error
	for _, name := range r.cfg.Tables {
		s, t := splitTable(name)
		ct, err := describeTable(ctx, conn, s, t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		tables = append(tables, ct)
	}
	return tables, errors.Join(errs...)
}

// prepareSlot makes sure the slot exists, loading the tables when it is
// created with a snapshot, and returns the flushed position to report first.
func (r *Reader) prepareSlot(ctx context.Context, conn *pgx.Conn, repl *pgconn.PgConn, tables []*catalogTable, st *sourceState, e source.Emitter) (uint64, error) {
	slot, err := lookupSlot(ctx, conn, r.cfg.Slot)
	if err != nil {
		return 0, err
	}
	if slot.exists {
		if slot.walStatus == "lost" {
			return 0, fmt.Errorf("postgres: replication slot %s was invalidated (wal_status lost): the server removed WAL it still needed, "+
				"so changes were lost. cdcd will not recreate it silently; drop the slot and re-run with a fresh snapshot", r.cfg.Slot)
		}
		if slot.plugin != "pgoutput" {
			return 0, fmt.Errorf("postgres: replication slot %s uses plugin %q; cdcd needs pgoutput", r.cfg.Slot, slot.plugin)
		}
		if !r.cfg.Snapshot || st.SnapshotDone {
			st.Slot, st.SlotCreated = r.cfg.Slot, true
			return slot.confirmedFlush, saveState(ctx, r.state, r.stateKey(), *st)
		}
		// The initial load did not finish: start it over on a new slot.
		r.logger.Warn("initial load did not finish before the last stop; dropping the slot to load again",
			"what_to_do", "nothing; rows read again are emitted again as op r")
		if err := pglogrepl.DropReplicationSlot(ctx, repl, r.cfg.Slot, pglogrepl.DropReplicationSlotOptions{Wait: true}); err != nil {
			return 0, fmt.Errorf("postgres: drop unfinished slot %s: %w", r.cfg.Slot, err)
		}
	} else if st.SlotCreated {
		return 0, fmt.Errorf("postgres: replication slot %s existed for this pipeline but is gone (dropped by someone, or a failover): "+
			"changes since the last run may be lost. cdcd will not recreate it silently; to start over, remove the pipeline's state "+
			"(data_dir) and run again to take a fresh snapshot", r.cfg.Slot)
	}
	action := "NOEXPORT_SNAPSHOT"
	if r.cfg.Snapshot {
		action = "EXPORT_SNAPSHOT"
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, r.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{SnapshotAction: action, Mode: pglogrepl.LogicalReplication})
	if err != nil {
		return 0, fmt.Errorf("postgres: create replication slot %s: %w", r.cfg.Slot, err)
	}
	cp, err := parseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, err
	}
	r.logger.Info("created replication slot", "consistent_point", res.ConsistentPoint)
	st.Slot, st.SlotCreated, st.SnapshotDone = r.cfg.Slot, true, !r.cfg.Snapshot
	if err := saveState(ctx, r.state, r.stateKey(), *st); err != nil {
		return 0, err
	}
	if r.cfg.Snapshot {
		if err := r.snapshot(ctx, res.SnapshotName, cp, tables, e); err != nil {
			return 0, err
		}
		st.SnapshotDone = true
		if err := saveState(ctx, r.state, r.stateKey(), *st); err != nil {
			return 0, err
		}
	}
	return cp, nil
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

// isTimeout reports a receive deadline that passed: not an error.
func isTimeout(err error) bool { return pgconn.Timeout(err) }

// sendStatus reports lsn as written, flushed and applied.
func sendStatus(ctx context.Context, repl *pgconn.PgConn, lsn uint64) error {
	p := pglogrepl.LSN(lsn)
	return pglogrepl.SendStandbyStatusUpdate(ctx, repl, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: p, WALFlushPosition: p, WALApplyPosition: p, ClientTime: time.Now(),
	})
}

// errorFromBackend turns an ErrorResponse on the replication stream into an error.
func errorFromBackend(msg *pgproto3.ErrorResponse) error {
	return fmt.Errorf("postgres: replication stream: %w", pgconn.ErrorResponseToPgError(msg))
}
