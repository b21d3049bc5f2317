package iceberg

import (
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// lineage is a row's _row_id and _last_updated_sequence_number.
type lineage struct{ rowID, seq int64 }

// scanLineage reads every live row's lineage through iceberg-go's scan,
// by key.
func scanLineage(t *testing.T, cat catalog.Catalog, ident table.Identifier) map[int64]lineage {
	t.Helper()
	tbl, err := cat.LoadTable(t.Context(), ident)
	if err != nil {
		t.Fatal(err)
	}
	at, err := tbl.Scan(table.WithSelectedFields("id"), table.WithRowLineage()).ToArrowTable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	out := map[int64]lineage{}
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		col := func(n string) *array.Int64 { return rec.Column(rec.Schema().FieldIndices(n)[0]).(*array.Int64) }
		ids, rowIDs, seqs := col("id"), col(iceberg.RowIDColumnName), col(iceberg.LastUpdatedSequenceNumberColumnName)
		for i := 0; i < int(rec.NumRows()); i++ {
			if rowIDs.IsNull(i) || seqs.IsNull(i) {
				t.Fatalf("key %d has no lineage", ids.Value(i))
			}
			out[ids.Value(i)] = lineage{rowIDs.Value(i), seqs.Value(i)}
		}
	}
	return out
}

// TestCompactionKeepsRowLineage (issue 22): by the v3 spec's row lineage
// rules, a row a compaction copies unchanged into another file keeps its
// _row_id and its _last_updated_sequence_number (both are written into
// the new file, since the inherited values would be the new file's
// first_row_id + position and the compaction's sequence number); row ids
// stay unique; the new files hold the two columns. A second compaction
// (of files that carry them explicitly) keeps them too, and so does a
// restart of the writer.
func TestCompactionKeepsRowLineage(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	w.s.cfg.Compaction = CompactionConfig{MinGroup: 2}
	rng := rand.New(rand.NewPCG(22, 3))
	want := model{}
	var off int64
	commit := func() {
		t.Helper()
		w.buf = randomChanges(rng, want, 1+rng.IntN(40), &off)
		w.next[0] = off
		if err := w.commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, before map[int64]lineage) map[int64]lineage {
		t.Helper()
		compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
		after := scanLineage(t, cat, w.cfg.Ident)
		if len(after) != len(before) {
			t.Fatalf("%s: %d rows, %d before", what, len(after), len(before))
		}
		seen := map[int64]int64{}
		for k, l := range after {
			if l != before[k] {
				t.Errorf("%s: key %d has lineage %+v, had %+v", what, k, l, before[k])
			}
			if other, dup := seen[l.rowID]; dup {
				t.Errorf("%s: keys %d and %d share row id %d", what, k, other, l.rowID)
			}
			seen[l.rowID] = k
		}
		return after
	}
	for i := 0; i < 8; i++ {
		commit()
	}
	before := scanLineage(t, cat, w.cfg.Ident)
	seqs := map[int64]bool{}
	for _, l := range before {
		seqs[l.seq] = true
	}
	if len(seqs) < 3 {
		t.Fatalf("the rows were last updated in %d commits: too few to tell sequence numbers apart", len(seqs))
	}
	old := len(w.up.data)
	if !compactOnce(t, w, nil) {
		t.Fatal("nothing to compact")
	}
	if len(w.up.data) >= old {
		t.Fatalf("%d data files before the compaction, %d after", old, len(w.up.data))
	}
	before = check("after a compaction", before)
	for path := range w.up.data {
		pf, closeFile, err := parquetFile(mustFS(t, w), path)
		if err != nil {
			t.Fatal(err)
		}
		_, hasRowID := columnFor(pf, iceberg.RowID())
		_, hasSeq := columnFor(pf, iceberg.LastUpdatedSequenceNumber())
		closeFile()
		if !hasRowID || !hasSeq {
			t.Errorf("compacted file %s lacks the lineage columns (row id %v, sequence number %v)", path, hasRowID, hasSeq)
		}
	}

	// More commits, then a compaction of files with explicit lineage and
	// files without.
	for i := 0; i < 4; i++ {
		commit()
	}
	before = scanLineage(t, cat, w.cfg.Ident)
	if !compactOnce(t, w, nil) {
		t.Fatal("nothing to compact the second time")
	}
	before = check("after a second compaction", before)

	dir := w.s.cfg.IndexDir
	w.close()
	w2 := upsertWriter(t, cat, 3, 1)
	w2.s.cfg.IndexDir, w2.s.cfg.Compaction = dir, CompactionConfig{MinGroup: 2}
	if err := w2.load(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer w2.close()
	check("after a restart", before)
}
