package iceberg

import (
	"unsafe"
)

// The fold of a buffer keyed by one bigint column, by sorting.
//
// The general fold (foldIn) finds each change's key state in a map of the
// buffer's keys; the commit then sorts the keys for the index lookups and
// again for writing the rows in key order. When every change's key is one
// NOT NULL bigint read straight from its Avro key (int64Key: the common
// case), foldByKey sorts the changes by key instead — a stable radix sort
// of the keys' order-preserving 64-bit images, so a key's changes keep the
// buffer's order, which is its offset order (see fold) — and each run of
// one key is its state. No map insert a change, no comparison sort: the
// keys come out sorted, and the lookups and writeRows find them so.
//
// The per-key map is still built when a change carries unchanged
// (TOASTed) values: filling them may follow a key change to its old key
// (fill, keyChangeOrigin), and resolveUnchanged finds the key whose row
// has them by its bytes.

// sortedKey is a change's key as an unsigned integer that sorts as the
// encoded key does (appendKeyInt: the sign bit flipped), and the change's
// index in the buffer, and the change's partition (in what would be the
// struct's padding: free).
type sortedKey struct {
	k uint64
	i int32
	p int32
}

// foldByKey folds buf as fold does, for buffers of bigint keys. It returns
// the states by key only when some change has unchanged values (nil
// otherwise: nothing looks a key up), and the states sorted by key. ok is
// false when a change's key is not such a bigint, or a key is found in two
// partitions: the caller then folds the general way.
func (u *upsert) foldByKey(buf []change) (states map[string]*keyState, keys []*keyState, ok bool, err error) {
	if len(u.keys) != 1 || len(buf) > 1<<31-1 {
		return nil, nil, false, nil
	}
	sk := u.sortKeys.a[:0]
	defer func() { u.sortKeys.a = sk[:0] }()
	unchanged := false
	for i := range buf {
		c := &buf[i]
		if c.skip || c.op() == 't' {
			continue
		}
		v, ok := u.int64KeyValue(c)
		if !ok {
			return nil, nil, false, nil
		}
		unchanged = unchanged || c.info.Unchanged != 0
		sk = append(sk, sortedKey{k: uint64(v) ^ (1 << 63), i: int32(i), p: c.partition})
	}
	sk = u.sortKeys.sort(sk)
	groups := 0
	for i := range sk {
		if i == 0 || sk[i].k != sk[i-1].k {
			groups++
		}
	}
	// The states and their pointers are foldInserts' memory (insertFold),
	// kept from commit to commit: a stream's commits made them anew, with
	// the keys' list and the sort's scratch (sortKeys), 46 of the 527 MB
	// cdcd bench's streaming phase allocated at -scale 0.1.
	slab := u.ins.states(groups) // never grows: the pointers stay
	keys = u.ins.pointers(groups)[:0]
	var arena keyArena
	for lo := 0; lo < len(sk); {
		hi := lo + 1
		for hi < len(sk) && sk[hi].k == sk[lo].k {
			hi++
		}
		// The state is written in place (the slab past its length is
		// zero: insertFold.states), its partition taken from the sort's
		// keys: in key order, a change read here was a cache miss.
		slab = slab[:len(slab)+1]
		u.ins.used = len(slab)
		st := &slab[len(slab)-1]
		st.key, st.part = arena.sortedKey(sk[lo].k), sk[lo].p
		if hi-lo == 1 {
			st.one[0] = &buf[sk[lo].i]
			st.changes = st.one[:1]
		} else {
			st.changes = make([]*change, 0, hi-lo)
			for _, x := range sk[lo:hi] {
				if x.p != st.part {
					return nil, nil, false, nil // a key in two partitions: fold in source order
				}
				st.changes = append(st.changes, &buf[x.i])
			}
		}
		st.live = st.changes[len(st.changes)-1].op() != 'd'
		st.deleted = !st.live
		for _, c := range st.changes[:len(st.changes)-1] {
			// A key's earlier changes (few keys have any) are read here
			// once, not again by oldRowIDs.
			st.deleted = st.deleted || c.op() == 'd'
		}
		keys = append(keys, st)
		lo = hi
	}
	u.ins.keys = keys
	if unchanged {
		states = make(map[string]*keyState, len(keys))
		for _, st := range keys {
			// A key's bytes are never written again (keyArena).
			states[unsafe.String(unsafe.SliceData(st.key), len(st.key))] = st
		}
	}
	for _, st := range keys {
		if err := u.materialize(states, st); err != nil {
			return nil, nil, false, err
		}
	}
	return states, keys, true, nil
}

// keySorter is foldByKey's memory from commit to commit: the keys to sort
// and the radix sort's second buffer.
type keySorter struct{ a, tmp []sortedKey }

// sort is radixSortKeys with the kept second buffer; the result is a or
// that buffer, and the other is kept for the next sort.
func (s *keySorter) sort(a []sortedKey) []sortedKey {
	if cap(s.tmp) < len(a) {
		s.tmp = make([]sortedKey, 0, cap(a))
	}
	out := radixSortKeysInto(a, s.tmp[:len(a)])
	if len(out) > 0 && len(a) > 0 && &out[0] != &a[0] {
		s.tmp = a[:0] // the sort's result is in the old tmp
	}
	return out
}

// radixSortKeys sorts a by key, stably: a least-significant-digit radix
// sort by bytes, skipping the bytes every key shares (the high bytes of
// keys from a sequence). It returns a or a slice of the same length.
func radixSortKeys(a []sortedKey) []sortedKey {
	if len(a) < 2 {
		return a
	}
	return radixSortKeysInto(a, make([]sortedKey, len(a)))
}

// radixSortKeysInto is radixSortKeys with tmp (len(a) entries) as its
// second buffer; it returns a or tmp.
func radixSortKeysInto(a, tmp []sortedKey) []sortedKey {
	if len(a) < 2 {
		return a
	}
	sorted := true
	var diff uint64
	for i := 1; i < len(a); i++ {
		diff |= a[i].k ^ a[0].k
		sorted = sorted && a[i-1].k <= a[i].k
	}
	if sorted {
		return a
	}
	for shift := uint(0); shift < 64; shift += 8 {
		if (diff>>shift)&0xFF == 0 {
			continue
		}
		var at [256]int
		for _, x := range a {
			at[(x.k>>shift)&0xFF]++
		}
		n := 0
		for b, c := range at {
			at[b], n = n, n+c
		}
		for _, x := range a {
			b := (x.k >> shift) & 0xFF
			tmp[at[b]] = x
			at[b]++
		}
		a, tmp = tmp, a
	}
	return a
}

// sortedKey encodes a key from its sortedKey image (appendKeyInt's bytes)
// into the arena.
func (a *keyArena) sortedKey(k uint64) []byte {
	if cap(a.chunk)-len(a.chunk) < 9 {
		a.chunk = make([]byte, 0, keyArenaChunk)
	}
	start := len(a.chunk)
	a.chunk = append(a.chunk, 0x01, byte(k>>56), byte(k>>48), byte(k>>40), byte(k>>32), byte(k>>24), byte(k>>16), byte(k>>8), byte(k))
	return a.chunk[start:len(a.chunk):len(a.chunk)]
}
