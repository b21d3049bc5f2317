package reconcile

import (
	"context"
	"errors"
	"sort"
	"strconv"

	"github.com/cdcd-dev/cdcd/sink/iceberg"
)

// The mirror read beside the source. A segment's mirror rows are read
// while the source reads the segment (Source.Sums has a connection of its
// own), each kept as its key and hash until the source's blocks are known.
// The order of the two reads does not matter to rule 4 (doc.go): the keys
// left out are those of records from the mirror's offsets or from Low,
// whichever comes first, up to the log's end read after the log covered
// the reads, so a mirror read before the source only leaves out the keys
// changed since (most of which changed after Low anyway).

// errAheadFull stops a mirror read that would keep more rows than the
// budget: the segment is compared by a read of the mirror after it.
var errAheadFull = errors.New("reconcile: mirror read ahead over its budget")

// aheadRows is a segment's mirror rows read ahead: each row's key and
// hash, keys after the segment's lower bound only.
type aheadRows struct {
	live   *iceberg.LiveSnapshot
	hashes []uint64
	// ints holds the keys of a table keyed by one integer column; texts
	// and ends the keys' canonical texts otherwise (ends[i*nk+j] is where
	// row i's key column j ends in texts).
	ints  []int64
	texts []byte
	ends  []int
}

// intKey says whether t is keyed by one integer column (keys kept as
// int64 and placed in blocks without parsing texts).
func intKey(t *Table) bool {
	return len(t.Key) == 1 && t.Columns[t.Key[0]].Canon == cInt
}

// keyInt is an integer key column's value as the mirror gives it.
func keyInt(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case int32:
		return int64(v), true
	}
	return 0, false
}

// readAhead reads the mirror's rows with keys after lower (nil: all),
// keeping at most limit of them; nil, nil when the table has no mirror
// yet or the rows are over the limit (the caller reads the mirror after).
func (tr *tableRun) readAhead(ctx context.Context, lower Key, limit int) (*aheadRows, error) {
	live, err := tr.spec.Mirror.Live(ctx)
	if err != nil || live == nil {
		return nil, err
	}
	t := tr.t
	a := &aheadRows{live: live}
	fast := intKey(t) && t.Ordered
	var lowInt int64
	if fast && lower != nil {
		var ok bool
		if lowInt, ok = parseInt(lower[0]); !ok {
			fast = false
		}
	}
	if lower == nil { // every live row is kept: no slice grows by copies
		n := int(min(int64(limit), max(live.Rows, 0)))
		if a.hashes = make([]uint64, 0, n); fast {
			a.ints = make([]int64, 0, n)
		}
	}
	mr := newMirrorRow(t)
	err = mr.scanTexts(ctx, live, func(mr *mirrorRow) error {
		if len(a.hashes) >= limit {
			return errAheadFull
		}
		if fast {
			v, ok := mr.keyInt()
			if !ok {
				return errAheadFull // not the value expected: the slow path says why
			}
			if lower != nil && v <= lowInt {
				return nil
			}
			a.ints = append(a.ints, v)
		} else {
			k := mr.key()
			if lower != nil && t.compareKeys(k, lower) <= 0 {
				return nil
			}
			for _, s := range k {
				a.texts = append(a.texts, s...)
				a.ends = append(a.ends, len(a.texts))
			}
		}
		a.hashes = append(a.hashes, mr.rowHash(tr.r.src))
		return nil
	})
	if errors.Is(err, errAheadFull) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}

// sum adds each row read ahead to the block its key falls in.
func (a *aheadRows) sum(t *Table, seg *segment, add func(block int, h uint64)) {
	if a.ints != nil || len(a.ends) == 0 {
		lasts := make([]int64, len(seg.blocks))
		open := len(seg.blocks) // the first block without an upper bound
		for i, b := range seg.blocks {
			if b.Last == nil {
				open = i
				break
			}
			lasts[i], _ = parseInt(b.Last[0])
		}
		lasts = lasts[:open]
		for i, v := range a.ints {
			if j := sort.Search(len(lasts), func(j int) bool { return v <= lasts[j] }); j < len(seg.blocks) {
				add(j, a.hashes[i])
			}
		}
		return
	}
	nk := len(t.Key)
	k := make(Key, nk)
	start := 0
	for i, h := range a.hashes {
		for j := range nk {
			end := a.ends[i*nk+j]
			k[j] = string(a.texts[start:end])
			start = end
		}
		if b, ok := seg.blockOf(t, k); ok {
			add(b, h)
		}
	}
}

func parseInt(s string) (int64, bool) {
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// after keeps the rows with keys after k (the last key of the segment
// compared), for the next segment: the mirror is read once for segments
// it holds within the budget, not once each. Rule 4 (doc.go) holds with
// the older mirror as it does with one read beside the source: the keys
// left out are those changed since its offsets. nil when k cannot be
// placed (the next segment reads the mirror again). Keys of one integer
// are kept in a's own arrays (a is not used after): a segment that ends
// mid-table (ranges read in parallel end at a sampled key) would
// otherwise hold a copy of half the table's keys beside them.
func (a *aheadRows) after(t *Table, k Key) *aheadRows {
	rest := &aheadRows{live: a.live}
	if a.ints != nil || len(a.ends) == 0 {
		if len(a.hashes) == 0 {
			return rest
		}
		kv, ok := parseInt(k[0])
		if !ok {
			return nil
		}
		n := 0
		for i, v := range a.ints {
			if v > kv {
				a.ints[n], a.hashes[n] = v, a.hashes[i]
				n++
			}
		}
		rest.ints, rest.hashes = a.ints[:n:n], a.hashes[:n:n]
		a.ints, a.hashes = nil, nil
		return rest
	}
	nk := len(t.Key)
	row := make(Key, nk)
	start := 0
	for i, h := range a.hashes {
		from := start
		for j := range nk {
			end := a.ends[i*nk+j]
			row[j] = string(a.texts[start:end])
			start = end
		}
		if t.compareKeys(row, k) > 0 {
			rest.texts = append(rest.texts, a.texts[from:start]...)
			for j := range nk {
				rest.ends = append(rest.ends, len(rest.texts)-(start-a.ends[i*nk+j]))
			}
			rest.hashes = append(rest.hashes, h)
		}
	}
	return rest
}
