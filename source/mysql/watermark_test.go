package mysql

import (
	"context"
	"fmt"
	"testing"

	"github.com/cdcd-dev/cdcd/source"
)

// TestWatermarks: marks written around a chunk read come back through the
// stream in commit order, between the changes committed before and after
// them, and IsWatermark decodes them.
func TestWatermarks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t VALUES (1, 1), (2, 2), (3, 3)")
	wt := e.name + ".cdcd_watermarks"
	ctx := context.Background()
	w, err := NewWatermarks(ctx, e.db, wt) // as root; the reader's user may not create it
	if err != nil {
		t.Fatal(err)
	}
	d := newDedupe(1)
	e.reader(t, newMemState(), d, "t", func(c *Config) { c.WatermarkTable = wt })
	desc, err := describeTable(ctx, e.db, FlavorMariaDB, e.name, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, "run1", "low", 0); err != nil {
		t.Fatal(err)
	}
	e.exec(t, "UPDATE t SET v = 20 WHERE id = 2")
	chunk, err := readChunk(ctx, e.db, desc, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, "run1", "high", 0); err != nil {
		t.Fatal(err)
	}
	e.exec(t, "UPDATE t SET v = 30 WHERE id = 3")
	next, err := readChunk(ctx, e.db, desc, chunk.Last, 2)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(chunk.Rows, chunk.Last) != "[[1 1] [2 20]] [2]" || fmt.Sprint(next.Rows) != "[[3 30]]" {
		t.Errorf("chunks %v last %v, then %v", chunk.Rows, chunk.Last, next.Rows)
	}
	if empty, err := readChunk(ctx, e.db, desc, next.Last, 2); err != nil || len(empty.Rows) != 0 || empty.Last != nil {
		t.Errorf("after the last chunk: %v %v", empty, err)
	}
	got := d.waitFor(t, "4 changes", func(cs []source.Change) bool { return len(cs) >= 4 })
	var seq []string
	for i := range got {
		if m, ok := IsWatermark(&got[i], wt); ok {
			seq = append(seq, fmt.Sprintf("%s:%s:%d", m.ID, m.Mark, m.Chunk))
			continue
		}
		seq = append(seq, fmt.Sprint(got[i].After))
	}
	if fmt.Sprint(seq) != "[run1:low:0 [2 20] run1:high:0 [3 30]]" {
		t.Errorf("stream order %v", seq)
	}
}
