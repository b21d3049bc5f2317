package mysql

import (
	"fmt"
	"testing"

	"github.com/cdcd-dev/cdcd/source"
)

// TestDDLMidStream: each ALTER gives the rows after it a new table
// version, rows before it keep theirs, and the shape comes from the binlog
// even when the reader reads it after later DDL (the reader starts only
// after all statements ran).
func TestDDLMidStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY, a INT)")
	st := newMemState()
	d := newDedupe(2)
	_, stop := e.reader(t, st, d, "t")
	stop() // the checkpoint is now before every statement below
	e.exec(t,
		"INSERT INTO t VALUES (1, 10)",
		"ALTER TABLE t ADD COLUMN b VARCHAR(10) DEFAULT 'x'",
		"INSERT INTO t VALUES (2, 20, 'y')",
		"ALTER TABLE t DROP COLUMN a",
		"INSERT INTO t VALUES (3, 'z')",
		"ALTER TABLE t MODIFY b TEXT",
		"UPDATE t SET b = 'w' WHERE id = 3",
		"TRUNCATE t",
		"INSERT INTO t VALUES (4, 'v')")
	e.reader(t, st, d, "t")
	got := d.waitFor(t, "6 changes", func(cs []source.Change) bool { return len(cs) >= 6 })
	want := []struct{ shape, row string }{
		{"(id int32 key, a int32 null)", "[1 10]"},
		{"(id int32 key, a int32 null, b string null)", "[2 20 y]"},
		{"(id int32 key, b string null)", "[3 z]"},
		{"(id int32 key, b string null)", "[3 w]"},
		{"(id int32 key, b string null)", "[]"},
		{"(id int32 key, b string null)", "[4 v]"},
	}
	for i, w := range want {
		shape := got[i].Table.String()[len(e.name)+2:]
		if shape != w.shape || fmt.Sprint(got[i].After) != w.row {
			t.Errorf("change %d: %s %v, want %s %s", i, shape, got[i].After, w.shape, w.row)
		}
	}
	if got[3].Table.Columns[1].SourceType != "text" || got[2].Table.Columns[1].SourceType != "varchar(10)" {
		t.Errorf("source types %q then %q, want varchar(10) then text", got[2].Table.Columns[1].SourceType, got[3].Table.Columns[1].SourceType)
	}
	if got[4].Op != source.OpTruncate {
		t.Errorf("change 4 is %s, want a truncate", got[4].Op)
	}
	if got[0].Table == got[1].Table || got[3].Table != got[5].Table {
		t.Error("versions do not share the shape's pointer exactly while the shape is the same")
	}
}
