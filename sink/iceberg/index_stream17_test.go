package iceberg

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestIndexDenseLookups: getMany looks a commit's keys up with plain seeks
// when most are found and they are dense in the index (denseLookups), and
// finds exactly what a prefix seek finds — present keys with their current
// location, and nothing for keys never set, deleted (tombstones above the
// bottom level, singly and in a long run) or set and deleted within one
// batch — with the entries spread over the bottom level (ingested), L0
// tables (flushed) and the memtable.
func TestIndexDenseLookups(t *testing.T) {
	x, err := openIndex(t.TempDir(), indexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.close()
	const rows = 20_000 // even keys 0, 2, …, 39,998
	key := func(i int64) []byte { return appendKeyInt(nil, i) }
	want := map[int64]location{}
	snap := int64(1)
	b := x.newBatch()
	b.bulk = true
	for i := int64(0); i < rows; i++ {
		b.set(key(2*i), location{file: "load", pos: i})
		want[2*i] = location{file: "load", pos: i}
	}
	if err := b.apply(snap); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for c := range 6 {
		snap++
		b := x.newBatch()
		file := fmt.Sprintf("c%d", c)
		for j := range 3000 {
			k := 2 * rng.Int64N(rows)
			switch j % 7 {
			case 3: // deleted
				b.del(key(k))
				delete(want, k)
			case 5: // set and deleted in one batch
				b.set(key(k), location{file: file, pos: int64(j)})
				b.del(key(k))
				delete(want, k)
			default:
				b.set(key(k), location{file: file, pos: int64(j)})
				want[k] = location{file: file, pos: int64(j)}
			}
		}
		if c == 2 { // a run of 2,000 deleted neighbours
			for k := int64(10_000); k < 14_000; k += 2 {
				b.del(key(k))
				delete(want, k)
			}
		}
		if err := b.apply(snap); err != nil {
			t.Fatal(err)
		}
		if c%2 == 1 {
			if err := x.db.Flush(); err != nil { // an L0 table
				t.Fatal(err)
			}
		}
	}
	// Looked up: every key from 9,000 to 16,000 (odd ones never set, the
	// deleted run) and every even key above: mostly found.
	var ids []int64
	for k := int64(9_000); k < 16_000; k++ {
		ids = append(ids, k)
	}
	for k := int64(16_000); k < 2*rows; k += 2 {
		ids = append(ids, k)
	}
	keys := make([][]byte, len(ids))
	for i, id := range ids {
		keys[i] = key(id)
	}
	lookup := func(step string, size int64, wantDense bool) {
		t.Helper()
		x.size = size
		before := x.denseRanges
		got := map[int64]location{}
		if err := x.getMany(keys, nil, func(i int, loc location) error {
			if _, dup := got[ids[i]]; dup {
				t.Errorf("%s: key %d found twice", step, ids[i])
			}
			got[ids[i]] = loc
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if dense := x.denseRanges > before; dense != wantDense {
			t.Errorf("%s: plain seeks %v, want %v", step, dense, wantDense)
		}
		n := 0
		for _, id := range ids {
			w, ok := want[id]
			g, found := got[id]
			if ok != found || g != w {
				if n++; n <= 10 {
					t.Errorf("%s: key %d: got %v (found %v), want %v (present %v)", step, id, g, found, w, ok)
				}
			}
		}
	}
	lookup("first lookups (bottom-level filters)", int64(len(want)), false)
	if x.useL6Filters() {
		t.Fatalf("found %d of %d: want most found", x.found, x.sought)
	}
	lookup("dense", int64(len(want)), true)
	lookup("sparse: an index of many more keys", int64(len(keys))*denseGap+1, false)
	lookup("size unknown", 0, false)
	lookup("dense again", int64(len(want)), true)
	// Mostly absent keys (new keys below the greatest) keep the filters.
	var absent [][]byte
	for k := int64(1); k < 2*rows; k += 2 {
		absent = append(absent, key(k))
	}
	if err := x.getMany(absent, nil, func(i int, loc location) error {
		t.Errorf("odd key %x found", absent[i])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	x.size = int64(len(want))
	before := x.denseRanges
	if err := x.getMany(absent[:100], nil, func(int, location) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if x.denseRanges != before {
		t.Errorf("mostly absent keys looked up with plain seeks")
	}
	if !slices.IsSortedFunc(keys, compareKeys) {
		t.Fatal("keys not in order")
	}
}

// TestLiveRowsStream17: the table's live rows, the key index's size for
// its choice of seek, are its data files' rows less the positions its
// vectors (v3) or position-delete files (v2) delete.
func TestLiveRowsStream17(t *testing.T) {
	for _, version := range []int{3, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			cat := testCatalog(t)
			w := upsertWriter(t, cat, version, 1)
			defer w.close()
			rng := rand.New(rand.NewPCG(uint64(version), 17))
			want := model{}
			var off int64
			for round := 0; round < 12; round++ {
				w.buf = randomChanges(rng, want, 1+rng.IntN(80), &off)
				w.next[0] = off
				if err := w.commit(t.Context()); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if got := w.up.liveRows(); got != int64(len(want)) {
					t.Fatalf("round %d: live rows %d, want %d", round, got, len(want))
				}
			}
		})
	}
}
