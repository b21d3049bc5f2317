package iceberg

import (
	"bytes"
	"slices"

	"github.com/cdcd-dev/cdcd/schema"
)

// foldInserts is the fold of a buffer of whole inserts with distinct keys
// — an initial load's rows, a backlog of serial inserts — which needs no
// per-key map: every key lives, its one change is its final image, and
// nothing takes values from another key. It returns the keys' states
// sorted by key (the order writeRows wants), each with its change as the
// direct image, or ok false when buf is not such a buffer: a change that
// is not an insert ('r' or 'c'), one with unchanged values or without an
// after-image's bytes, a key change's insert, a test's decoded envelope,
// or a key that appears twice (found next to its twin once sorted). The
// caller then folds the general way, which gives the same states for
// such a buffer (TestFoldInsertsAgreesWithFold).
//
// The per-key map was most of a load's fold: a map insert per row, and a
// map of a buffer's size allocated every commit.
//
// Its states and their pointers are kept from one commit to the next
// (insertFold): nothing refers to a commit's states once it is staged.
func (u *upsert) foldInserts(buf []change) (keys []*keyState, ok bool, err error) {
	u.ins.placed = nil // this commit's fold has not found it yet
	if keys, ok, done := u.foldInsertsByInt(buf); done {
		return keys, ok, nil
	}
	slab := u.ins.states(len(buf)) // never grows: the pointers stay
	var arena keyArena
	for i := range buf {
		c := &buf[i]
		if c.skip {
			continue
		}
		if op := c.op(); (op != 'r' && op != 'c') || c.env != nil || c.info.Unchanged != 0 || c.info.After == nil || c.needsOldKey() {
			return nil, false, nil
		}
		k, err := arena.key(u, c)
		if err != nil {
			return nil, false, err
		}
		slab = append(slab, keyState{key: k, live: true, table: c.table, direct: c, part: c.partition})
		u.ins.used = len(slab)
		st := &slab[len(slab)-1]
		st.one[0] = c
		st.changes = st.one[:1]
	}
	keys = u.ins.pointers(len(slab))
	for i := range slab {
		keys[i] = &slab[i]
	}
	keys = sortByKey(keys)
	u.ins.keys = keys // this or the merge's slice: both free once staged
	for i := 1; i < len(keys); i++ {
		if bytes.Equal(keys[i-1].key, keys[i].key) {
			return nil, false, nil
		}
	}
	return keys, true, nil
}

// foldInsertsByInt is foldInserts for a buffer whose keys are one NOT NULL
// bigint (int64KeyValue, the value the fetcher read): the changes' keys
// are radix-sorted as integers (radixSortKeysInto, skipping the bytes all
// keys share) and the states made in key order, where the general way
// sorted or merged pointers to states by their keys' bytes — a
// comparison of two byte slices, each a cache miss, about n log k times
// — and compared every key with the next once more. done is false when
// some change's key is not such a bigint: the general way then folds.
func (u *upsert) foldInsertsByInt(buf []change) (keys []*keyState, ok, done bool) {
	if len(u.keys) != 1 || len(buf) > 1<<31-1 {
		return nil, false, false
	}
	sk := u.sortKeys.a[:0]
	defer func() { u.sortKeys.a = sk[:0] }()
	// table is the changes' one table version, nil when they have two: the
	// states are then made without reading the changes again (in key
	// order, that read was a cache miss a change).
	var table *schema.Table
	placed := true // every change where the partitioner puts its key (partitionsOf)
	for i := range buf {
		c := &buf[i]
		if c.skip {
			continue
		}
		placed = placed && c.placed
		if op := c.op(); (op != 'r' && op != 'c') || c.env != nil || c.info.Unchanged != 0 || c.info.After == nil || c.needsOldKey() {
			return nil, false, true
		}
		v, ok := u.int64KeyValue(c)
		if !ok {
			return nil, false, false
		}
		if len(sk) == 0 {
			table = c.table
		} else if c.table != table {
			table = nil
		}
		sk = append(sk, sortedKey{k: uint64(v) ^ (1 << 63), i: int32(i), p: c.partition})
	}
	sk = u.sortKeys.sort(sk)
	for i := 1; i < len(sk); i++ {
		if sk[i].k == sk[i-1].k {
			return nil, false, true // a key twice
		}
	}
	slab := u.ins.states(len(sk))[:len(sk)] // cleared: only the fields set below are set
	u.ins.used = len(slab)
	keys = u.ins.pointers(len(sk))
	var arena keyArena
	for j, x := range sk {
		c := &buf[x.i] // not dereferenced unless the changes have two table versions
		st := &slab[j]
		st.key, st.live, st.direct, st.part = arena.sortedKey(x.k), true, c, x.p
		if st.table = table; table == nil {
			st.table = c.table
		}
		st.one[0] = c
		st.changes = st.one[:1]
		keys[j] = st
	}
	u.ins.keys = keys
	if placed && table != nil {
		// The keys' partitions, for partitionsOf, in key order: each key
		// has one change.
		parts := u.ins.parts[:0]
		for _, x := range sk {
			parts = append(parts, x.p)
		}
		u.ins.parts, u.ins.placed = parts, table
	}
	return keys, true, true
}

// insertFold is foldInserts' memory, kept from one commit to the next: a
// load's commit of 35,000 rows made a slab of key states (about 150 bytes
// each) and their pointers anew, 165 of the 1,561 MB a 1M-row load
// allocated. A commit's states are done with once it is staged (stage:
// the rows written, the keys copied into the index batch), and the next
// commit's fold starts after that, on the table's loop.
type insertFold struct {
	slab []keyState
	keys []*keyState
	used int // states of the slab set by the last fold
	// placed is the one table version of the last foldInsertsByInt's
	// changes when every one is placed by its key (placedByKey), nil
	// otherwise or when another fold ran; parts are then its keys'
	// partitions in key order, which partitionsOf takes instead of
	// reading every change and state again.
	placed *schema.Table
	parts  []int32
}

// states returns an empty slab with room for n states. The last fold's
// states are cleared, so that they keep no change or table alive.
func (f *insertFold) states(n int) []keyState {
	clear(f.slab[:f.used])
	f.used = 0
	if cap(f.slab) < n {
		f.slab = make([]keyState, 0, n+n/8) // buffers of a load differ a little
	}
	return f.slab[:0]
}

// pointers returns a slice of n state pointers.
func (f *insertFold) pointers(n int) []*keyState {
	if cap(f.keys) < n {
		f.keys = make([]*keyState, n, n+n/8)
	}
	return f.keys[:n]
}

// sortByKey sorts a fold's states by key, returning them in keys or in a
// slice of its own. A load's buffer is a few long ascending runs — each
// fetch is one partition's rows, which a load emits in key order — so
// its runs are merged (about n log k comparisons for k runs) rather than
// the whole sorted (n log n: the sort was about half of a load's fold). A
// buffer of many short runs (keys in no order) is sorted.
//
// BenchmarkSortByKey, 35,000 states (a load commit), CPU a call: 8 runs
// merged about 3 ms against 15 sorted, 64 runs 9 ms, 256 runs as slow as
// the sort (a merge pass costs about two of the sort's levels).
func sortByKey(keys []*keyState) []*keyState {
	byKey := func(a, b *keyState) int { return compareKeys(a.key, b.key) }
	runs := 1
	for i := 1; i < len(keys); i++ {
		if compareKeys(keys[i-1].key, keys[i].key) > 0 {
			if runs++; runs > maxMergeRuns {
				slices.SortFunc(keys, byKey)
				return keys
			}
		}
	}
	return mergeRuns(keys, byKey)
}

// maxMergeRuns is the most runs sortByKey merges rather than sorts.
const maxMergeRuns = 64
