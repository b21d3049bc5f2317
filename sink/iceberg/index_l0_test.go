package iceberg

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// TestIndexL0CompactsAtEightSublevels: with the key index's defaults,
// pebble leaves L0 alone until it is 8 sublevels deep and then compacts
// it. Each round flushes a batch of keys spread over the whole key space,
// as a stream's updates are, so each flush is a sublevel of its own.
// openIndex's L0CompactionThreshold of 16 means 8 only through pebble's
// fill factor (2 × sublevels / threshold, calculateL0FillFactor), which
// the index's options were long described without ("16 L0 tables a
// compaction"): this fails if that rule or the default moves, and how
// many sublevels a stream's lookups pass with it (BENCHMARKS.md, "The key
// index's L0 at 16 sublevels: tried, not kept (lead, session 37)").
func TestIndexL0CompactsAtEightSublevels(t *testing.T) {
	x, err := openIndex(t.TempDir(), indexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.close()
	flush := func(round int) {
		t.Helper()
		b := x.db.NewBatch()
		for k := range 2000 {
			key := binary.BigEndian.AppendUint64([]byte{idxPrefixKey}, uint64(k*1000+round))
			if err := b.Set(key, []byte{1, byte(round)}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if err := x.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 7 {
		flush(round)
	}
	// A compaction pebble picked would have begun by now: Count counts the
	// finished ones, NumInProgress those running.
	time.Sleep(200 * time.Millisecond)
	m := x.db.Metrics()
	if got := m.Levels[0].Sublevels; got != 7 || m.Compact.Count != 0 || m.Compact.NumInProgress != 0 {
		t.Fatalf("after 7 flushes: L0 %d sublevels deep, %d compactions done, %d running; want 7 and none",
			got, m.Compact.Count, m.Compact.NumInProgress)
	}
	flush(7)
	deadline := time.Now().Add(20 * time.Second)
	for {
		m = x.db.Metrics()
		if m.Compact.Count > 0 && m.Levels[0].Sublevels < 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("8 flushes: L0 still %d sublevels deep after 20 s, %d compactions; want it compacted", m.Levels[0].Sublevels, m.Compact.Count)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
