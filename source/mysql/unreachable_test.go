package mysql

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	sqldriver "github.com/go-sql-driver/mysql"

	"github.com/cdcd-dev/cdcd/internal/unreachabletest"
)

// TestUnreachableDatabase: a DSN whose server does not answer is retried
// with backoff and, after a few failed attempts, each one is an ERROR that
// names the server's host:port (never the password), the cause and what to
// check, as PostgreSQL's reader does; the reader goes on retrying until it
// is stopped.
func TestUnreachableDatabase(t *testing.T) {
	t.Parallel()
	addr := unreachabletest.ClosedAddr(t)
	password := unreachabletest.Password
	logs := &unreachabletest.Buffer{}
	r := New(Config{DSN: "mysql://cdc:" + password + "@" + addr + "/shop", ServerID: 77, Tables: []string{"shop.t"},
		ReconnectMin: 5 * time.Millisecond, ReconnectMax: 20 * time.Millisecond},
		newMemState(), slog.New(slog.NewTextHandler(logs, nil)))
	unreachabletest.Retry(t, func(ctx context.Context) error { return r.Run(ctx, nil) }, r.Stats().Reconnects.Load, logs)
	unreachabletest.Check(t, logs.String(), addr, "is MariaDB / MySQL running", "bind_address")
}

// TestConnectCheck: the causes a failed connection shows, each with what to
// check.
func TestConnectCheck(t *testing.T) {
	t.Parallel()
	s := server("mysql://u:pw@db.example:3307/x")
	if s.Addr != "db.example:3307" {
		t.Errorf("server %q, want db.example:3307", s.Addr)
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&net.DNSError{Err: "no such host", Name: "db.example"}, "does not resolve"},
		{&net.OpError{Op: "dial", Net: "tcp", Err: &timeoutErr{}}, "no answer from db.example:3307"},
		{&connError{mysqlErr(erConnCountError)}, "max_connections"},
	} {
		if got := connectCheck(s, tc.err); !strings.Contains(got, tc.want) {
			t.Errorf("%v: %q, want it to say %q", tc.err, got, tc.want)
		}
		if !connectFailed(tc.err) {
			t.Errorf("%v is not seen as a failure to connect", tc.err)
		}
	}
	if connectFailed(&net.OpError{Op: "read", Net: "tcp", Err: &timeoutErr{}}) {
		t.Error("a read that timed out on a connection is seen as a failure to connect")
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func mysqlErr(code uint16) error {
	return &sqldriver.MySQLError{Number: code, Message: "Too many connections"}
}
