package postgres

import (
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

// TestSlotMonitor: before the slot exists the poll succeeds and says so;
// once it exists its confirmed LSN, lag and retained WAL are read, a WAL
// position not yet confirmed ages into LagSeconds, estimates are read
// while loading; a server that cannot be reached is reported, not fatal.
func TestSlotMonitor(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDB(t)
	names := pgtest.Names(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	if _, err := conn.Exec(t.Context(), `CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 500); ANALYZE t`); err != nil {
		t.Fatal(err)
	}
	m := NewSlotMonitor(dsn, names.Slot, []string{"public.t"}, slog.New(slog.DiscardHandler))
	defer m.Close()

	m.Poll(t.Context(), false)
	if s := m.Status(); !s.Up || s.Exists || s.Name != names.Slot || s.CurrentLSN == "" {
		t.Fatalf("before the slot: %+v", s)
	}
	if n := m.Estimate("public.t"); n != 0 {
		t.Errorf("estimate read while not loading: %d", n)
	}

	if _, err := conn.Exec(t.Context(), `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, names.Slot); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `INSERT INTO t SELECT generate_series(501, 600)`); err != nil {
		t.Fatal(err)
	}
	m.Poll(t.Context(), true)
	s := m.Status()
	if !s.Up || !s.Exists || s.Active || s.ConfirmedFlush == 0 || s.LagBytes <= 0 || s.RetainedBytes < s.LagBytes || s.WALStatus == "" {
		t.Fatalf("with the slot behind: %+v", s)
	}
	if n := m.Estimate("public.t"); n != 500 {
		t.Errorf("estimate while loading: %d, want 500 (reltuples after ANALYZE)", n)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := conn.Exec(t.Context(), `INSERT INTO t VALUES (601)`); err != nil {
		t.Fatal(err)
	}
	m.Poll(t.Context(), false)
	if s := m.Status(); s.LagSeconds < 0.05 {
		t.Errorf("LagSeconds %v: the first poll that saw unconfirmed WAL was 50 ms ago", s.LagSeconds)
	}

	bad := NewSlotMonitor("postgres://nobody@127.0.0.1:1/none?connect_timeout=2", names.Slot, nil, slog.New(slog.DiscardHandler))
	bad.Poll(t.Context(), false)
	if s := bad.Status(); s.Up || s.Error == "" || s.MaxWALKeep != -1 {
		t.Errorf("unreachable server: %+v", s)
	}
}
