package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// TestResolveColumnsCancelled: a type lookup the catalog could not answer
// (here a stop's cancelled context) is that error, not a table cdcd
// "cannot capture": session 13's mysql developer saw TestSIGTERMUnderLoad
// pause a table at the stop signal ("name of type N: context canceled;
// cdcd cannot capture it") and its changelog come up short.
func TestResolveColumnsCancelled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TYPE mood AS ENUM ('a', 'b'); CREATE TABLE t (id int PRIMARY KEY, m mood)`); err != nil {
		t.Fatal(err)
	}
	var relid uint32
	if err := conn.QueryRow(ctx, `SELECT 't'::regclass::oid`).Scan(&relid); err != nil {
		t.Fatal(err)
	}
	ct, err := describeTable(ctx, conn, relid)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = resolveColumns(cancelled, newTypeResolver(conn), ct.relationMessage(), ct)
	var te *TableError
	if err == nil || errors.As(err, &te) || !errors.Is(err, context.Canceled) {
		t.Fatalf("resolveColumns with a cancelled context: %v (a TableError: %v), want context.Canceled as is", err, te != nil)
	}
	if _, err := resolveColumns(ctx, newTypeResolver(conn), ct.relationMessage(), ct); err != nil {
		t.Fatalf("resolveColumns: %v", err)
	}
}
