package postgres

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// unreachableAfter is how many connection attempts in a row may fail
// (warnings) before each further failure is an ERROR that names the server
// and what to check; the reader goes on retrying with backoff either way.
const unreachableAfter = 3

// logRetry logs a retryable session error before the wait; failed counts
// the connection attempts in a row that failed (0: the session had
// connected).
func (r *Reader) logRetry(err error, failed int, wait time.Duration) {
	wait = wait.Round(time.Millisecond)
	switch {
	case failed >= unreachableAfter:
		server, check := unreachable(r.cfg.DSN, err)
		r.logger.Error("cannot connect to the database; still retrying", "server", server, "attempts", failed, "err", err,
			"in", wait, "what_to_do", check)
	case failed > 0:
		server, _ := unreachable(r.cfg.DSN, err)
		r.logger.Warn("cannot connect to the database; retrying", "server", server, "err", err, "in", wait)
	case slotInUse(err):
		r.logger.Warn("the replication slot is in use by another process; retrying", "err", err, "in", wait,
			"what_to_do", "if another cdcd or consumer streams from this slot, give this pipeline a slot of its own (source.postgres.slot); "+
				"a connection of this pipeline that went away lets go of it within wal_sender_timeout")
	default:
		r.logger.Warn("connection lost; reconnecting", "err", err, "in", wait)
	}
}

// unreachable describes a failure to connect to the server dsn names: the
// server as host:port (the DSN's password never appears) and what to check
// for the cause err shows.
func unreachable(dsn string, err error) (server, check string) {
	server = "the server of source.postgres.dsn"
	if cfg, perr := pgconn.ParseConfig(dsn); perr == nil {
		server = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	var dnsErr *net.DNSError
	var opErr *net.OpError
	msg := err.Error()
	switch {
	case errors.As(err, &dnsErr):
		check = "the host name does not resolve: check the host in source.postgres.dsn and this machine's DNS"
	case strings.Contains(msg, "connection refused"):
		check = "nothing accepts connections at " + server + ": is PostgreSQL running, on that port, and listening on that address " +
			"(listen_addresses, port in postgresql.conf)? Is the host in source.postgres.dsn right?"
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "timeout") || errors.As(err, &opErr) && opErr.Timeout():
		check = "no answer from " + server + ": check the address in source.postgres.dsn, that the server is up, " +
			"and that no firewall or security group drops the connection (connect_timeout in the DSN bounds each attempt)"
	case strings.Contains(msg, "SQLSTATE 57P03") || strings.Contains(msg, "the database system is starting up"):
		check = "the server is starting up or shutting down: it should accept connections once it is up"
	case strings.Contains(msg, "SQLSTATE 53300"):
		check = "the server has no connection left (max_connections): close idle sessions or raise it; cdcd needs two " +
			"(one replication connection, one for queries)"
	default:
		check = "check that PostgreSQL runs at " + server + ", that this machine reaches it, and source.postgres.dsn"
	}
	return server, check
}
