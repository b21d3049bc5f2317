package postgres

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/unreachabletest"
)

// TestUnreachableDatabase: a DSN whose server does not answer is retried
// with backoff and, after a few failed attempts, each one is an ERROR that
// names the server's host:port (never the password), the cause and what to
// check; the reader goes on retrying until it is stopped.
func TestUnreachableDatabase(t *testing.T) {
	addr := unreachabletest.ClosedAddr(t)
	password := unreachabletest.Password
	logs := &unreachabletest.Buffer{}
	r := New(Config{DSN: "postgres://cdc:" + password + "@" + addr + "/shop?connect_timeout=2", Slot: "s", Publication: "p",
		Tables: []string{"public.t"}, ReconnectMin: 5 * time.Millisecond, ReconnectMax: 20 * time.Millisecond},
		&memState{}, slog.New(slog.NewTextHandler(logs, nil)))
	unreachabletest.Retry(t, func(ctx context.Context) error { return r.Run(ctx, nil) }, r.Stats().Reconnects.Load, logs)
	unreachabletest.Check(t, logs.String(), addr, "is PostgreSQL running")
}
