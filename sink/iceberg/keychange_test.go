package iceberg

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// keyFeed makes kv's changes as the emitter logs them (each key in its
// murmur2 partition, offsets in order per partition) and hands them to a
// writer in batches as the fetcher would.
type keyFeed struct {
	t    *testing.T
	w    *tableWriter
	next []int64
}

func pgPos(lsn uint64, idx uint32) []byte {
	p := binary.BigEndian.AppendUint64(nil, lsn)
	return binary.BigEndian.AppendUint32(p, idx)
}

func kvPartition(id int64, n int) int32 {
	k, err := schema.AppendKey(nil, kv, []any{id, nil, nil})
	if err != nil {
		panic(err)
	}
	return log.PartitionFor(k, int32(n))
}

// rec makes one change of key id at position (lsn, idx): op 'c' (from
// nonzero: a key change's insert taking Unchanged values from key from),
// 'u', or 'd' (keyChange: marked as a key change's delete).
func (f *keyFeed) rec(op byte, id int64, lsn uint64, idx uint32, v any, n any, from int64, keyChange bool) change {
	env := &schema.Envelope{Op: op}
	switch op {
	case 'd':
		env.Before = []any{id, nil, nil}
	case 'c':
		env.After = []any{id, v, n}
		if from != 0 {
			env.Before = []any{from, nil, nil}
		}
	default:
		env.Before, env.After = []any{id, nil, nil}, []any{id, v, n}
	}
	env.Source.Position = pgPos(lsn, idx)
	p := kvPartition(id, len(f.next))
	c := encoded(change{table: kv, env: env, partition: p, offset: f.next[p]})
	c.keyChange = keyChange
	f.next[p]++
	return c
}

// deliver hands changes to the writer as one fetched batch.
func (f *keyFeed) deliver(cs ...change) {
	next := append([]int64(nil), f.w.next...)
	for _, c := range cs {
		next[c.partition] = max(next[c.partition], c.offset+1)
	}
	f.w.accept(fetched{changes: cs, next: next})
}

func (f *keyFeed) commit(want model) {
	f.t.Helper()
	if err := f.w.commit(f.t.Context()); err != nil {
		f.t.Fatal(err)
	}
	compareModel(f.t, want, scanTable(f.t, f.w.s.cat, f.w.cfg.Ident))
}

func (f *keyFeed) committed() []int64 {
	f.t.Helper()
	tbl, err := f.w.s.cat.LoadTable(f.t.Context(), f.w.cfg.Ident)
	if err != nil {
		f.t.Fatal(err)
	}
	next, _, err := committedOffsets(tbl, f.w.s.cfg.Pipeline, len(f.next))
	if err != nil {
		f.t.Fatal(err)
	}
	return next
}

// TestKeyChangeAcrossBatches: an insert of a changed key whose values
// arrived unchanged takes them from the old key as it was right before the
// change, whichever half of the key change the fetcher hands over first:
// the half that is there waits (with what follows it in its partition)
// until the other is fetched, also when waiting in one partition makes a
// second key change wait; chains of key changes in one commit resolve; an
// insert whose old key's delete was committed without it is refused.
func TestKeyChangeAcrossBatches(t *testing.T) {
	// Partitions of kv's keys over 2: 1, 2, 3, 6, 8 -> 1; 4, 5, 7, 9, 10 -> 0.
	for id, p := range map[int64]int32{1: 1, 2: 1, 3: 1, 6: 1, 8: 1, 4: 0, 5: 0, 7: 0, 9: 0, 10: 0} {
		if kvPartition(id, 2) != p {
			t.Fatalf("key %d is in partition %d; the test assumes %d", id, kvPartition(id, 2), p)
		}
	}
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 2)
	f := &keyFeed{t: t, w: w, next: make([]int64, 2)}
	u := schema.Unchanged

	// The table holds 4 (partition 0) and 1, 3 (partition 1).
	f.deliver(f.rec('c', 4, 100, 0, "big-4", int64(1), 0, false), f.rec('c', 1, 100, 1, "one", int64(1), 0, false),
		f.rec('c', 3, 100, 2, "three", int64(1), 0, false))
	f.commit(model{4: "big-4|1", 1: "one|1", 3: "three|1"})

	// 4 -> 2 (partition 0 -> 1). The insert is fetched first, with a later
	// update in its partition; partition 0 brings an unrelated insert.
	ins := f.rec('c', 5, 150, 0, "five", int64(1), 0, false)
	del := f.rec('d', 4, 200, 0, nil, nil, 0, true)
	ins2 := f.rec('c', 2, 200, 1, u, int64(2), 4, false)
	upd := f.rec('u', 3, 300, 0, "three-2", int64(1), 0, false)
	f.deliver(ins, ins2, upd)
	f.commit(model{4: "big-4|1", 1: "one|1", 3: "three|1", 5: "five|1"})
	if got := f.committed(); got[0] != 2 || got[1] != ins2.offset {
		t.Fatalf("offsets %v after holding the insert back: partition 1 must stop at %d", got, ins2.offset)
	}
	f.deliver(del)
	f.commit(model{2: "big-4|2", 1: "one|1", 3: "three-2|1", 5: "five|1"})

	// 5 -> 6 (partition 0 -> 1), the delete fetched first: 5's update
	// before it commits; the delete and what follows it in partition 0
	// wait. 1 -> 7 (partition 1 -> 0) is fetched whole, but its insert is
	// behind 5's delete in partition 0, so its delete waits too, and 3's
	// update behind that in partition 1.
	f.deliver(f.rec('u', 5, 400, 0, "five-2", int64(1), 0, false))
	del5 := f.rec('d', 5, 500, 0, nil, nil, 0, true)
	after5 := f.rec('c', 9, 600, 0, "nine", int64(1), 0, false)
	del1 := f.rec('d', 1, 700, 0, nil, nil, 0, true)
	ins7 := f.rec('c', 7, 700, 1, u, int64(7), 1, false)
	upd3 := f.rec('u', 3, 800, 0, "three-3", int64(1), 0, false)
	f.deliver(del5, after5, del1, ins7, upd3)
	f.commit(model{2: "big-4|2", 1: "one|1", 3: "three-2|1", 5: "five-2|1"})
	if got := f.committed(); got[0] != del5.offset || got[1] != del1.offset {
		t.Fatalf("offsets %v, want partition 0 at %d and 1 at %d", got, del5.offset, del1.offset)
	}
	f.deliver(f.rec('c', 6, 500, 1, u, int64(6), 5, false))
	f.commit(model{2: "big-4|2", 3: "three-3|1", 6: "five-2|6", 7: "one|7", 9: "nine|1"})

	// In one commit: 2's value changes, then 2 -> 8 -> 10, and 2 comes
	// back with a new value: 10 has 2's value from before the first change.
	f.deliver(
		f.rec('u', 2, 900, 0, "two-new", int64(3), 0, false),
		f.rec('d', 2, 1000, 0, nil, nil, 0, true), f.rec('c', 8, 1000, 1, u, int64(8), 2, false),
		f.rec('u', 8, 1000, 2, u, int64(9), 0, false),
		f.rec('d', 8, 1000, 3, nil, nil, 0, true), f.rec('c', 10, 1000, 4, u, int64(10), 8, false),
		f.rec('c', 2, 1100, 0, "two-again", int64(1), 0, false),
	)
	f.commit(model{2: "two-again|1", 3: "three-3|1", 6: "five-2|6", 7: "one|7", 9: "nine|1", 10: "two-new|10"})

	// A log written before deletes were marked: 9's delete commits alone,
	// so its insert cannot be resolved and is refused.
	f.deliver(f.rec('d', 9, 1200, 0, nil, nil, 0, false))
	f.commit(model{2: "two-again|1", 3: "three-3|1", 6: "five-2|6", 7: "one|7", 10: "two-new|10"})
	f.deliver(f.rec('c', 1, 1200, 1, u, int64(1), 9, false))
	err := w.commit(t.Context())
	if err == nil || !strings.Contains(err.Error(), "was committed without it") {
		t.Fatalf("insert after its delete was committed: %v", err)
	}
	w.close()
}
