package mysql

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	sqldriver "github.com/go-sql-driver/mysql"

	"github.com/cdcd-dev/cdcd/source"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestUnreachableDatabase: a DSN whose server does not answer is retried
// with backoff and, after a few failed attempts, each one is an ERROR that
// names the server's host:port (never the password), the cause and what to
// check, as PostgreSQL's reader does; the reader goes on retrying until it
// is stopped.
func TestUnreachableDatabase(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	const password = "s3cret-pw-do-not-log"
	logs := &lockedBuffer{}
	r := New(Config{DSN: "mysql://cdc:" + password + "@" + addr + "/shop", ServerID: 77, Tables: []string{"shop.t"},
		ReconnectMin: 5 * time.Millisecond, ReconnectMax: 20 * time.Millisecond},
		newMemState(), slog.New(slog.NewTextHandler(logs, nil)))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, nil) }()
	deadline := time.Now().Add(time.Minute)
	for r.Stats().Reconnects.Load() < source.UnreachableAfter+3 {
		select {
		case err := <-done:
			t.Fatalf("the reader stopped: %v\n%s", err, logs)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d attempts in a minute:\n%s", r.Stats().Reconnects.Load(), logs)
		}
	}
	cancel()
	<-done
	out := logs.String()
	if strings.Contains(out, password) {
		t.Fatalf("the log shows the password:\n%s", out)
	}
	var errors, warns int
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		switch {
		case strings.Contains(l, "level=ERROR"):
			errors++
			for _, want := range []string{`msg="cannot connect to the database; still retrying"`, "server=" + addr, "connection refused",
				"what_to_do=", "is MariaDB / MySQL running", "bind_address"} {
				if !strings.Contains(l, want) {
					t.Errorf("ERROR line lacks %q: %s", want, l)
				}
			}
		case strings.Contains(l, "level=WARN"):
			warns++
			if !strings.Contains(l, "server="+addr) {
				t.Errorf("WARN line does not name the server: %s", l)
			}
		}
	}
	if warns != source.UnreachableAfter-1 || errors < 3 {
		t.Errorf("%d WARN and %d ERROR lines; want %d warnings, then errors:\n%s", warns, errors, source.UnreachableAfter-1, out)
	}
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

func mysqlErr(code uint16) error { return &sqldriver.MySQLError{Number: code, Message: "Too many connections"} }
