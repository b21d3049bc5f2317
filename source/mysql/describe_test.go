package mysql

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// TestChunkDescriptionCached: chunks reuse the table's description while
// the stream counts no DDL statement; a chunk read with a description from
// before a counted statement is inconsistent (the engine reads it again),
// and the next read describes the table again; a read that fails with a
// cached description (a column dropped) is read again, described again.
func TestChunkDescriptionCached(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE dd (id INT PRIMARY KEY, a INT, b VARCHAR(10))", "INSERT INTO dd VALUES (1, 10, 'x'), (2, 20, 'y')")
	ci, err := parseDSN(e.srv.ReplDSN(e.name))
	if err != nil {
		t.Fatal(err)
	}
	var ddl atomic.Uint64
	d := &myDatabase{db: e.db, flavor: FlavorMariaDB, ci: &ci, ddl: &ddl}
	t.Cleanup(d.closeConns)
	ctx, qn := context.Background(), e.name+".dd"
	if _, err := d.Describe(ctx, qn); err != nil {
		t.Fatal(err)
	}
	read := func(what string, cols string) *snapshot.Chunk {
		t.Helper()
		ch, err := d.ReadChunk(ctx, qn, nil, snapshot.ChunkQuery{Upper: snapshot.Key{"100"}, Limit: 100})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var names []string
		for _, c := range ch.Rows[0].Table.Columns {
			names = append(names, c.Name)
		}
		if len(ch.Rows) != 2 || strings.Join(names, ",") != cols || len(ch.Rows[0].After) != len(names) {
			t.Fatalf("%s: %d rows of columns %v (%d values), want 2 of %s", what, len(ch.Rows), names, len(ch.Rows[0].After), cols)
		}
		return ch
	}
	if ch := read("first read", "id,a,b"); ch.Consistent == nil || !ch.Consistent(nil) {
		t.Error("a chunk read with no DDL statement counted is not consistent")
	}
	e.exec(t, "ALTER TABLE dd ADD COLUMN c INT DEFAULT 5")
	ch := read("after ADD COLUMN, not counted yet", "id,a,b") // the cached description: no information-schema reads
	if !ch.Consistent(nil) {
		t.Error("a chunk is inconsistent before the stream counted a DDL statement")
	}
	ddl.Add(1) // the stream meets the ALTER
	if ch.Consistent(nil) {
		t.Error("a chunk described before a DDL statement the stream counted is consistent: its rows lack column c")
	}
	ch = read("after the count", "id,a,b,c")
	if !ch.Consistent(nil) || ch.Rows[0].After[3] != int64(5) {
		t.Errorf("read described again: consistent %v, c = %#v; want true, 5", ch.Consistent(nil), ch.Rows[0].After[3])
	}
	e.exec(t, "ALTER TABLE dd DROP COLUMN b")
	ch = read("after DROP COLUMN, not counted", "id,a,c") // the SELECT of b failed; described again
	ddl.Add(1)
	if ch.Consistent(nil) {
		t.Error("a chunk read before a DDL statement the stream counted is consistent")
	}
}

// TestStreamCountsDDL: the stream counts a DDL statement on a captured
// table, once handled, and not one on another table.
func TestStreamCountsDDL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE cnt (id INT PRIMARY KEY)")
	r, _ := e.reader(t, newMemState(), newDedupe(1), "cnt")
	e.exec(t, "CREATE TABLE other (id INT PRIMARY KEY)", "ALTER TABLE other ADD COLUMN a INT", "alter table `cnt` add column a int")
	deadline := time.Now().Add(30 * time.Second)
	for r.ddl.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := r.ddl.Load(); n != 1 {
		t.Fatalf("after two statements on another table and one on the captured one: %d counted, want 1", n)
	}
}
