package mysql

import (
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/cdcd-dev/cdcd/source"
)

// dialTimeout bounds one attempt to connect (go-sql-driver's default is
// the operating system's, minutes for a server that never answers).
const dialTimeout = 30 * time.Second

// logRetry logs a retryable session error before the wait; failed counts
// the connection attempts in a row that failed (0: the session had
// connected). From source.UnreachableAfter on, each is an ERROR naming the
// server's host:port and what to check, as for PostgreSQL.
func (r *Reader) logRetry(err error, failed int, wait time.Duration) {
	if failed == 0 {
		r.logger.Warn("connection lost; reconnecting", "err", err, "in", wait.Round(time.Millisecond))
		return
	}
	s := server(r.cfg.DSN)
	source.LogConnectFailure(r.logger, s, failed, err, wait, connectCheck(s, err))
}

// connectFailed reports whether err is a failure to connect at all: the
// host does not resolve, nothing answers or accepts, or the server has no
// connection left.
func connectFailed(err error) bool {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	return errors.As(err, &dnsErr) || errors.As(err, &opErr) && opErr.Op == "dial" || serverCode(err) == erConnCountError
}

// server describes the server dsn names: host:port, never the password.
func server(dsn string) source.Server {
	s := source.Server{Addr: "the server of source.mysql.dsn", Product: "MariaDB / MySQL", DSNKey: "source.mysql.dsn",
		Listen:  "bind_address, port and skip_networking in the server's config file",
		Timeout: strconv.Itoa(int(dialTimeout/time.Second)) + "s"}
	if ci, err := parseDSN(dsn); err == nil {
		s.Addr = net.JoinHostPort(ci.host, strconv.Itoa(int(ci.port)))
	}
	return s
}

// connectCheck says what to check for the cause err shows: the server's
// own, then the ones every database shares.
func connectCheck(s source.Server, err error) string {
	switch serverCode(err) {
	case erConnCountError:
		return "the server has no connection left (max_connections): close idle sessions or raise it; cdcd needs up to " +
			"six (the binlog connection and a pool of four for queries and snapshots)"
	case erServerShutdown:
		return "the server is shutting down: it should accept connections once it is up again"
	}
	return s.ConnectCheck(err)
}
