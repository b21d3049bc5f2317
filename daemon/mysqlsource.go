package daemon

import (
	"context"
	"log/slog"
	"net/url"
	"strings"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/mysql"
	"github.com/cdcd-dev/cdcd/source/postgres"
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
}

func newMySQLSource(m *config.MySQL, state mysql.State, logger *slog.Logger) *mysqlSource {
	return &mysqlSource{r: mysql.New(mysql.Config{DSN: m.DSN, ServerID: uint32(m.ServerID), Flavor: m.Flavor, Tables: m.Tables},
		state, logger)}
}

func (s *mysqlSource) Run(ctx context.Context, e source.Emitter) error { return s.r.Run(ctx, e) }

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
