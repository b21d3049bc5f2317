package iceberg

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// partChanges makes the changes of kv rows as the log delivers them: each
// in the partition the log's partitioner gives its key among n (or in
// wrong, when not -1), at that partition's next offset.
type partChanges struct {
	n    int32
	next []int64
}

func (pc *partChanges) change(op byte, id int64, v string, wrong int32) change {
	c := change{table: kv, env: &schema.Envelope{Op: op, After: []any{id, v, int64(1)}}}
	if op == 'd' {
		c.env = &schema.Envelope{Op: 'd', Before: []any{id, nil, nil}}
	}
	key, err := schema.AppendKey(nil, kv, []any{id, nil, nil})
	if err != nil {
		panic(err)
	}
	c.partition = log.PartitionFor(key, pc.n)
	if wrong >= 0 {
		c.partition = wrong
	}
	c.offset = pc.next[c.partition]
	pc.next[c.partition]++
	c.env.Source.Position = []byte(fmt.Sprintf("%012d", c.offset))
	return c
}

// TestPartitionBounds: a lagging partition's new keys below the greatest
// indexed key are not looked up (partBounds), and every key the table
// holds still is, so it is updated and never written twice: a
// re-snapshot's rows of every key, the same after a restart (the bounds
// are made again from the index), and a key whose change comes in another
// partition than its hash gives (a re-partitioned topic), which the
// bounds by partition alone would take for new.
func TestPartitionBounds(t *testing.T) {
	const n = 4
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, n)
	pc := &partChanges{n: n, next: make([]int64, n)}
	want := model{}
	commit := func(name string, cs []change) {
		t.Helper()
		w.buf = w.buf[:0]
		for _, c := range cs {
			want.apply(c)
			e := encoded(c)
			e.placed = placedByKey(e.partition, e.key, n) // as decode finds it
			w.buf = append(w.buf, e)
		}
		copy(w.next, pc.next)
		if err := w.commit(t.Context()); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
	}
	rows := func(op byte, lo, hi int64, v string, keep func(p int32) bool) []change {
		var cs []change
		for id := lo; id <= hi; id++ {
			c := pc.change(op, id, v, -1)
			if !keep(c.partition) {
				pc.next[c.partition]-- // not delivered yet
				continue
			}
			cs = append(cs, c)
		}
		return cs
	}
	lagging := func(p int32) bool { return p >= 2 }
	// Partitions 2 and 3 a fetch behind: their keys up to 150 only.
	cs := rows('r', 1, 300, "a", func(p int32) bool { return !lagging(p) })
	cs = append(cs, rows('r', 1, 150, "a", lagging)...)
	commit("load", cs)

	// Their keys 151..300: below the greatest key, above their partition's.
	seeks := w.up.idx.seeks
	cs = rows('r', 151, 300, "a", lagging)
	if len(cs) == 0 {
		t.Fatal("no key of 151..300 in partitions 2 and 3")
	}
	commit("lagging partitions", cs)
	if d := w.up.idx.seeks - seeks; d != 0 {
		t.Errorf("%d of a lagging partition's %d new keys looked up, want none", d, len(cs))
	}

	// A re-snapshot: every key again, each an update of its row.
	seeks = w.up.idx.seeks
	commit("re-snapshot", rows('r', 1, 300, "b", func(int32) bool { return true }))
	if d := w.up.idx.seeks - seeks; d != 300 {
		t.Errorf("a re-snapshot of 300 keys looked up %d", d)
	}

	// After a restart the bounds are made again from the index.
	w.close()
	dir := w.s.cfg.IndexDir
	w = upsertWriter(t, cat, 3, n)
	w.s.cfg.IndexDir = dir
	if err := w.load(t.Context()); err != nil {
		t.Fatal(err)
	}
	commit("re-snapshot after a restart", rows('r', 151, 300, "c", lagging))

	// A key in its partition, then in another: the bounds are dropped.
	commit("key 1000", []change{pc.change('c', 1000, "d", -1)})
	p := log.PartitionFor(mustKey(t, 1000), n)
	commit("key 1000 in another partition", []change{pc.change('u', 1000, "e", (p+1)%n)})
	spotCheckIndex(t, w)
	checkInvariants(t, cat, w.cfg.Ident)
	w.close()
}

func mustKey(t *testing.T, id int64) []byte {
	key, err := schema.AppendKey(nil, kv, []any{id, nil, nil})
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// TestDecodePlacesByKey: a decoded change is placed when its partition is
// the one the log's partitioner gives its key body (not the framed key)
// among the topic's partitions, and in no other partition, nor without a
// key.
func TestDecodePlacesByKey(t *testing.T) {
	const n = 3
	reg := memRegistry(t)
	f := newFeed(t, filepath.Join(t.TempDir(), "log"), reg, n)
	w := newWriter(t, testCatalog(t), "p", n)
	w.s.reg, w.tables = reg, map[uint32]*schema.Table{}
	for id := int64(1); id <= 30; id++ {
		row := []any{id, "v", int64(1)}
		k, v := f.encode(&schema.Envelope{Op: 'c', After: row, Source: schema.SourceInfo{Position: []byte("000000000001")}})
		p := log.PartitionFor(mustKey(t, id), n)
		for q := range int32(n) {
			c, err := w.decode(&log.Record{Key: k, Value: v, Partition: q})
			if err != nil {
				t.Fatal(err)
			}
			if c.placed != (q == p) {
				t.Errorf("key %d in partition %d: placed %v, its partition is %d", id, q, c.placed, p)
			}
		}
		if c, err := w.decode(&log.Record{Value: v, Partition: p}); err != nil || c.placed {
			t.Errorf("key %d without a record key: placed %v (%v)", id, c.placed, err)
		}
	}
}
