package postgres

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcd-dev/cdcd/source"
)

// unreachableAfter is how many connection attempts in a row may fail
// (warnings) before each further failure is an ERROR that names the server
// and what to check; the reader goes on retrying with backoff either way.
const unreachableAfter = source.UnreachableAfter

// logRetry logs a retryable session error before the wait; failed counts
// the connection attempts in a row that failed (0: the session had
// connected).
func (r *Reader) logRetry(err error, failed int, wait time.Duration) {
	switch {
	case failed > 0:
		s := server(r.cfg.DSN)
		source.LogConnectFailure(r.logger, s, failed, err, wait, connectCheck(s, err))
	case errors.Is(err, errRewritten), errors.Is(err, errChangedSinceSnapshot):
		r.logger.Warn("a table was changed (rewritten, or a column dropped, renamed or retyped) just after the initial load's snapshot was taken; loading again from a new slot", "err", err,
			"in", wait.Round(time.Millisecond), "what_to_do", "nothing; ALTER TABLE, VACUUM FULL or CLUSTER run again and again while the load starts keeps it from starting")
	case slotInUse(err):
		r.logger.Warn("the replication slot is in use by another process; retrying", "err", err, "in", wait.Round(time.Millisecond),
			"what_to_do", "if another cdcd or consumer streams from this slot, give this pipeline a slot of its own (source.postgres.slot); "+
				"a connection of this pipeline that went away lets go of it within wal_sender_timeout")
	default:
		r.logger.Warn("connection lost; reconnecting", "err", err, "in", wait.Round(time.Millisecond))
	}
}

// server describes the server dsn names: host:port (the DSN's password
// never appears).
func server(dsn string) source.Server {
	s := source.Server{Addr: "the server of source.postgres.dsn", Product: "PostgreSQL", DSNKey: "source.postgres.dsn",
		Listen: "listen_addresses, port in postgresql.conf", Timeout: "connect_timeout in the DSN"}
	if cfg, perr := pgconn.ParseConfig(dsn); perr == nil {
		s.Addr = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	return s
}

// connectCheck says what to check for the cause err shows: PostgreSQL's
// own, then the ones every database shares.
func connectCheck(s source.Server, err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "SQLSTATE 57P03") || strings.Contains(msg, "the database system is starting up"):
		return "the server is starting up or shutting down: it should accept connections once it is up"
	case strings.Contains(msg, "SQLSTATE 53300"):
		return "the server has no connection left (max_connections): close idle sessions or raise it; cdcd needs two " +
			"(one replication connection, one for queries)"
	}
	return s.ConnectCheck(err)
}
