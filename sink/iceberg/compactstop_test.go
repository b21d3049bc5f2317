package iceberg

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// TestCompactionCommitOutlivesStop: a stop (the writer's context cancelled)
// just before a compaction's catalog commit does not leave the commit's
// outcome unknown. The commit lands, the key index follows it (tagged with
// the compaction's snapshot, no intent left), and VerifyIndex finds
// nothing wrong. Before, the cancelled context failed the commit's read
// back, the intent stayed and the index's tag lagged the table, so the next
// start rebuilt the whole index (and `cdcd maintenance verify` after a
// clean stop reported it).
func TestCompactionCommitOutlivesStop(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	w.s.cfg.Compaction = CompactionConfig{MinGroup: 3}
	w.s.cfg.Compaction = w.s.cfg.Compaction.WithDefaults()
	rng := rand.New(rand.NewPCG(7, 11))
	want := model{}
	var off int64
	for range 6 {
		w.buf = randomChanges(rng, want, 20+rng.IntN(40), &off)
		w.next[0] = off
		if err := w.commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	c := w.compactor()
	c.Force()
	c.Poll(context.Background(), false)
	done := c.Done()
	if done == nil {
		t.Fatal("nothing to compact")
	}
	<-done
	ctx, stop := context.WithCancel(context.Background())
	prod := w.producer()
	hit := false
	prod.failpoint = func(name string) {
		if name == "before-catalog-commit" {
			hit = true
			stop() // the daemon stops while the commit is under way
		}
	}
	err := w.finishCompaction(ctx)
	prod.failpoint = w.failpoint
	if !hit {
		t.Fatal("the compaction's commit never reached the catalog")
	}
	if err != nil {
		t.Fatalf("a compaction's commit cut by a stop: %v", err)
	}
	if st := c.Stats(); st.LastErr != "" {
		t.Fatalf("compaction: %s", st.LastErr)
	}
	cur := w.tbl.CurrentSnapshot()
	if cur == nil || cur.Summary == nil || cur.Summary.Properties[PropCompactionID] == "" {
		t.Fatalf("the table's current snapshot is not the compaction's: %+v", cur)
	}
	if _, ok, err := w.up.idx.intent(); err != nil || ok {
		t.Fatalf("the compaction's intent is still in the key index (%v)", err)
	}
	if w.up.idx.snapshot != cur.SnapshotID {
		t.Fatalf("the key index is tagged %d, the table is at %d", w.up.idx.snapshot, cur.SnapshotID)
	}
	dir := w.s.cfg.IndexDir
	w.close()
	_, chk := verifyIndexOf(t, cat, w.cfg.Ident, dir)
	if len(chk.Problems) > 0 || chk.LiveRows != int64(len(want)) {
		t.Fatalf("after a compaction committed across a stop: %+v, want %d rows and no problems", chk, len(want))
	}
}

// verifyIndexOf loads the table ident from cat and runs VerifyIndex on the
// key index under dir (the sink stopped).
func verifyIndexOf(t *testing.T, cat catalog.Catalog, ident table.Identifier, dir string) (*table.Table, *IndexCheck) {
	t.Helper()
	tbl, err := cat.LoadTable(t.Context(), ident)
	if err != nil {
		t.Fatal(err)
	}
	chk, err := VerifyIndex(t.Context(), tbl, dir)
	if err != nil {
		t.Fatal(err)
	}
	return tbl, chk
}
