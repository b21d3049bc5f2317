package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"
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
