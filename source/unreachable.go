package source

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"time"
)

// UnreachableAfter is how many connection attempts in a row may fail
// (warnings) before each further failure is an ERROR that names the server
// and what to check; a reader goes on retrying with backoff either way.
const UnreachableAfter = 3

// Server describes the database a reader connects to, for the hints of a
// failed connection.
type Server struct {
	// Addr is host:port, or a description when the DSN does not parse; never
	// the password.
	Addr string
	// Product is "PostgreSQL", "MariaDB or MySQL".
	Product string
	// DSNKey is the config key of the DSN, e.g. "source.postgres.dsn".
	DSNKey string
	// Listen names the server settings that decide where it listens, e.g.
	// "listen_addresses, port in postgresql.conf".
	Listen string
	// Timeout names what bounds one attempt, e.g. "connect_timeout in the DSN".
	Timeout string
}

// LogConnectFailure logs a failed connection attempt before the wait;
// failed counts the attempts in a row that failed (at least 1). From
// UnreachableAfter on it is an ERROR with check, what to do.
func LogConnectFailure(logger *slog.Logger, s Server, failed int, err error, wait time.Duration, check string) {
	wait = wait.Round(time.Millisecond)
	if failed >= UnreachableAfter {
		logger.Error("cannot connect to the database; still retrying", "server", s.Addr, "attempts", failed, "err", err,
			"in", wait, "what_to_do", check)
		return
	}
	logger.Warn("cannot connect to the database; retrying", "server", s.Addr, "err", err, "in", wait)
}

// ConnectCheck says what to check for the cause of a failed connection
// that err shows, for the causes every database shares: a name that does
// not resolve, nothing listening, no answer. A reader tries its own causes
// (a server starting up, no connection slot left) first.
func (s Server) ConnectCheck(err error) string {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	msg := err.Error()
	switch {
	case errors.As(err, &dnsErr):
		return "the host name does not resolve: check the host in " + s.DSNKey + " and this machine's DNS"
	case strings.Contains(msg, "connection refused"):
		return "nothing accepts connections at " + s.Addr + ": is " + s.Product + " running, on that port, and listening on that address " +
			"(" + s.Listen + ")? Is the host in " + s.DSNKey + " right?"
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "timeout") || errors.As(err, &opErr) && opErr.Timeout():
		return "no answer from " + s.Addr + ": check the address in " + s.DSNKey + ", that the server is up, " +
			"and that no firewall or security group drops the connection (" + s.Timeout + " bounds each attempt)"
	}
	return "check that " + s.Product + " runs at " + s.Addr + ", that this machine reaches it, and " + s.DSNKey
}
