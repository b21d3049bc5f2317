package postgres

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// TestUnreachableDatabase: a DSN whose server does not answer is retried
// with backoff and, after a few failed attempts, each one is an ERROR that
// names the server's host:port (never the password), the cause and what to
// check; the reader goes on retrying until it is stopped.
func TestUnreachableDatabase(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	const password = "s3cret-pw-do-not-log"
	logs := &syncBuffer{}
	r := New(Config{DSN: "postgres://cdc:" + password + "@" + addr + "/shop?connect_timeout=2", Slot: "s", Publication: "p",
		Tables: []string{"public.t"}, ReconnectMin: 5 * time.Millisecond, ReconnectMax: 20 * time.Millisecond},
		&memState{}, slog.New(slog.NewTextHandler(logs, nil)))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, nil) }()
	deadline := time.Now().Add(time.Minute)
	for r.Stats().Reconnects.Load() < unreachableAfter+3 {
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
				"what_to_do=", "is PostgreSQL running"} {
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
	if warns != unreachableAfter-1 || errors < 3 {
		t.Errorf("%d WARN and %d ERROR lines; want %d warnings, then errors:\n%s", warns, errors, unreachableAfter-1, out)
	}
}
