package iceberg

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/parquet-go/parquet-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestUpdateKeepsRowID (issue 22): by the v3 spec's row lineage rules, an
// updated row keeps its _row_id and takes the update's sequence number as
// its _last_updated_sequence_number, read through iceberg-go's scan; a
// new key gets a new id, and a key deleted and inserted again in one
// commit is a new row. The old id is found in every kind of file: one the
// writer loaded (first_row_id from the manifests), one it wrote since
// (first_row_id read back after the commit), one holding explicit ids (an
// earlier update, a compaction), after a restart too. Every update is
// also checked on the Avro codec's path (direct) and the generic one.
func TestUpdateKeepsRowID(t *testing.T) {
	t.Run("generic", func(t *testing.T) { testUpdateKeepsRowID(t, false) })
	t.Run("codec", func(t *testing.T) { testUpdateKeepsRowID(t, true) })
}

func testUpdateKeepsRowID(t *testing.T, direct bool) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	w.s.cfg.Compaction = CompactionConfig{MinGroup: 2}
	var off int64
	want := model{}
	commit := func(w *tableWriter, ops ...any) {
		t.Helper()
		w.buf = nil
		for i := 0; i < len(ops); i += 3 {
			op, id, v := ops[i].(byte), int64(ops[i+1].(int)), ops[i+2].(string)
			c := change{table: kv, offset: off, env: &schema.Envelope{Op: op, After: []any{id, v, nil}}}
			if op == 'd' {
				c.env.After, c.env.Before = nil, []any{id, nil, nil}
				delete(want, id)
			} else {
				want[id] = v + "|∅"
			}
			c.env.Source.Position = []byte(fmt.Sprintf("%012d", off))
			if direct {
				c = encoded(c)
			}
			w.buf = append(w.buf, c)
			off++
		}
		w.next[0] = off
		if err := w.commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
	}
	seq := func(w *tableWriter) int64 { return w.tbl.CurrentSnapshot().SequenceNumber }
	// expect checks every row's lineage: updated keys keep their id and
	// take the last commit's sequence number, new ones get fresh ids.
	expect := func(w *tableWriter, what string, before map[int64]lineage, updated, fresh []int64) map[int64]lineage {
		t.Helper()
		after := scanLineage(t, cat, w.cfg.Ident)
		ids := map[int64]int64{}
		for k, l := range after {
			if other, dup := ids[l.rowID]; dup {
				t.Errorf("%s: keys %d and %d share row id %d", what, k, other, l.rowID)
			}
			ids[l.rowID] = k
		}
		for k, l := range after {
			b, had := before[k]
			switch {
			case contains64(fresh, k):
				if had && b.rowID == l.rowID {
					t.Errorf("%s: key %d is a new row but kept row id %d", what, k, l.rowID)
				}
			case contains64(updated, k):
				if !had || b.rowID != l.rowID || l.seq != seq(w) {
					t.Errorf("%s: updated key %d has lineage %+v, want row id %d (had %+v) and sequence number %d", what, k, l, b.rowID, b, seq(w))
				}
			default:
				if l != b {
					t.Errorf("%s: untouched key %d has lineage %+v, had %+v", what, k, l, b)
				}
			}
		}
		return after
	}
	commit(w, byte('c'), 1, "a", byte('c'), 2, "b", byte('c'), 3, "c", byte('c'), 4, "d", byte('c'), 5, "e")
	l := scanLineage(t, cat, w.cfg.Ident)
	w = reopen(t, cat, w) // the first file's first_row_id comes from the loaded manifests
	defer func() { w.close() }()
	commit(w, byte('u'), 1, "a1", byte('u'), 2, "b1", byte('c'), 6, "f", byte('d'), 3, "", byte('c'), 3, "c again")
	l = expect(w, "updates of loaded rows", l, []int64{1, 2}, []int64{3, 6})
	// Key 6 lives in a file this writer added; key 1 holds an explicit id.
	commit(w, byte('u'), 6, "f1", byte('u'), 1, "a2", byte('u'), 4, "d1")
	l = expect(w, "updates of written rows", l, []int64{6, 1, 4}, nil)
	if !compactOnce(t, w, nil) {
		t.Fatal("nothing to compact")
	}
	l = expect(w, "a compaction", l, nil, nil)
	commit(w, byte('u'), 6, "f2", byte('u'), 5, "e1")
	l = expect(w, "updates of compacted rows", l, []int64{6, 5}, nil)

	w = reopen(t, cat, w)
	commit(w, byte('u'), 6, "f3", byte('u'), 2, "b2", byte('u'), 3, "c1")
	expect(w, "updates after a restart", l, []int64{6, 2, 3}, nil)
}

func contains64(s []int64, v int64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// reopen closes w and loads its table in a new writer, as at a restart.
func reopen(t *testing.T, cat catalog.Catalog, w *tableWriter) *tableWriter {
	t.Helper()
	dir, next := w.s.cfg.IndexDir, w.next[0]
	w.close()
	w2 := upsertWriter(t, cat, 3, 1)
	w2.s.cfg.IndexDir, w2.s.cfg.Compaction = dir, w.s.cfg.Compaction
	if err := w2.load(t.Context()); err != nil {
		t.Fatal(err)
	}
	w2.next[0] = next
	return w2
}

// TestExplicitRowIDsFromStats: a data file whose _row_id column is null in
// every row group (an insert's file) has no explicit ids, known from its
// footer without reading the column (allNull); a file with one explicit
// id among the nulls, in any row group, is read and gives every position.
func TestExplicitRowIDsFromStats(t *testing.T) {
	type row struct {
		ID    int64  `parquet:"id"`
		RowID *int64 `parquet:"_row_id,optional"`
	}
	dir := t.TempDir()
	write := func(name string, n, explicitAt int) string {
		t.Helper()
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w := parquet.NewGenericWriter[row](f, parquet.MaxRowsPerRowGroup(100))
		rows := make([]row, n)
		for i := range rows {
			rows[i].ID = int64(i)
			if i == explicitAt {
				id := int64(7000 + i)
				rows[i].RowID = &id
			}
		}
		if _, err := w.Write(rows); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		return path
	}
	nulls, mixed := write("nulls.parquet", 250, -1), write("mixed.parquet", 250, 230)
	for _, c := range []struct {
		path    string
		allNull bool
	}{{nulls, true}, {mixed, false}} {
		pf, closeFn, err := parquetFile(icebergio.LocalFS{}, c.path)
		if err != nil {
			t.Fatal(err)
		}
		fc, ok := columnFor(pf, iceberg.RowID())
		if !ok || len(pf.RowGroups()) != 3 {
			t.Fatalf("%s: _row_id column found %v, %d row groups; want found, 3", c.path, ok, len(pf.RowGroups()))
		}
		if got := allNull(pf, fc.leaf); got != c.allNull {
			t.Errorf("%s: allNull %v, want %v", c.path, got, c.allNull)
		}
		closeFn()
	}
	r := &rowIDs{ids: map[string]*idList{}}
	if ids, err := r.explicit(icebergio.LocalFS{}, nulls); err != nil || ids != nil {
		t.Errorf("all-null file: ids %v, err %v; want none", ids, err)
	}
	ids, err := r.explicit(icebergio.LocalFS{}, mixed)
	if err != nil || ids == nil || ids.n != 250 {
		t.Fatalf("mixed file: %+v, err %v; want 250 ids", ids, err)
	}
	for i := int64(0); i < 251; i++ {
		if want := int64(noRowID); i == 230 && ids.at(i) != 7230 || i != 230 && ids.at(i) != want {
			t.Errorf("mixed file: position %d has id %d", i, ids.at(i))
		}
	}
}

// TestIDList: a file's explicit ids kept as runs answer every position as
// the ids did, and take a fraction of their room; ids without runs are
// kept as read.
func TestIDList(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	runs := make([]int64, 0, 100_000)
	for len(runs) < cap(runs) {
		// A compacted file: runs of consecutive ids (inserts), nulls, and
		// single moved ids (updated rows).
		switch n, start := 1+rng.IntN(500), rng.Int64N(1<<40); rng.IntN(4) {
		case 0:
			for i := 0; i < n && len(runs) < cap(runs); i++ {
				runs = append(runs, noRowID)
			}
		case 1:
			runs = append(runs, start)
		default:
			for i := 0; i < n && len(runs) < cap(runs); i++ {
				runs = append(runs, start+int64(i))
			}
		}
	}
	scattered := make([]int64, 10_000)
	for i := range scattered {
		scattered[i] = rng.Int64N(1 << 40)
	}
	for _, c := range []struct {
		name string
		ids  []int64
		raw  bool
	}{{"runs", runs, false}, {"scattered", scattered, true}, {"one", []int64{noRowID}, true}} {
		l := newIDList(c.ids)
		if (l.raw != nil) != c.raw {
			t.Errorf("%s: kept raw %v, want %v", c.name, l.raw != nil, c.raw)
		}
		if !c.raw && l.bytes()*2 > 8*len(c.ids) {
			t.Errorf("%s: %d bytes for %d ids", c.name, l.bytes(), len(c.ids))
		}
		for i, id := range c.ids {
			if got := l.at(int64(i)); got != id {
				t.Fatalf("%s: position %d: %d, want %d", c.name, i, got, id)
			}
		}
		if got := l.at(int64(len(c.ids))); got != noRowID {
			t.Errorf("%s: past the end: %d", c.name, got)
		}
	}
	if (*idList)(nil).at(0) != noRowID || newIDList(nil) != nil {
		t.Error("a nil list")
	}
}
