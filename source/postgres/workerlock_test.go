package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// TestWorkerLockDoesNotQueueBehindDDL: the load's transaction holds ACCESS
// SHARE on its tables and an ALTER TABLE waits for it; a snapshot worker
// that then asked for the table queued behind the ALTER, which waited for
// the load, which waited for the worker — the crash suite's load hung so.
// lockForWorker fails at once instead, as a connection error (the load
// starts again after the ALTER).
func TestWorkerLockDoesNotQueueBehindDDL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewDB(t)
	connect := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	load, ddl, worker := connect(), connect(), connect()
	if _, err := load.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	var relid uint32
	if err := load.QueryRow(ctx, `SELECT 't'::regclass::oid`).Scan(&relid); err != nil {
		t.Fatal(err)
	}
	ct, err := describeTable(ctx, load, relid)
	if err != nil {
		t.Fatal(err)
	}
	ltx, err := load.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ltx.Rollback(ctx)
	if _, err := ltx.Exec(ctx, `LOCK TABLE t IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	altered := make(chan error, 1)
	go func() { _, err := ddl.Exec(ctx, `ALTER TABLE t ADD COLUMN x int`); altered <- err }()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var waiting bool
		if err := load.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_locks WHERE relation = $1 AND NOT granted`, relid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the ALTER TABLE never waited for the load's lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	wtx, err := worker.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer wtx.Rollback(ctx)
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = lockForWorker(lctx, wtx, map[string]*catalogTable{"public.t": ct})
	var ce *connError
	if !errors.As(err, &ce) {
		t.Fatalf("lockForWorker with an ALTER waiting: %v, want a connError at once (a context deadline means it queued)", err)
	}
	// The load gives up its lock; the ALTER goes through.
	if err := ltx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-altered; err != nil {
		t.Fatalf("the ALTER TABLE after the load let go: %v", err)
	}
}
