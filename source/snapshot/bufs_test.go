package snapshot

import (
	"log/slog"
	"testing"

	"github.com/cdcd-dev/cdcd/source"
)

// TestBufs: slices lent to a chunk come back from Get once the chunk's
// rows (or a prefix sharing their first element) are given back; rows
// never lent, or given back twice, are ignored; slices too small are not
// handed out.
func TestBufs(t *testing.T) {
	b := NewBufs()
	rows, values := b.Get(8, 3)
	if cap(rows) < 8 || len(values) < 24 {
		t.Fatalf("Get(8, 3): %d rows, %d values", cap(rows), len(values))
	}
	rows = append(rows, source.Change{After: values[:3]}, source.Change{After: values[3:6]})
	b.Lend(rows, values)
	b.GiveBack(rows[:1]) // the engine emits a prefix of the rows read
	b.GiveBack(rows[:1]) // a second time: no longer lent
	b.GiveBack(make([]source.Change, 1))
	r2, v2 := b.Get(8, 3)
	if &r2[:1][0] != &rows[0] || &v2[0] != &values[0] || len(r2) != 0 {
		t.Fatal("the slices given back were not handed out again")
	}
	if r3, _ := b.Get(8, 3); cap(r3) > 0 && &r3[:1][0] == &rows[0] {
		t.Fatal("slices handed out twice")
	}
	b.Lend(r2[:1], v2)
	b.GiveBack(r2[:1])
	if r4, _ := b.Get(100, 3); &r4[:1][0] == &rows[0] {
		t.Fatal("slices too small for the chunk handed out")
	}
	var none *Bufs
	if r, v := none.Get(2, 2); cap(r) != 2 || len(v) != 4 {
		t.Fatal("a nil Bufs does not allocate")
	}
	none.Lend(rows, values)
	none.GiveBack(rows)
}

// TestChunkBufsHoldReaders: an engine's free list keeps the slices of one
// chunk more than it reads at once, all handed out again: with room for
// two, a third reader's slices were dropped when given back together and
// made anew for the next chunk.
func TestChunkBufsHoldReaders(t *testing.T) {
	e := New(Config{StateKey: "k", Ahead: 3}, nil, slog.New(slog.DiscardHandler))
	b := e.ChunkBufs()
	lent := map[*source.Change]bool{}
	var all [][]source.Change
	for range 4 {
		rows, values := b.Get(4, 2)
		rows = append(rows, source.Change{After: values[:2]})
		b.Lend(rows, values)
		lent[&rows[0]] = true
		all = append(all, rows)
	}
	for _, rows := range all {
		b.GiveBack(rows)
	}
	for i := range 4 {
		rows, _ := b.Get(4, 2)
		if !lent[&rows[:1][0]] {
			t.Fatalf("Get %d after four chunks were given back: new slices, want one of theirs", i+1)
		}
		delete(lent, &rows[:1][0])
	}
}

// TestBufsExtra: what a source lends with a chunk's slices comes back with
// them, and only with them.
func TestBufsExtra(t *testing.T) {
	b := NewBufsOf(2)
	rows, values := b.Get(4, 1)
	rows = append(rows, source.Change{After: values[:1]})
	slab := new(int)
	b.LendWith(rows, values, slab)
	if _, _, extra := b.GetWith(4, 1); extra != nil {
		t.Fatalf("GetWith before the rows came back: extra %v, want none", extra)
	}
	b.GiveBack(rows)
	r, _, extra := b.GetWith(4, 1)
	if &r[:1][0] != &rows[0] || extra != slab {
		t.Fatalf("GetWith after the rows came back: extra %v, want %v with the same slices", extra, slab)
	}
}
