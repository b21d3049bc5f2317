package iceberg

import (
	"math/rand/v2"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// liveFiles reads the current snapshot of a table: its data files' paths
// and its position-delete files' entries (by delete file).
func liveFiles(t *testing.T, cat catalog.Catalog, ident table.Identifier) (map[string]bool, map[string][]posDelete) {
	t.Helper()
	tbl, err := cat.LoadTable(t.Context(), ident)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := tbl.FS(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := tbl.CurrentSnapshot().Manifests(fs)
	if err != nil {
		t.Fatal(err)
	}
	pathField, _ := iceberg.PositionalDeleteSchema.FindFieldByName("file_path")
	posField, _ := iceberg.PositionalDeleteSchema.FindFieldByName("pos")
	data, deletes := map[string]bool{}, map[string][]posDelete{}
	for _, mf := range mfs {
		for e, err := range mf.Entries(fs, true) {
			if err != nil {
				t.Fatal(err)
			}
			df := e.DataFile()
			switch df.ContentType() {
			case iceberg.EntryContentData:
				data[df.FilePath()] = true
			case iceberg.EntryContentPosDeletes:
				entries, _, err := readPosDeletes(fs, df, pathField, posField, nil)
				if err != nil {
					t.Fatal(err)
				}
				deletes[df.FilePath()] = entries
			}
		}
	}
	return data, deletes
}

// TestCompactionDropsPositionDeletes (issue 22, format 2): after a
// compaction, no live position delete names a data file the compaction
// removed — including the entries of delete files that also name files
// it kept (those are written again without them) — and the table reads
// the same.
func TestCompactionDropsPositionDeletes(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 2, 1)
	w.s.cfg.Compaction = CompactionConfig{MinGroup: 3, MaxRows: 100}
	rng := rand.New(rand.NewPCG(22, 2))
	want := model{}
	var off int64
	commit := func() {
		t.Helper()
		w.buf = randomChanges(rng, want, 1+rng.IntN(60), &off)
		w.next[0] = off
		if err := w.commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 12; i++ {
		commit()
	}
	dataBefore, deletesBefore := liveFiles(t, cat, w.cfg.Ident)
	if !compactOnce(t, w, nil) {
		t.Fatal("nothing to compact")
	}
	compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
	data, deletes := liveFiles(t, cat, w.cfg.Ident)
	removed := map[string]bool{}
	for path := range dataBefore {
		if !data[path] {
			removed[path] = true
		}
	}
	if len(removed) == 0 || len(removed) == len(dataBefore) {
		t.Fatalf("the compaction removed %d of %d data files: the test needs some removed and some kept", len(removed), len(dataBefore))
	}
	// The case at issue: a delete file naming a removed file and a kept one.
	mixed := 0
	for _, entries := range deletesBefore {
		names := map[bool]bool{}
		for _, e := range entries {
			names[removed[e.path]] = true
		}
		if names[true] && names[false] {
			mixed++
		}
	}
	if mixed == 0 {
		t.Fatal("no position-delete file named both a removed and a kept data file: the workload does not exercise the case")
	}
	for path, entries := range deletes {
		for _, e := range entries {
			if !data[e.path] {
				t.Errorf("live position-delete file %s names %s (position %d), which is no live data file", path, e.path, e.pos)
				break
			}
		}
	}
	// The writer's view agrees with the table's, and goes on right.
	if len(w.up.posDeletes) != len(deletes) {
		t.Errorf("the writer tracks %d position-delete files, the table has %d", len(w.up.posDeletes), len(deletes))
	}
	for i := 0; i < 3; i++ {
		commit()
	}
	compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
	spotCheckIndex(t, w)
	w.close()
}
