package reconcile

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

// TestReadGapHasNewestRunning: a transaction that holds the newest xid is
// not in a snapshot's in-progress list (its xid is at or after the
// snapshot's xmax), yet is invisible to it; the read's Gap holds it, so a
// commit of it that the log places before Low cannot be taken as seen by
// the read (CI once reported a row extra in the mirror this way).
func TestReadGapHasNewestRunning(t *testing.T) {
	ctx := context.Background()
	dsn, xid := pgtest.NewestRunning(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, rd, err := begin(ctx, conn, "running_xact")
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var n int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM running_xact").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the read sees %d rows (%v), want 0", n, err)
	}
	if !slices.Contains(rd.Gap, xid) {
		t.Fatalf("the read's Gap %v lacks the running transaction %d", rd.Gap, xid)
	}
}

// TestWidenXid: a 32-bit xid is widened to the 64-bit one nearest the
// reference, across an epoch's end in either direction.
func TestWidenXid(t *testing.T) {
	const e = 1 << 32
	for _, c := range []struct {
		ref  uint64
		x32  uint32
		want uint64
	}{
		{100, 105, 105},
		{105, 100, 100},
		{3*e + 5, 0xfffffff0, 2*e + 0xfffffff0},
		{2*e + 0xfffffff0, 5, 3*e + 5},
		{0xfffffff0, 5, e + 5},
		{5, 0xfffffff0, 0xfffffff0}, // no epoch below the first
	} {
		if got := widenXid(c.ref, c.x32); got != c.want {
			t.Errorf("widenXid(%#x, %#x) = %#x, want %#x", c.ref, c.x32, got, c.want)
		}
	}
}

// TestReadLocksTheTable: a read locks its table before it takes its
// snapshot, so a table-rewriting ALTER cannot commit during the read (the
// snapshot would see the table empty and every mirror row would be
// reported extra).
func TestReadLocksTheTable(t *testing.T) {
	ctx := t.Context()
	dsn := pgtest.NewDB(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE lk (id int PRIMARY KEY, v int); INSERT INTO lk VALUES (1, 1)"); err != nil {
		t.Fatal(err)
	}
	tx, _, err := begin(ctx, conn, `"public"."lk"`)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	_, err = other.Exec(ctx, "SET lock_timeout = '300ms'; ALTER TABLE lk ALTER COLUMN v TYPE bigint")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55P03" {
		t.Fatalf("a rewrite during the read: %v, want it to wait for the read's lock (55P03)", err)
	}
	var n int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM lk").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the read sees %d rows (%v), want 1", n, err)
	}
	tx.Rollback(ctx)
}
