package mysql

import (
	"context"
	"reflect"
	"testing"

	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// loadPath is one way the load reads chunks.
type loadPath struct {
	name string
	d    *myDatabase
}

// chunkDatabases are the two ways the load reads chunks: through
// database/sql (read-only snapshots) and through go-mysql's client
// (chunkconn.go), as the reader's user.
func (e *env) chunkDatabases(t *testing.T) []loadPath {
	t.Helper()
	ci, err := parseDSN(e.srv.ReplDSN(e.name))
	if err != nil {
		t.Fatal(err)
	}
	fast := &myDatabase{db: e.db, flavor: FlavorMariaDB, ci: &ci}
	t.Cleanup(fast.closeConns)
	return []loadPath{{"database/sql", &myDatabase{db: e.db, flavor: FlavorMariaDB}}, {"go-mysql", fast}}
}

// TestInterpolate: arguments become literals in order, escaped; a ? in
// quotes stays; a count that does not match is an error.
func TestInterpolate(t *testing.T) {
	got, err := interpolate("SELECT `a?` FROM t WHERE (x > ? AND y = 'it''s ?' AND z = \"\\\"?\") OR k <= ? OR b = ? OR f = ? OR u = ? OR n = ?",
		[]any{int64(-7), "O'Reilly\\\n\x00\x1a\"", []byte{0, 'a', '\''}, 1.5e-7, uint64(18446744073709551615), []byte(nil)})
	if err != nil {
		t.Fatal(err)
	}
	want := "SELECT `a?` FROM t WHERE (x > -7 AND y = 'it''s ?' AND z = \"\\\"?\") OR k <= 'O\\'Reilly\\\\\\n\\0\\Z\\\"' OR " +
		"b = _binary'\\0a\\'' OR f = 1.5e-07 OR u = 18446744073709551615 OR n = NULL"
	if got != want {
		t.Errorf("interpolate:\n got %s\nwant %s", got, want)
	}
	if _, err := interpolate("SELECT ? + ?", []any{int64(1)}); err == nil {
		t.Error("two placeholders, one argument: no error")
	}
	if _, err := interpolate("SELECT '?'", []any{int64(1)}); err == nil {
		t.Error("no placeholder, one argument: no error")
	}
	if _, err := interpolate("SELECT ?", []any{struct{}{}}); err == nil {
		t.Error("an argument of an unknown type: no error")
	}
}

// TestChunkEmptyValues: empty texts, binaries, enums and sets in a chunk's
// first rows are empty values, not NULL, on both load paths (go-mysql's
// client leaves a column's buffer nil until a value is not empty), and
// NULLs stay NULL.
func TestChunkEmptyValues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE ev (id INT PRIMARY KEY, c CHAR(3), vc VARCHAR(5), tx TEXT, vb VARBINARY(4), bl BLOB, en ENUM('', 'a'), st SET('a','b'))",
		"INSERT INTO ev VALUES (1, '', '', '', '', '', '', ''), (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL), (3, 'x', 'y', 'z', x'01', x'02', 'a', 'a,b')")
	want := [][]any{
		{int64(1), "", "", "", []byte{}, []byte{}, "", ""},
		{int64(2), nil, nil, nil, nil, nil, nil, nil},
		{int64(3), "x", "y", "z", []byte{1}, []byte{2}, "a", "a,b"},
	}
	for _, load := range e.chunkDatabases(t) {
		ch, err := load.d.ReadChunk(context.Background(), e.name+".ev", nil, snapshot.ChunkQuery{Upper: snapshot.Key{"10"}, Limit: 10})
		if err != nil {
			t.Fatalf("%s: %v", load.name, err)
		}
		if len(ch.Rows) != len(want) {
			t.Fatalf("%s: %d rows, want %d", load.name, len(ch.Rows), len(want))
		}
		for i, c := range ch.Rows {
			if !reflect.DeepEqual(c.After, want[i]) {
				t.Errorf("%s: row %d: %#v, want %#v", load.name, i+1, c.After, want[i])
			}
		}
	}
}
