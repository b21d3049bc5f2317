package iceberg

import (
	"strings"
	"testing"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
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
			foreignRewrite(t, cat, w.cfg.Ident)
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

// TestOffsetsAfterForeignExpiry: another engine's commits on top of cdcd's
// and an expiry that keeps only the newest break the walk from the current
// snapshot to the one carrying cdcd's offsets. A restart resumes at the
// tagged one (it resumed from the log's start: every change again); with
// the tag gone too, the table pauses instead.
func TestOffsetsAfterForeignExpiry(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	w.buf = []change{kvInsert(1, "a", 0), kvInsert(2, "b", 1), kvInsert(3, "c", 2)}
	w.next[0] = 3
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	for range 2 { // two rewrites, so the one between is expired
		foreignRewrite(t, cat, w.cfg.Ident)
	}
	expire := func(tbl *table.Table) *table.Table {
		tx := tbl.NewTransaction()
		if err := tx.ExpireSnapshots(table.WithRetainLast(1), table.WithOlderThan(0)); err != nil {
			t.Fatal(err)
		}
		tbl, err := tx.Commit(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return tbl
	}
	tbl, err := cat.LoadTable(t.Context(), w.cfg.Ident)
	if err != nil {
		t.Fatal(err)
	}
	tbl = expire(tbl)
	next, snap, err := committedOffsets(tbl, w.s.cfg.Pipeline, 1)
	if err != nil || snap == nil || next[0] != 3 {
		t.Fatalf("offsets after the expiry: %v (snapshot %v, %v), want 3 from the tagged snapshot", next, snap, err)
	}

	if _, _, err := cat.CommitTable(t.Context(), w.cfg.Ident, nil, []table.Update{table.NewRemoveSnapshotRefUpdate(OffsetsTag)}); err != nil {
		t.Fatal(err)
	}
	if tbl, err = cat.LoadTable(t.Context(), w.cfg.Ident); err != nil {
		t.Fatal(err)
	}
	tbl = expire(tbl)
	_, _, err = committedOffsets(tbl, w.s.cfg.Pipeline, 1)
	if classify(err) != ErrPaused || !strings.Contains(err.Error(), "carries cdcd's offsets") {
		t.Fatalf("offsets with the tag gone: %v, want a pause", err)
	}
}

// foreignRewrite commits what another engine's compaction would: every
// live row of the table into new files (iceberg-go's overwrite).
func foreignRewrite(t *testing.T, cat catalog.Catalog, ident table.Identifier) {
	t.Helper()
	tbl, err := cat.LoadTable(t.Context(), ident)
	if err != nil {
		t.Fatal(err)
	}
	at, err := tbl.Scan().ToArrowTable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	tx := tbl.NewTransaction()
	if err := tx.OverwriteTable(t.Context(), at, 1024, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}
