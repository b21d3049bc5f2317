package postgres

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// TestSplitReadSecondConnectionDies: a range chunk read in two halves
// whose second connection dies fails whole — no rows, not the first half
// alone — and drops that connection; the chunk read again on a new one
// returns every row of the range once, in key order.
func TestSplitReadSecondConnectionDies(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE s (id int PRIMARY KEY, v text); INSERT INTO s SELECT g, 'v' || g FROM generate_series(1, 1000) g`)
	cfg := e.config(t, []string{"s"}, false)
	cfg.Incremental.SplitRows = 100
	r := New(cfg, e.state, slog.New(slog.DiscardHandler))
	conn, err := pgx.Connect(t.Context(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	d := &pgDatabase{r: r, conn: conn, types: newTypeResolver(conn), ring: newXidRing()}
	defer d.close()
	q := snapshot.ChunkQuery{Upper: snapshot.Key{"1000"}, Limit: 400}

	second, err := d.second(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	e.exec(t, fmt.Sprintf("SELECT pg_terminate_backend(%d)", second.PgConn().PID()))
	res, err := d.ReadChunk(t.Context(), "public.s", nil, q)
	if err == nil || res != nil {
		t.Fatalf("the second connection died, yet the read returned %v rows and error %v", rowsOf(res), err)
	}
	if d.conn2 != nil {
		t.Error("the dead second connection is kept for the next read")
	}

	res, err = d.ReadChunk(t.Context(), "public.s", nil, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 400 || fmt.Sprint(res.Last) != "[400]" {
		t.Fatalf("read again: %d rows, last %v; want 400 ending at 400", len(res.Rows), res.Last)
	}
	for i, c := range res.Rows {
		if got := fmt.Sprint(c.After[0]); got != fmt.Sprint(i+1) {
			t.Fatalf("row %d has key %s, want %d (each key once, in order)", i, got, i+1)
		}
	}
}

func rowsOf(c *snapshot.Chunk) int {
	if c == nil {
		return 0
	}
	return len(c.Rows)
}

// TestChunkReadLocksItsTable: a chunk's transaction locks its table before
// it takes its snapshot, so a table-rewriting ALTER cannot commit while
// the chunk reads (the snapshot would see the rewritten table empty, and
// the chunk's rows would be missing from the mirror without a word).
func TestChunkReadLocksItsTable(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE lk (id int PRIMARY KEY, v int); INSERT INTO lk SELECT g, g FROM generate_series(1, 10) g`)
	d, _ := testDatabase(t, e, New(e.config(t, []string{"lk"}, false), e.state, slog.New(slog.DiscardHandler)))
	tx, _, _, err := d.readTx(t.Context(), "public.lk")
	if err != nil {
		t.Fatal(err)
	}
	other, err := pgx.Connect(t.Context(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(t.Context())
	_, err = other.Exec(t.Context(), "SET lock_timeout = '300ms'; ALTER TABLE lk ALTER COLUMN v TYPE bigint")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55P03" {
		t.Fatalf("a rewrite during the chunk's read: %v, want it to wait for the chunk's lock (55P03 lock_not_available)", err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(t.Context(), "SET lock_timeout = 0; ALTER TABLE lk ALTER COLUMN v TYPE bigint"); err != nil {
		t.Fatalf("the rewrite after the chunk: %v", err)
	}
}
