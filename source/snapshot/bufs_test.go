package snapshot

import (
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
