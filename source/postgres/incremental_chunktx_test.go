package postgres

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// TestLowWatermarkCommitsBeforeRead: a chunk's low watermark, sent in one
// query with the chunk's BEGIN, LOCK and snapshot, is committed before
// the chunk's snapshot is taken: while the chunk's transaction is still
// open, the slot already decodes the watermark (only committed
// transactions are decoded), and the chunk's snapshot sees its
// transaction as committed. Were it written inside the chunk's
// transaction, or after its snapshot, a change committed while the chunk
// is read would reach the stream before the low watermark, outside the
// window, and the chunk's older row would be emitted after it. The
// chunk's transaction also holds the table's lock (a rewriting ALTER
// waits for it).
func TestLowWatermarkCommitsBeforeRead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := setup(t, `CREATE TABLE lw (id int PRIMARY KEY, v int); INSERT INTO lw SELECT g, g FROM generate_series(1, 100) g`)
	e.exec(t, "CREATE PUBLICATION "+pgx.Identifier{e.names.Publication}.Sanitize()+" FOR TABLE lw")
	e.exec(t, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", e.names.Slot)
	r := New(e.config(t, []string{"lw"}, false), e.state, slog.New(slog.DiscardHandler))
	d, conn := testDatabase(t, e, r)

	const id = "low:test-1"
	snap, _, _, _, err := d.chunkTx(ctx, id, "public.lw")
	if err != nil {
		t.Fatal(err)
	}
	if st := conn.PgConn().TxStatus(); st != 'T' {
		t.Fatalf("after the chunk's first query the connection's transaction status is %q, want 'T' (the chunk's transaction open)", st)
	}
	rows, err := e.conn.Query(ctx, `SELECT xid::text, data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', $2, 'messages', 'true')`, e.names.Slot, e.names.Publication)
	if err != nil {
		t.Fatal(err)
	}
	var xid string
	var seen []string
	want := []byte(e.names.Slot + " " + id)
	for rows.Next() {
		var x string
		var data []byte
		if err := rows.Scan(&x, &data); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, fmt.Sprintf("%c(xid %s)", data[0], x))
		if data[0] == 'M' && bytes.Contains(data, []byte(watermarkPrefix)) && bytes.Contains(data, want) {
			xid = x
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if xid == "" {
		t.Fatalf("while the chunk's transaction is open the slot decodes %v and no watermark %q: it is not committed before the chunk's read, "+
			"so changes the read does not see could reach the stream before it", seen, want)
	}
	x, err := strconv.ParseUint(xid, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	if w := uint32(x); snap.xip[w] || !xidAfter(snap.xmax, w) {
		t.Fatalf("the chunk's snapshot (xmax %d, in progress %v) does not see the watermark's transaction %d as committed", snap.xmax, snap.xip, w)
	}

	other, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	_, err = other.Exec(ctx, "SET lock_timeout = '300ms'; ALTER TABLE lw ALTER COLUMN v TYPE bigint")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55P03" {
		t.Fatalf("a rewrite during the chunk's read: %v, want it to wait for the chunk's lock (55P03 lock_not_available)", err)
	}
	d.rollback(ctx)

	// The whole chunk: its rows, and no transaction left open.
	res, err := d.ReadChunkAfterLow(ctx, "low:test-2", "public.lw", nil, snapshot.ChunkQuery{Upper: snapshot.Key{"100"}, Limit: 60})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 60 || fmt.Sprint(res.Last) != "[60]" {
		t.Errorf("the chunk read %d rows ending at %v, want 60 ending at [60]", len(res.Rows), res.Last)
	}
	if st := conn.PgConn().TxStatus(); st != 'I' {
		t.Errorf("after the chunk the connection's transaction status is %q, want 'I' (committed with the COPY)", st)
	}
}

// TestChunkDescriptionFollowsDDL: chunks reuse their table's description
// while its catalog rows are unchanged (the same table version), and a
// chunk after an ALTER TABLE — a column added with a default, a type
// changed, a column dropped, the key changed — reads the table as it is
// now.
func TestChunkDescriptionFollowsDDL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := setup(t, `CREATE TABLE dd (id int PRIMARY KEY, v int); INSERT INTO dd SELECT g, g FROM generate_series(1, 10) g`)
	r := New(e.config(t, []string{"dd"}, false), e.state, slog.New(slog.DiscardHandler))
	d, _ := testDatabase(t, e, r)
	n := 0
	read := func(upper snapshot.Key) *schema.Table {
		t.Helper()
		n++
		res, err := d.ReadChunkAfterLow(ctx, "low:"+strconv.Itoa(n), "public.dd", nil, snapshot.ChunkQuery{Upper: upper, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Rows) != 10 {
			t.Fatalf("chunk %d read %d rows, want 10", n, len(res.Rows))
		}
		return res.Rows[0].Table
	}
	cols := func(tb *schema.Table) string {
		s := ""
		for _, c := range tb.Columns {
			s += fmt.Sprintf("%s:%v ", c.Name, c.Kind)
		}
		return s + fmt.Sprint("key ", tb.Key)
	}
	one := snapshot.Key{"10"}
	first := read(one)
	if again := read(one); again != first {
		t.Errorf("a chunk of the unchanged table described it again (%s, then %s), want its description reused", cols(first), cols(again))
	}
	steps := []struct {
		ddl   string
		upper snapshot.Key
		want  string
	}{
		{"ALTER TABLE dd ADD COLUMN w text DEFAULT 'x'", one,
			fmt.Sprintf("id:%v v:%v w:%v key [0]", schema.Int32, schema.Int32, schema.String)},
		{"ALTER TABLE dd ALTER COLUMN v TYPE bigint", one,
			fmt.Sprintf("id:%v v:%v w:%v key [0]", schema.Int32, schema.Int64, schema.String)},
		{"ALTER TABLE dd DROP COLUMN w", one,
			fmt.Sprintf("id:%v v:%v key [0]", schema.Int32, schema.Int64)},
		{"ALTER TABLE dd DROP CONSTRAINT dd_pkey, ADD PRIMARY KEY (v, id)", snapshot.Key{"10", "10"},
			fmt.Sprintf("id:%v v:%v key [1 0]", schema.Int32, schema.Int64)},
	}
	prev := first
	for _, s := range steps {
		e.exec(t, s.ddl)
		got := read(s.upper)
		if c := cols(got); c != s.want || got == prev {
			t.Errorf("after %q a chunk reads the table as %s (described again: %v), want %s", s.ddl, c, got != prev, s.want)
		}
		prev = got
	}
}

// TestChunkVersionPrepared: a chunk's catalog version query is a statement
// prepared once on the chunk's connection and executed by every chunk, so
// the server plans it once (a generic plan, after its first custom ones)
// instead of in every chunk (about 0.2 ms of its CPU each). The chunks
// read every row once all the same.
func TestChunkVersionPrepared(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := setup(t, `CREATE TABLE vp (id int PRIMARY KEY, v int); INSERT INTO vp SELECT g, g FROM generate_series(1, 100) g`)
	r := New(e.config(t, []string{"vp"}, false), e.state, slog.New(slog.DiscardHandler))
	d, conn := testDatabase(t, e, r)
	var after snapshot.Key
	rows := 0
	for i := range 10 {
		res, err := d.ReadChunkAfterLow(ctx, "low:vp-"+strconv.Itoa(i), "public.vp", nil,
			snapshot.ChunkQuery{After: after, Upper: snapshot.Key{"100"}, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		rows += len(res.Rows)
		after = res.Last
	}
	if rows != 100 || fmt.Sprint(after) != "[100]" {
		t.Fatalf("ten chunks of 10 read %d rows ending at %v, want 100 ending at [100]", rows, after)
	}
	var n, generic int64
	if err := conn.QueryRow(ctx, `SELECT count(*), COALESCE(sum(generic_plans), 0) FROM pg_prepared_statements WHERE name = $1`,
		versionStmt).Scan(&n, &generic); err != nil {
		t.Fatal(err)
	}
	if n != 1 || generic == 0 {
		t.Fatalf("after ten chunks the connection has %d prepared statements %q with %d generic plans used, "+
			"want 1 with some: the catalog version query is planned in every chunk", n, versionStmt, generic)
	}
}
