package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/schema"
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

// TestColumnRecordMoves: the reader's column record tells a recreated
// column (a new attnum under a recorded name, or a dropped name back with
// a new attnum) and a renamed one (a recorded attnum under a new name),
// and takes nothing for new DDL when the stream replays, after a crash,
// versions from before the record (the crash suite's snapshots restarted
// when a replayed version brought a dropped column back).
func TestColumnRecordMoves(t *testing.T) {
	r := &Reader{cfg: Config{Slot: "s"}, state: &memState{}, known: known{}, cols: map[string]*tableColumns{}}
	type call struct{ recreated, renamed []string }
	var calls []call
	step := func(cols []string, ids []int, at uint64) {
		t.Helper()
		tb := &schema.Table{Namespace: "public", Name: "t"}
		for _, c := range cols {
			tb.Columns = append(tb.Columns, schema.Column{Name: c, Kind: schema.Int64})
		}
		if _, err := r.version(t.Context(), tb, ids, at, func(_, recreated, renamed []string) error {
			calls = append(calls, call{recreated, renamed})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(what string, want ...call) {
		t.Helper()
		if fmt.Sprint(calls) != fmt.Sprint(want) {
			t.Errorf("%s: calls %v, want %v", what, calls, want)
		}
		calls = nil
	}
	step([]string{"id", "v", "c"}, []int{1, 2, 3}, 100)
	expect("the first version")
	step([]string{"id", "v"}, []int{1, 2}, 200)
	expect("c dropped", call{})
	step([]string{"id", "v", "c"}, []int{1, 2, 0}, 150) // replayed: the catalog has no c now
	expect("a replayed version from before the drop")
	step([]string{"id", "v"}, []int{1, 2}, 200)
	expect("the drop replayed")
	step([]string{"id", "v", "c"}, []int{1, 2, 4}, 300)
	expect("c added again", call{recreated: []string{"c"}})
	step([]string{"id", "w", "c"}, []int{1, 2, 4}, 400)
	expect("v renamed to w", call{renamed: []string{"w"}})
	step([]string{"id", "w", "c"}, []int{1, 2, 5}, 500)
	expect("c dropped and added between two versions", call{recreated: []string{"c"}})
}
