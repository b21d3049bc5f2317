package iceberg

import (
	"fmt"
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestAddedColumnInitialDefault: a column added with a default that rows
// already there hold (schema.Column.Default) gets it as its initial-default
// on format 3: iceberg-go's scan gives it to rows in files written before
// the column existed, rows of the older version written after the column
// was added get it, and a compaction (the sink's own reader) keeps it. On
// format 2 there is none (the source reads the rows again).
func TestAddedColumnInitialDefault(t *testing.T) {
	base := &schema.Table{Namespace: "public", Name: "kv", Columns: kv.Columns[:2], Key: []int{0}}
	added := &schema.Table{Namespace: "public", Name: "kv", Columns: append(append([]schema.Column(nil), kv.Columns[:2]...),
		schema.Column{Name: "n", Kind: schema.Int32, Nullable: true, Default: int64(9)}), Key: []int{0}}
	mk := func(tbl *schema.Table, op byte, off int64, after []any) change {
		c := change{table: tbl, offset: off, env: &schema.Envelope{Op: op, After: after}}
		c.env.Source.Position = []byte(fmt.Sprintf("%012d", off))
		return c
	}
	for _, format := range []int{3, 2} {
		t.Run(fmt.Sprint("v", format), func(t *testing.T) {
			cat := testCatalog(t)
			w := upsertWriter(t, cat, format, 1)
			defer w.close()
			w.buf = []change{mk(base, 'c', 0, []any{int64(1), "a"}), mk(base, 'c', 1, []any{int64(2), "b"}), mk(base, 'c', 2, []any{int64(3), "c"})}
			w.next[0] = 3
			if err := w.commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			// A row of the old version in the commit that adds the column
			// (changed before the ALTER in its transaction).
			w.buf = []change{mk(base, 'c', 3, []any{int64(4), "d"}), mk(added, 'c', 4, []any{int64(5), "e", int64(5)}),
				mk(added, 'u', 5, []any{int64(1), schema.Unchanged, int64(1)})}
			w.next[0] = 6
			if err := w.commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			f, _ := w.tbl.Schema().FindFieldByName("n")
			want := model{1: "a|1", 2: "b|9", 3: "c|9", 4: "d|9", 5: "e|5"}
			if format == 2 {
				if f.InitialDefault != nil {
					t.Fatalf("format 2: column n has initial-default %v", f.InitialDefault)
				}
				want = model{1: "a|1", 2: "b|∅", 3: "c|∅", 4: "d|∅", 5: "e|5"}
			} else if fmt.Sprint(f.InitialDefault) != "9" {
				t.Fatalf("column n: initial-default %v (%T), want 9", f.InitialDefault, f.InitialDefault)
			}
			compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
			compactAll(t, w)
			compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
		})
	}
}

// TestDroppedColumnReadsNull: once the source drops a column that has an
// initial-default, rows written after the drop (their version names it in
// Dropped) read NULL there through iceberg-go's scan and after a
// compaction, while a row of a version from before the column was added
// still reads the default.
func TestDroppedColumnReadsNull(t *testing.T) {
	base := &schema.Table{Namespace: "public", Name: "kv", Columns: kv.Columns[:2], Key: []int{0}}
	added := &schema.Table{Namespace: "public", Name: "kv", Columns: append(append([]schema.Column(nil), kv.Columns[:2]...),
		schema.Column{Name: "n", Kind: schema.Int32, Nullable: true, Default: int64(9)}), Key: []int{0}}
	dropped := &schema.Table{Namespace: "public", Name: "kv", Columns: kv.Columns[:2], Key: []int{0}, Dropped: []string{"n"}}
	mk := func(tbl *schema.Table, op byte, off int64, after []any) change {
		c := change{table: tbl, offset: off, env: &schema.Envelope{Op: op, After: after}}
		c.env.Source.Position = []byte(fmt.Sprintf("%012d", off))
		return c
	}
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	defer w.close()
	w.buf = []change{mk(base, 'c', 0, []any{int64(1), "a"}), mk(added, 'c', 1, []any{int64(2), "b", int64(2)})}
	w.next[0] = 2
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.buf = []change{mk(dropped, 'c', 2, []any{int64(3), "c"}), mk(dropped, 'u', 3, []any{int64(2), "B"}),
		mk(base, 'c', 4, []any{int64(4), "d"})}
	w.next[0] = 5
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := model{1: "a|9", 2: "B|∅", 3: "c|∅", 4: "d|9"}
	compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
	compactAll(t, w)
	compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
}

// TestDroppedColumnReadsNullChangelog: the same in append mode, whose
// builder fills the columns a row's version lacks.
func TestDroppedColumnReadsNullChangelog(t *testing.T) {
	base := &schema.Table{Namespace: "public", Name: "x", Columns: kv.Columns[:2], Key: []int{0}}
	added := &schema.Table{Namespace: "public", Name: "x", Columns: append(append([]schema.Column(nil), kv.Columns[:2]...),
		schema.Column{Name: "n", Kind: schema.Int32, Nullable: true, Default: int64(9)}), Key: []int{0}}
	dropped := &schema.Table{Namespace: "public", Name: "x", Columns: kv.Columns[:2], Key: []int{0}, Dropped: []string{"n"}}
	cat := testCatalog(t)
	w := newWriter(t, cat, "p", 1)
	var off int64
	commit := func(tbl *schema.Table, row []any) {
		t.Helper()
		w.buf = []change{{table: tbl, env: &schema.Envelope{After: row, Op: 'c'}, offset: off}}
		off++
		w.next[0] = off
		if err := w.commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	commit(base, []any{int64(1), "a"})
	commit(added, []any{int64(2), "b", int64(2)})
	commit(dropped, []any{int64(3), "c"})
	commit(base, []any{int64(4), "d"})
	got := scanRows(t, cat, w.cfg.Ident, []schema.Column{{Name: "id", Kind: schema.Int64}, {Name: "n", Kind: schema.Int32, Nullable: true}})
	want := map[int64]string{1: "9", 2: "2", 3: "<nil>", 4: "9"}
	for id, n := range want {
		if g := got[id]; g == nil || fmt.Sprint(g[1]) != n {
			t.Errorf("row %d: %v, want n = %s", id, g, n)
		}
	}
}
