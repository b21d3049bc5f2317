package postgres

import (
	"testing"

	"github.com/cdcd-dev/cdcd/source"
)

// TestChunkBufsReuse: a chunk's slices given back (by rows sharing its
// first element, as the engine emits them) come back for the next chunk;
// rows never lent, and slices too small, are not reused; chunks never given
// back are forgotten past maxLent.
func TestChunkBufsReuse(t *testing.T) {
	b := newChunkBufs()
	c := b.get(100, 3)
	if cap(c.rows) != 100 || len(c.values) != 300 {
		t.Fatalf("new slices: %d rows, %d values; want 100, 300", cap(c.rows), len(c.values))
	}
	rows := append(c.rows, source.Change{Op: source.OpRead}, source.Change{Op: source.OpRead})
	b.lend(rows, c.values)
	b.giveBack(rows[:1]) // the emitted rows: a prefix, some dropped by a window
	again := b.get(50, 3)
	if &again.rows[:1][0] != &rows[0] || &again.values[0] != &c.values[0] || len(again.rows) != 0 {
		t.Fatal("the slices given back were not reused")
	}
	b.giveBack(make([]source.Change, 1)) // never lent: ignored
	if n := len(b.free); n != 0 {
		t.Fatalf("%d slices on the free list after giving back rows never lent", n)
	}
	b.lend(again.rows[:1], again.values)
	b.giveBack(again.rows[:1])
	if big := b.get(200, 3); cap(big.rows) != 200 || &big.rows[:1][0] == &rows[0] {
		t.Fatal("slices too small for the chunk were reused")
	}
	for range maxLent + 1 {
		c := b.get(10, 1)
		b.lend(append(c.rows, source.Change{}), c.values)
	}
	if n := len(b.lent); n > maxLent {
		t.Fatalf("%d chunks remembered, want at most %d", n, maxLent)
	}
}
