package iceberg

import (
	"math/rand/v2"
	"testing"
)

// TestMaintenanceStatusFreshAfterCompaction: the table's maintenance
// status (cdcd maintenance status) shows the files a compaction left as
// soon as it is committed, not the files of the last data commit until
// the next one.
func TestMaintenanceStatusFreshAfterCompaction(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	w.s.cfg.Compaction = CompactionConfig{MinGroup: 3}
	rng := rand.New(rand.NewPCG(5, 8))
	want := model{}
	var off int64
	for i := 0; i < 8; i++ {
		w.buf = randomChanges(rng, want, 1+rng.IntN(40), &off)
		w.next[0] = off
		if err := w.commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	before := w.stats.Maintenance.Load()
	if before == nil || before.DataFiles < 3 {
		t.Fatalf("status before the compaction: %+v", before)
	}
	if !compactOnce(t, w, nil) {
		t.Fatal("nothing to compact")
	}
	after := w.stats.Maintenance.Load()
	if after.DataFiles != len(w.up.data) || after.DataFiles >= before.DataFiles || after.CompactionRuns != 1 || after.LastCompaction == "" {
		t.Errorf("status after the compaction: %d data files (the table has %d, had %d), %d runs, last %q",
			after.DataFiles, len(w.up.data), before.DataFiles, after.CompactionRuns, after.LastCompaction)
	}
}
