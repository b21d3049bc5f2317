package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

// TestDescribeCurrentWaitsForTheCommit: a Relation message can be decoded
// before its transaction is visible to other sessions (the commit record
// is flushed first). Here the ALTER that added column k is held open on
// another connection: the catalog lacks k, and describeCurrent reads it
// again until k shows (with its NOT NULL and missing value) instead of
// describing k as a nullable column without a default. A commit long past
// is described at once: its column may have been dropped since.
func TestDescribeCurrentWaitsForTheCommit(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDB(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	alter, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer alter.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a')`); err != nil {
		t.Fatal(err)
	}
	var relid uint32
	if err := conn.QueryRow(ctx, `SELECT 't'::regclass::oid`).Scan(&relid); err != nil {
		t.Fatal(err)
	}
	m := &pglogrepl.RelationMessage{RelationID: relid, Namespace: "public", RelationName: "t",
		Columns: []*pglogrepl.RelationMessageColumn{{Name: "id"}, {Name: "v"}, {Name: "k"}}}

	start := time.Now()
	ct, err := describeCurrent(ctx, conn, m, start.Add(-time.Hour))
	if err != nil || ct.column("k").name != "" || time.Since(start) > catalogSettle {
		t.Fatalf("an old commit's column: described k %+v after %s (%v); want it left out at once", ct.column("k"), time.Since(start), err)
	}

	tx, err := alter.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `ALTER TABLE t ADD COLUMN k bigint NOT NULL DEFAULT 7`); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = tx.Commit(ctx)
	}()
	ct, err = describeCurrent(ctx, conn, m, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if k := ct.column("k"); k.name != "k" || !k.notNull || !k.hasMissing {
		t.Errorf("column k described as %+v; want it NOT NULL with a missing value, as committed", k)
	}
}
