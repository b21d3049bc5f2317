package iceberg

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestIndexLookups checks getMany against what was stored, across
// reopening, deletes and a clear — including keys above the greatest
// indexed key, which getMany answers without a seek.
func TestIndexLookups(t *testing.T) {
	dir := t.TempDir()
	x, err := openIndex(dir, indexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int64) []byte {
		k, err := encodeKey(nil, []any{i})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	want := map[int64]int64{} // key -> position
	check := func(step string) {
		t.Helper()
		var keys [][]byte
		for i := int64(-5); i < 400; i++ { // more than getManyPart: parallel ranges
			keys = append(keys, key(i))
		}
		got := map[string]int64{}
		if err := x.getMany(keys, nil, func(i int, loc location) error {
			k := keys[i]
			if loc.file != "f1" {
				t.Errorf("%s: key %x in %q", step, k, loc.file)
			}
			got[string(k)] = loc.pos
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("%s: found %d keys, want %d", step, len(got), len(want))
		}
		for i, pos := range want {
			if p, ok := got[string(key(i))]; !ok || p != pos {
				t.Errorf("%s: key %d at %d (found %v), want %d", step, i, p, ok, pos)
			}
		}
	}
	put := func(snap int64, set []int64, del []int64, clear bool) {
		t.Helper()
		b := x.newBatch()
		if clear {
			b.clear()
			for k := range want {
				delete(want, k)
			}
		}
		for _, i := range set {
			b.set(key(i), location{file: "f1", pos: i * 10})
			want[i] = i * 10
		}
		for _, i := range del {
			b.del(key(i))
			delete(want, i)
		}
		if err := b.apply(snap); err != nil {
			t.Fatal(err)
		}
	}
	check("empty")
	put(1, []int64{3, 1, 2}, nil, false)
	check("first keys")
	put(2, []int64{10, 11, -3}, []int64{11}, false) // the greatest key deleted again
	check("after a delete of the greatest key")
	put(3, []int64{11}, nil, false)
	check("the deleted greatest key set again")
	reopen := func() {
		if err := x.close(); err != nil {
			t.Fatal(err)
		}
		if x, err = openIndex(dir, indexOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	reopen()
	if !slices.Equal(x.last, key(11)) {
		t.Errorf("after reopening, the greatest key is %x, want %x", x.last, key(11))
	}
	check("reopened")
	put(4, []int64{5}, nil, true)
	check("cleared and one key set")
	put(5, []int64{30, 31}, nil, false)
	reopen()
	check("reopened after a clear")
	var many []int64
	for i := int64(40); i < 400; i += 3 {
		many = append(many, i)
	}
	put(6, many, []int64{31}, false)
	check("many keys")
	x.close()
}

// TestIndexLookupsL6Filters: getMany consults the bottom level's bloom
// filters while most keys it looks up are absent and not once most are
// found (useL6Filters), and finds the same keys either way: an index
// whose entries were ingested into the bottom level, looked up with
// mostly absent keys (odd ones), then mostly present ones.
func TestIndexLookupsL6Filters(t *testing.T) {
	x, err := openIndex(t.TempDir(), indexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.close()
	b := x.newBatch()
	b.bulk = true
	const n = 3 * ingestMinKeys
	for i := int64(0); i < n; i += 2 { // even keys only
		b.set(appendKeyInt(nil, i), location{file: "f1", pos: i})
	}
	if err := b.apply(1); err != nil {
		t.Fatal(err)
	}
	if x.ingested != n/2 {
		t.Fatalf("%d entries ingested, want %d (the bottom level)", x.ingested, n/2)
	}
	lookup := func(step string, ids []int64, filters bool) {
		t.Helper()
		if got := x.useL6Filters(); got != filters {
			t.Errorf("%s: bottom-level filters %v, want %v", step, got, filters)
		}
		keys := make([][]byte, len(ids))
		for i, id := range ids {
			keys[i] = appendKeyInt(nil, id)
		}
		found := 0
		if err := x.getMany(keys, nil, func(i int, loc location) error {
			if ids[i]%2 != 0 || ids[i] >= n || loc.pos != ids[i] || loc.file != "f1" {
				t.Errorf("%s: key %d found at %+v", step, ids[i], loc)
			}
			found++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		want := 0
		for _, id := range ids {
			if id%2 == 0 && id < n {
				want++
			}
		}
		if found != want {
			t.Errorf("%s: found %d keys, want %d", step, found, want)
		}
	}
	var absent, present []int64
	for i := int64(0); i < n; i += 7 {
		if i%2 == 0 {
			present = append(present, i, i+2, i+4)
		} else {
			absent = append(absent, i, i+2, i+4)
		}
		absent = append(absent, 2*i+1)
	}
	slices.Sort(absent)
	absent = slices.Compact(absent)
	lookup("first lookups", absent, true)
	lookup("after mostly absent keys", present, true)
	lookup("after mostly present keys", present, false)
	lookup("absent keys after present ones", absent, false)
	lookup("after absent keys again", absent, true)
}

// BenchmarkIndexUpdates is the key index under a stream of updates, as a
// streaming table's commits use it: an index of CDCD_BENCH_ROWS keys
// (default 1M) built as a load builds it (ingested, 50,000 keys a
// commit), then CDCD_BENCH_UPDATES changes (default as many) in commits of
// 20,000: random keys of the table, each looked up (getMany, in key order)
// and re-pointed to the commit's new file, one in ten deleted instead, and
// 5,000 new keys above the greatest a commit. cpu-µs/change counts the
// whole process from the first update until the index is closed
// (pebble's flushes and compactions included).
//
//	CDCD_BENCH_UPDATES=3000000 go test ./sink/iceberg -run '^$' -bench IndexUpdates -benchtime 1x
func BenchmarkIndexUpdates(b *testing.B) {
	rows := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("CDCD_BENCH_ROWS")); err == nil && v > 0 {
		rows = v
	}
	changes := rows
	if v, err := strconv.Atoi(os.Getenv("CDCD_BENCH_UPDATES")); err == nil && v > 0 {
		changes = v
	}
	const loadCommit, perCommit, newPerCommit = 50_000, 20_000, 5_000
	for range b.N {
		x, err := openIndex(b.TempDir(), indexOptions{})
		if err != nil {
			b.Fatal(err)
		}
		snap := int64(1)
		for lo := 0; lo < rows; lo += loadCommit {
			batch := x.newBatch()
			batch.bulk = true
			file := fmt.Sprintf("load-%d.parquet", snap)
			for id := lo; id < min(lo+loadCommit, rows); id++ {
				batch.set(appendKeyInt(nil, int64(id)), location{file: file, pos: int64(id - lo)})
			}
			if err := batch.apply(snap); err != nil {
				b.Fatal(err)
			}
			snap++
		}
		rng := rand.New(rand.NewPCG(5, 6))
		next := int64(rows)
		start := now()
		found := 0
		for done := 0; done < changes; done += perCommit + newPerCommit {
			ids := make([]int64, 0, perCommit+newPerCommit)
			for range perCommit {
				ids = append(ids, rng.Int64N(next))
			}
			slices.Sort(ids)
			ids = slices.Compact(ids)
			for range newPerCommit {
				ids = append(ids, next)
				next++
			}
			keys := make([][]byte, len(ids))
			for i, id := range ids {
				keys[i] = appendKeyInt(make([]byte, 0, 9), id)
			}
			x.size = next // as the sink tells it (upsert.liveRows), about
			if err := x.getMany(keys, nil, func(int, location) error { found++; return nil }); err != nil {
				b.Fatal(err)
			}
			batch := x.newBatch()
			file := fmt.Sprintf("data-%d.parquet", snap)
			pos := int64(0)
			var dels [][]byte
			for i, k := range keys {
				if i%10 == 7 && ids[i] < int64(rows) {
					dels = append(dels, k)
					continue
				}
				batch.set(k, location{file: file, pos: pos})
				pos++
			}
			for _, k := range dels {
				batch.del(k)
			}
			if err := batch.apply(snap); err != nil {
				b.Fatal(err)
			}
			snap++
		}
		closeAndReport(b, x, start, changes)
		b.ReportMetric(float64(found)/float64(changes), "found/change")
	}
}

// BenchmarkIndexStream is the key index under cdcd bench's streaming
// workload (internal/bench, workload.go) rather than random keys: an index
// of CDCD_BENCH_ROWS keys (default 1M) built as a load builds it, then
// transactions of 1,000 rows interleaved in proportion — inserts of new
// serial keys, updates and deletes of the keys j+1+i*1000 (update j) and
// j+251+i*1000 (delete j), i < 1000 — CDCD_BENCH_SCALE of 2M inserts, 500k
// updates, 200k deletes (default 0.5, the MariaDB bench's), committed 30
// transactions at a time as a backlog's commits are (bulk). A commit's
// updated and deleted keys are runs of neighbours at a thousand places.
// lookup-cpu-µs/key is the CPU of the getMany calls per key looked up
// (pebble's background work in those moments included), cpu-µs/change the
// whole process's from the first change until the index is closed.
//
//	go test ./sink/iceberg -run '^$' -bench IndexStream -benchtime 1x
func BenchmarkIndexStream(b *testing.B) {
	rows := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("CDCD_BENCH_ROWS")); err == nil && v > 0 {
		rows = v
	}
	scale, scaleSet := 0.5, false
	if v, err := strconv.ParseFloat(os.Getenv("CDCD_BENCH_SCALE"), 64); err == nil && v > 0 {
		scale, scaleSet = v, true
	}
	const txRows, perCommit, loadCommit = 1000, 30, 50_000
	stride := rows / txRows
	if !scaleSet && float64(stride*txRows) < 700_000*scale {
		// A small index (CI's run at CDCD_BENCH_ROWS=5000): as many updated
		// and deleted runs as its keys hold.
		scale = float64(stride*txRows) / 700_000
	}
	txs := func(n float64) int { return max(1, int(n*scale+txRows/2)/txRows) }
	insertTx, updateTx, deleteTx := txs(2_000_000), txs(500_000), txs(200_000)
	if stride < updateTx+deleteTx {
		b.Fatalf("%d rows are too few for scale %g", rows, scale)
	}
	// The transactions in the order cdcd bench writes them: each kind
	// spread evenly over the stream.
	type tx struct {
		at   float64
		kind byte
		j    int
	}
	var all []tx
	for k, n := range map[byte]int{'c': insertTx, 'u': updateTx, 'd': deleteTx} {
		for j := range n {
			all = append(all, tx{(float64(j) + 0.5) / float64(n), k, j})
		}
	}
	slices.SortFunc(all, func(a, b tx) int {
		if a.at != b.at {
			if a.at < b.at {
				return -1
			}
			return 1
		}
		return int(a.kind) - int(b.kind)
	})
	for range b.N {
		x, err := openIndex(b.TempDir(), indexOptions{})
		if err != nil {
			b.Fatal(err)
		}
		snap := int64(1)
		for lo := 1; lo <= rows; lo += loadCommit {
			batch := x.newBatch()
			batch.bulk = true
			file := fmt.Sprintf("load-%d.parquet", snap)
			for id := lo; id < min(lo+loadCommit, rows+1); id++ {
				batch.set(appendKeyInt(nil, int64(id)), location{file: file, pos: int64(id - lo)})
			}
			if err := batch.apply(snap); err != nil {
				b.Fatal(err)
			}
			snap++
		}
		start := now()
		var lookCPU time.Duration
		looked, found, changes := 0, 0, 0
		live := int64(rows) // the keys the index holds, as the sink tells it (upsert.liveRows)
		for c := 0; c < len(all); c += perCommit {
			type kid struct {
				id   int64
				kind byte
			}
			var ks []kid
			for _, t := range all[c:min(c+perCommit, len(all))] {
				for i := range txRows {
					switch t.kind {
					case 'c':
						ks = append(ks, kid{int64(rows + 1 + t.j*txRows + i), 'c'})
					case 'u':
						ks = append(ks, kid{int64(1 + t.j + i*stride), 'u'})
					case 'd':
						ks = append(ks, kid{int64(1 + updateTx + t.j + i*stride), 'd'})
					}
				}
			}
			slices.SortFunc(ks, func(a, b kid) int { return cmp.Compare(a.id, b.id) })
			changes += len(ks)
			keys := make([][]byte, len(ks))
			for i, k := range ks {
				keys[i] = appendKeyInt(make([]byte, 0, 9), k.id)
			}
			x.size = live
			for _, k := range ks {
				switch k.kind {
				case 'c':
					live++
				case 'd':
					live--
				}
			}
			seeks := x.seeks
			t0 := now()
			if err := x.getMany(keys, nil, func(int, location) error { found++; return nil }); err != nil {
				b.Fatal(err)
			}
			lookCPU += now().cpu - t0.cpu
			looked += int(x.seeks - seeks)
			batch := x.newBatch()
			batch.bulk = true
			file := fmt.Sprintf("data-%d.parquet", snap)
			pos := int64(0)
			for i, k := range ks {
				if k.kind == 'd' {
					continue
				}
				batch.set(keys[i], location{file: file, pos: pos})
				pos++
			}
			for i, k := range ks {
				if k.kind == 'd' {
					batch.del(keys[i])
				}
			}
			if err := batch.apply(snap); err != nil {
				b.Fatal(err)
			}
			snap++
		}
		closeAndReport(b, x, start, changes)
		b.ReportMetric(float64(lookCPU.Microseconds())/float64(max(looked, 1)), "lookup-cpu-µs/key")
		b.ReportMetric(float64(found)/float64(max(looked, 1)), "found/key")
	}
}

// closeAndReport closes an index benchmark's index and reports the
// process's CPU per change since start, pebble's closing work included.
func closeAndReport(b *testing.B, x *keyIndex, start rusage, changes int) {
	b.Helper()
	if err := x.close(); err != nil {
		b.Fatal(err)
	}
	end := now()
	b.ReportMetric(float64((end.cpu-start.cpu).Microseconds())/float64(changes), "cpu-µs/change")
}
