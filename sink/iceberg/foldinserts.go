package iceberg

import (
	"bytes"
	"slices"
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
func (u *upsert) foldInserts(buf []change) (keys []*keyState, ok bool, err error) {
	slab := make([]keyState, 0, len(buf)) // never grows: the pointers stay
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
		slab = append(slab, keyState{key: k, live: true, table: c.table, direct: c})
		st := &slab[len(slab)-1]
		st.one[0] = c
		st.changes = st.one[:1]
	}
	keys = make([]*keyState, len(slab))
	for i := range slab {
		keys[i] = &slab[i]
	}
	byKey := func(a, b *keyState) int { return compareKeys(a.key, b.key) }
	if !slices.IsSortedFunc(keys, byKey) {
		slices.SortFunc(keys, byKey)
	}
	for i := 1; i < len(keys); i++ {
		if bytes.Equal(keys[i-1].key, keys[i].key) {
			return nil, false, nil
		}
	}
	return keys, true, nil
}
