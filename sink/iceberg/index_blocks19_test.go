package iceberg

import (
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestIndexBlocksUncompressed: an index written with snappy (every index
// before blockCompression) opens with the defaults and reads every entry
// back, and the tables the default writes — a flush, an ingestion and the
// compaction that rewrites the old tables — are uncompressed. Fails if the
// default compresses or if an old index's tables cannot be read.
func TestIndexBlocksUncompressed(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(19, 1))
	want := map[int64]int64{} // key -> position
	key := func(i int64) []byte {
		k, err := encodeKey(nil, []any{i})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	// write sets n random keys below 1M (through the batch and the
	// memtable) and n keys above every key so far (held, then ingested),
	// then flushes the memtable to a table.
	next := int64(1_000_000)
	write := func(x *keyIndex, snap int64, n int) {
		t.Helper()
		b := x.newBatch()
		b.bulk = true
		for range n {
			i := r.Int64N(1_000_000)
			b.set(key(i), location{file: "f", pos: i + snap})
			want[i] = i + snap
		}
		for range n {
			b.set(key(next), location{file: "f", pos: next})
			want[next] = next
			next++
		}
		if err := b.apply(snap); err != nil {
			t.Fatal(err)
		}
		if err := x.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(x *keyIndex, step string) {
		t.Helper()
		keys := make([][]byte, 0, len(want))
		pos := make([]int64, 0, len(want))
		for i, p := range want {
			keys = append(keys, key(i))
			pos = append(pos, p)
		}
		found := 0
		if err := x.getMany(keys, nil, func(i int, loc location) error {
			if loc.file != "f" || loc.pos != pos[i] {
				t.Errorf("%s: key %x at %s/%d, want f/%d", step, keys[i], loc.file, loc.pos, pos[i])
			}
			found++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if found != len(want) {
			t.Errorf("%s: found %d of %d keys", step, found, len(want))
		}
	}
	compressions := func(x *keyIndex) map[string]int {
		t.Helper()
		levels, err := x.db.SSTables(pebble.WithProperties())
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, level := range levels {
			for _, tbl := range level {
				n[tbl.Properties.CompressionName]++
			}
		}
		return n
	}

	old, err := openIndex(dir, indexOptions{snappy: true})
	if err != nil {
		t.Fatal(err)
	}
	for s := int64(1); s <= 3; s++ {
		write(old, s, 10_000)
	}
	if n := compressions(old); n["Snappy"] == 0 || len(n) != 1 {
		t.Fatalf("the snappy index's tables: %v, want all Snappy", n)
	}
	check(old, "snappy")
	if err := old.close(); err != nil {
		t.Fatal(err)
	}

	x, err := openIndex(dir, indexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.close()
	check(x, "reopened")
	write(x, 4, 10_000)
	check(x, "mixed")
	if n := compressions(x); n["NoCompression"] < 2 {
		t.Errorf("after a flush and an ingestion by the default: %v, want 2 NoCompression tables", n)
	}
	if err := x.db.Compact(t.Context(), []byte{idxPrefixKey}, []byte{idxPrefixKey + 1}, true); err != nil {
		t.Fatal(err)
	}
	if n := compressions(x); len(n) != 1 || n["NoCompression"] == 0 {
		t.Errorf("after compacting everything: %v, want only NoCompression", n)
	}
	check(x, "compacted")
}
