package iceberg

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
)

// TestIndexIngest: a batch's entries for keys above every indexed key are
// ingested as a table file when there are enough of them, and the index
// answers exactly as if every change had gone through the batch — with
// updates and deletes of older keys beside them, a key set twice, a key
// held for ingestion deleted again in the same batch, too few keys, a
// clear, a batch that is not bulk — across reopening.
func TestIndexIngest(t *testing.T) {
	dir := t.TempDir()
	x, err := openIndex(dir, indexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { x.close() }()
	key := func(i int64) []byte {
		k, err := encodeKey(nil, []any{i})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	want := map[int64]location{}
	rng := rand.New(rand.NewPCG(3, 4))
	type op struct {
		id  int64
		del bool
	}
	bulk := true
	var lastIngested int64 // by the last step, before it reopened the index
	reopen := true         // each step reopens the index after its check
	step := func(name string, snap int64, wipe bool, ops []op, ingested bool) {
		t.Helper()
		before := x.ingested
		b := x.newBatch()
		b.bulk = bulk
		if wipe {
			b.clear()
			clear(want)
		}
		file := fmt.Sprintf("f%d", snap)
		for i, o := range ops {
			if o.del {
				b.del(key(o.id))
				delete(want, o.id)
				continue
			}
			loc := location{file: file, pos: int64(i)}
			b.set(key(o.id), loc)
			want[o.id] = loc
		}
		if err := b.apply(snap); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		lastIngested = x.ingested - before
		if got := x.ingested > before; got != ingested {
			t.Errorf("%s: ingested %v, want %v", name, got, ingested)
		}
		check := func(when string) {
			t.Helper()
			var keys [][]byte
			for i := int64(-10); i < 70_000; i++ {
				keys = append(keys, key(i))
			}
			got := map[string]location{}
			if err := x.getMany(keys, nil, func(i int, loc location) error {
				got[string(keys[i])] = loc
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Errorf("%s, %s: %d keys indexed, want %d", name, when, len(got), len(want))
			}
			bad := 0
			for id, loc := range want {
				if g, ok := got[string(key(id))]; (!ok || g != loc) && bad < 5 {
					bad++
					t.Errorf("%s, %s: key %d at %v (found %v), want %v", name, when, id, g, ok, loc)
				}
			}
			if x.snapshot != snap {
				t.Errorf("%s, %s: tagged %d, want %d", name, when, x.snapshot, snap)
			}
		}
		check("applied")
		if !reopen {
			return
		}
		if err := x.close(); err != nil {
			t.Fatal(err)
		}
		if x, err = openIndex(dir, indexOptions{}); err != nil {
			t.Fatal(err)
		}
		check("reopened")
	}
	ids := func(lo, hi int64) []op {
		var out []op
		for i := lo; i < hi; i++ {
			out = append(out, op{id: i})
		}
		return out
	}
	shuffled := ids(0, 10_000)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	step("a load's first commit, unsorted", 1, false, shuffled, true)

	mixed := ids(10_000, 20_000)
	for i := 0; i < 200; i++ { // updates and deletes of keys already indexed
		mixed = append(mixed, op{id: rng.Int64N(10_000), del: i%3 == 0})
	}
	mixed = append(mixed, op{id: 15_000}) // set twice: the last set wins
	step("new keys beside updates and deletes", 2, false, mixed, true)

	held := ids(20_000, 30_000)
	held = append(held, op{id: 25_000, del: true}, op{id: 25_000}) // deleted, then set again
	held = append(held, op{id: 27_000, del: true})
	step("a held key deleted in the same batch", 3, false, held, false)

	step("too few keys", 4, false, ids(30_000, 30_000+ingestMinKeys-1), false)
	step("a clear, then new keys", 5, true, ids(5_000, 15_000), false)
	// A reopened index does not know the last batch's range (lastBefore)
	// and ingests no key below its greatest until a batch raised it.
	reopen = false
	step("after the clear", 6, false, ids(15_000, 26_000), true)

	// Keys below the greatest indexed one, in the last batch's range (a
	// load's partitions read less far): a second file, whose entries win
	// over the older ones of the same keys.
	ingestedBy := func(name string, snap int64, ops []op, want int64) {
		t.Helper()
		step(name, snap, false, ops, want > 0)
		if got := lastIngested; got != want {
			t.Errorf("%s: %d entries ingested, want %d", name, got, want)
		}
	}
	ingestedBy("keys below the greatest, in the last batch's range", 7,
		append(ids(24_000, 24_000+ingestMinBelow+500), ids(26_000, 36_000)...), ingestMinBelow+500+10_000)
	// Spread below the last batch's range (updates, random keys): the
	// batch, where the memtable gathers many commits' before a flush.
	ingestedBy("keys below the last batch's range", 8, append(ids(0, 2_000), ids(36_000, 46_000)...), 10_000)
	// Too few below: the batch; the new keys are ingested.
	ingestedBy("too few keys below", 9, append(ids(44_000, 44_000+ingestMinBelow-1), ids(46_000, 56_000)...), 10_000)
	// A delete first: no key below the greatest is held from then on.
	reopen = true
	ingestedBy("a delete, then keys below", 10, append([]op{{id: 3, del: true}}, append(ids(54_000, 56_000), ids(56_000, 58_000)...)...), 0)
	ingestedBy("keys below after reopening", 11, append(ids(55_000, 58_000), ids(60_000, 60_000+ingestMinKeys)...), ingestMinKeys)

	bulk = false // a commit on the interval, not a backlog
	step("not a bulk batch", 12, false, ids(59_000, 59_990), false)
}

// TestIngestedThenKilled: a commit lands and its index entries are
// ingested, but the process dies before the batch that registers their
// files and tags the index with the new snapshot. The next start finds the
// index behind the table and rebuilds it, so the commits after it update
// and delete the right rows (no duplicate, no lost row).
func TestIngestedThenKilled(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	want := model{}
	var off int64
	inserts := func(lo, hi int64) {
		w.buf = w.buf[:0]
		for id := lo; id < hi; id++ {
			c := kvInsert(id, fmt.Sprintf("v%d", id), off)
			want.apply(c)
			w.buf = append(w.buf, encoded(c))
			off++
		}
		w.next[0] = off
	}
	inserts(0, 9000)
	w.catchingUp = true // a load: commits forced by the buffer's limits
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if w.up.idx.ingested != 9000 {
		t.Fatalf("the load's first commit ingested %d entries, want 9000", w.up.idx.ingested)
	}
	type killed struct{}
	afterIngest = func() { panic(killed{}) }
	defer func() { afterIngest = func() {} }()
	inserts(9000, 18_000)
	func() {
		defer func() {
			if r := recover(); r != (killed{}) {
				t.Fatalf("the commit went on past its ingestion: %v", r)
			}
		}()
		_ = w.commit(t.Context())
	}()
	afterIngest = func() {}
	w.close()

	dir := w.s.cfg.IndexDir
	w = upsertWriter(t, cat, 3, 1)
	w.s.cfg.IndexDir = dir
	if err := w.load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if w.next[0] != off {
		t.Fatalf("resumed at %d, want %d: the killed commit did not land", w.next[0], off)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	w.buf = w.buf[:0]
	for i := 0; i < 300; i++ {
		id := rng.Int64N(18_000)
		c := kvInsert(id, fmt.Sprintf("u%d", i), off)
		c.env.Op = 'u'
		c.env.Before = []any{id, nil, nil}
		if i%4 == 0 {
			c.env.Op, c.env.After = 'd', nil
		}
		want.apply(c)
		w.buf = append(w.buf, encoded(c))
		off++
	}
	w.next[0] = off
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
	checkInvariants(t, cat, w.cfg.Ident)
	w.close()
	chk, err := VerifyIndex(t.Context(), w.tbl, dir)
	if err != nil || len(chk.Problems) > 0 {
		t.Fatalf("the index after the restart: %v %v", err, chk.Problems)
	}
}

// BenchmarkIndexLoad builds a key index as a load's commits do, with and
// without ingestion: commits of 50,000 ascending keys, one key in eight
// (a lagging partition) arriving a commit late, so below the greatest
// indexed key; each commit looks its keys up first, as stage does. One op
// is a whole load of CDCD_BENCH_ROWS keys (default 1M); cpu-µs/key counts
// the whole process (pebble's flushes and compactions included, until the
// index is closed).
//
//	go test ./sink/iceberg -run '^$' -bench IndexLoad -benchtime 1x
func BenchmarkIndexLoad(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("CDCD_BENCH_ROWS")); err == nil && v > 0 {
		n = v
	}
	const perCommit = 50_000
	for _, mode := range []string{"batch", "ingest"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				x, err := openIndex(b.TempDir(), indexOptions{noIngest: mode == "batch"})
				if err != nil {
					b.Fatal(err)
				}
				clr := x.newBatch() // as a new table's index starts (initUpsert)
				clr.clear()
				if err := clr.apply(0); err != nil {
					b.Fatal(err)
				}
				start := now()
				var late []int64
				for lo, snap := 0, int64(1); lo < n; lo, snap = lo+perCommit, snap+1 {
					ids := late
					late = nil
					for id := int64(lo); id < int64(min(lo+perCommit, n)); id++ {
						if id%8 == 3 && lo+perCommit < n {
							late = append(late, id)
						} else {
							ids = append(ids, id)
						}
					}
					keys := make([][]byte, len(ids))
					for i, id := range ids {
						keys[i] = appendKeyInt(make([]byte, 0, 9), id)
					}
					if err := x.getMany(keys, nil, func(int, location) error { return nil }); err != nil {
						b.Fatal(err)
					}
					slices.SortFunc(keys, bytes.Compare) // writeRows sets keys in order
					batch := x.newBatch()
					batch.bulk = true
					file := fmt.Sprintf("data-%d.parquet", snap)
					for i, k := range keys {
						batch.set(k, location{file: file, pos: int64(i)})
					}
					if err := batch.apply(snap); err != nil {
						b.Fatal(err)
					}
				}
				if err := x.close(); err != nil {
					b.Fatal(err)
				}
				end := now()
				b.ReportMetric(float64((end.cpu-start.cpu).Microseconds())/float64(n), "cpu-µs/key")
			}
		})
	}
}

// TestHeldBufsKeepsTwo: the held entries' buffers of two batches — one
// staged while the other lands — both come back to the next two batches;
// a third batch takes new memory, and a smaller buffer given back does not
// displace the two larger kept.
func TestHeldBufsKeepsTwo(t *testing.T) {
	var h heldBufs
	grow := func(n int) ([]byte, []heldEntry) {
		a, e := h.take()
		return append(a, make([]byte, n)...), append(e, make([]heldEntry, n/16)...)
	}
	a1, e1 := grow(200 << 10)
	a2, e2 := grow(300 << 10)
	if &a1[0] == &a2[0] {
		t.Fatal("two batches share one arena")
	}
	h.put(a1, e1)
	h.put(a2, e2)
	h.put(make([]byte, 10), nil) // smaller than both kept: dropped
	got := map[*byte]bool{}
	for range 2 {
		a, e := h.take()
		if len(a) != 0 || len(e) != 0 {
			t.Fatalf("a kept buffer came back with %d bytes, %d entries", len(a), len(e))
		}
		got[&a[:1][0]] = true
	}
	if !got[&a1[0]] || !got[&a2[0]] {
		t.Fatal("the two arenas given back were not both taken again")
	}
	if a, _ := h.take(); cap(a) != 64<<10 {
		t.Fatalf("a third batch got an arena of %d bytes, want a new one of 64 KiB", cap(a))
	}
}
