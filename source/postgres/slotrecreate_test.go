package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestStopWhileRecreatingSlot: the last run created the slot and stopped
// before its initial load began, so this start drops the slot to create it
// again; it stops while the creation waits for a running transaction (the
// crash suite killed it there). The next start must create the slot, not
// refuse to go on because "the slot this pipeline created is gone".
func TestStopWhileRecreatingSlot(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE rs (id int PRIMARY KEY); INSERT INTO rs VALUES (1)`)
	stop, r := e.startReader(t, []string{"rs"}, true, newCollector())
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// As saved by a run stopped between the slot's creation and its load.
	key := r.stateKey()
	var st map[string]any
	if err := json.Unmarshal(e.state.m[key], &st); err != nil {
		t.Fatal(err)
	}
	st["snapshot_done"] = false
	delete(st, "load")
	b, _ := json.Marshal(st)
	e.state.m[key] = b

	long, err := e.conn.Begin(t.Context()) // the new slot waits for it
	if err != nil {
		t.Fatal(err)
	}
	if _, err := long.Exec(t.Context(), "INSERT INTO rs VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cfg := e.config(t, []string{"rs"}, true)
	cfg.WaitReportInterval = 100 * time.Millisecond
	r2 := New(cfg, e.state, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	done := make(chan error, 1)
	go func() { done <- r2.Run(ctx, newCollector()) }()
	for deadline := time.Now().Add(60 * time.Second); r2.Stats().Waiting.Load() == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slot's creation never waited for the open transaction")
		}
	}
	cancel() // stopped while creating the slot
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped run: %v", err)
	}
	if err := long.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := newCollector()
	e.startReader(t, []string{"rs"}, true, c) // fails the test unless it streams
	c.wait(t, 2)
}

// TestDropSlotWaitsForItsHolder: dropping the pipeline's slot while
// another connection streams from it (the walsender of a killed process,
// until it notices) retries until that connection lets it go, then drops
// it — without asking the server to wait, which a killed client's
// walsender would go on doing, and then drop the slot created meanwhile.
func TestDropSlotWaitsForItsHolder(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE ds (id int PRIMARY KEY); CREATE PUBLICATION ds_pub FOR TABLE ds`)
	e.exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, e.names.Slot)
	holder, err := pgconn.Connect(t.Context(), replicationDSN(e.dsn))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	if err := pglogrepl.StartReplication(t.Context(), holder, e.names.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'ds_pub'"}}); err != nil {
		t.Fatal(err)
	}
	repl, err := pgconn.Connect(t.Context(), replicationDSN(e.dsn))
	if err != nil {
		t.Fatal(err)
	}
	defer repl.Close(context.Background())
	s := &session{Reader: New(e.config(t, []string{"ds"}, false), e.state, slog.New(slog.NewTextHandler(testWriter{t}, nil))), repl: repl}
	done := make(chan error, 1)
	go func() { done <- s.dropSlot(t.Context()) }()
	select {
	case err := <-done:
		t.Fatalf("the drop returned (%v) while another connection held the slot", err)
	case <-time.After(time.Second):
	}
	holder.Close(context.Background())
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the drop once the slot was free: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the drop did not end within a minute of the slot being free")
	}
	var n int
	if err := e.conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", e.names.Slot).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d slots named %s after the drop (%v)", n, e.names.Slot, err)
	}
}
