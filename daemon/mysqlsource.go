package daemon

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/mysql"
	"github.com/cdcd-dev/cdcd/source/postgres"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// sourceReader is the daemon's view of its source: PostgreSQL's reader, or
// the MySQL reader through mysqlSource.
type sourceReader interface {
	Run(ctx context.Context, e source.Emitter) error
	Stats() *postgres.Stats
}

// mysqlSource runs a MySQL / MariaDB reader. Its Stats carry the reader's
// counters in the PostgreSQL reader's Stats, which status, metrics and the
// monitor read (the LSN fields stay 0).
type mysqlSource struct {
	r     *mysql.Reader
	stats postgres.Stats
	lag   atomic.Pointer[mysql.Lag] // the last poll of the server's binlog
}

// lagPoll is how often the server's binlog end and retention are read.
const lagPoll = 10 * time.Second

// newMySQLSource makes the reader; keepsDefault is the sink's answer to
// mysql.Config.KeepsDefault.
func newMySQLSource(m *config.MySQL, keepsDefault func(schema.Column) bool, state mysql.State, logger *slog.Logger) *mysqlSource {
	return &mysqlSource{r: mysql.New(mysql.Config{DSN: m.DSN, ServerID: uint32(m.ServerID), Flavor: m.Flavor, Tables: m.Tables,
		WatermarkTable: m.WatermarkTable, SignalTable: m.Incremental.SignalTable, ReadOnly: m.ReadOnly, Load: m.Snapshot == config.SnapshotInitial,
		ChunkRows: m.Incremental.ChunkRows, MaxRowsPerSecond: m.Incremental.MaxRowsPerSecond, KeepsDefault: keepsDefault}, state, logger)}
}

// Snapshots returns the reader's incremental snapshot engine (the initial
// load, tables added later, cdcd snapshot).
func (s *mysqlSource) Snapshots() *snapshot.Engine { return s.r.Snapshots() }

// Run runs the reader, polling the server's binlog end beside it.
func (s *mysqlSource) Run(ctx context.Context, e source.Emitter) error {
	pollCtx, stop := context.WithCancel(ctx)
	defer stop()
	go s.pollLag(pollCtx)
	return s.r.Run(ctx, e)
}

func (s *mysqlSource) pollLag(ctx context.Context) {
	t := time.NewTicker(lagPoll)
	defer t.Stop()
	for {
		if s.r.Stats().Streaming.Load() {
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if l, err := s.r.Lag(qctx); err == nil {
				s.lag.Store(&l)
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// BinlogStatus is the MySQL reader's place in the binlog (cdcd status).
type BinlogStatus struct {
	GTID    string `json:"gtid"` // the checkpoint: every transaction durable in the log
	Ordinal uint64 `json:"ordinal"`
	File    string `json:"file"`
	Pos     uint32 `json:"pos"`
	// From the last poll of the server (every 10s): its binlog end, the
	// bytes between, the age of the newest change emitted, and how long the
	// server keeps binlogs (0: forever).
	ServerFile       string  `json:"server_file,omitempty"`
	ServerPos        uint32  `json:"server_pos,omitempty"`
	LagBytes         int64   `json:"lag_bytes"`
	LagSeconds       float64 `json:"lag_seconds"`
	RetentionSeconds float64 `json:"retention_seconds"`
}

func (d *Daemon) binlogStatus() *BinlogStatus {
	s, ok := d.reader.(*mysqlSource)
	if !ok {
		return nil
	}
	ms := s.r.Stats()
	b := &BinlogStatus{GTID: ms.GTID(), Ordinal: ms.Ordinal.Load(), File: ms.BinlogFile(), Pos: ms.BinlogPos.Load()}
	if l := s.lag.Load(); l != nil {
		b.ServerFile, b.ServerPos, b.LagBytes = l.ServerFile, l.ServerPos, l.Bytes
		b.LagSeconds, b.RetentionSeconds = l.Behind.Seconds(), l.Retention.Seconds()
	}
	return b
}

func (s *mysqlSource) Stats() *postgres.Stats {
	ms := s.r.Stats()
	s.stats.Events.Store(ms.Events.Load())
	s.stats.Streaming.Store(ms.Streaming.Load())
	s.stats.LastCommitted.Store(ms.LastCommitted.Load())
	s.stats.Reconnects.Store(ms.Reconnects.Load())
	return &s.stats
}

// MySQLStats returns the MySQL reader's counters (GTID set, binlog file
// and position), or nil when the source is PostgreSQL.
func (d *Daemon) MySQLStats() *mysql.Stats {
	if s, ok := d.reader.(*mysqlSource); ok {
		return s.r.Stats()
	}
	return nil
}

// mysqlDatabase is the database of a mysql:// DSN (the envelope's
// source.db).
func mysqlDatabase(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

// slotName is the PostgreSQL slot's name, "" for other sources.
func slotName(cfg *config.Config) string {
	if pg := cfg.Source.Postgres; pg != nil {
		return pg.Slot
	}
	return ""
}
