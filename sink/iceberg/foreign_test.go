package iceberg

import (
	"testing"
)

// TestForeignRewrite: another engine rewrites the table's data files (a
// compaction by Spark or Trino: the same rows in new files) between two
// commits. The key index then points at files that are gone; the next
// commit rebuilds it and replaces the rows (it paused the table with an
// "index out of date" until the loop's retry rebuilt it at its start).
func TestForeignRewrite(t *testing.T) {
	for _, version := range []int{2, 3} {
		t.Run(map[int]string{2: "v2", 3: "v3"}[version], func(t *testing.T) {
			cat := testCatalog(t)
			w := upsertWriter(t, cat, version, 1)
			w.buf = []change{kvInsert(1, "a", 0), kvInsert(2, "b", 1), kvInsert(3, "c", 2)}
			w.next[0] = 3
			if err := w.commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			w.buf = []change{kvInsert(2, "b2", 3)}
			w.next[0] = 4
			if err := w.commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			// The foreign compaction: every live row into one new file.
			tbl, err := cat.LoadTable(t.Context(), w.cfg.Ident)
			if err != nil {
				t.Fatal(err)
			}
			at, err := tbl.Scan().ToArrowTable(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			tx := tbl.NewTransaction()
			if err := tx.OverwriteTable(t.Context(), at, 1024, nil); err != nil {
				t.Fatal(err)
			}
			at.Release()
			if _, err := tx.Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			w.buf = []change{kvInsert(1, "a2", 4), kvInsert(3, "c2", 5)}
			w.next[0] = 6
			if err := w.commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			got := scanTable(t, cat, w.cfg.Ident)
			want := model{1: "a2|∅", 2: "b2|∅", 3: "c2|∅"}
			if len(got) != len(want) || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
				t.Fatalf("after a foreign rewrite: %v, want %v", got, want)
			}
		})
	}
}
