package snapshot

import (
	"sync"

	"github.com/cdcd-dev/cdcd/source"
)

// Bufs is a free list of range chunks' slices for a source's chunk reads:
// a chunk's rows and their values are cut from two large slices (for the
// benchmark table about 1.6 MB of changes and 1 MB of values a chunk of
// 8,192 rows), which made afresh for every chunk were a quarter of a
// MariaDB load's allocations. The stream gives a chunk's rows back once
// it has submitted them (source.Pipeliner's Submit keeps nothing of a
// batch but its positions), after copying the values of any row it keeps.
// A chunk that is read again, dropped whole, split in halves or handed to
// an Emitter that does not pipeline is never given back: its slices are
// the collector's. source/postgres and source/mysql share it.
type Bufs struct {
	free chan bufPair
	mu   sync.Mutex
	// lent maps a chunk's rows (their first element, which the rows the
	// engine emits share) to its values; cleared when it grows past
	// maxLent (chunks never given back).
	lent map[*source.Change][]any
}

// bufPair is one chunk's rows (empty, with their capacity) and values.
type bufPair struct {
	rows   []source.Change
	values []any
}

// maxLent bounds the chunks lent and not given back that Bufs remembers.
const maxLent = 16

// NewBufs returns a free list of two chunks' slices (NewBufsOf(2)).
func NewBufs() *Bufs { return NewBufsOf(2) }

// NewBufsOf returns a free list of n chunks' slices. Readers that take
// slices sized for their chunks' cap (so none grows) want one more than
// the chunks read at once: the chunk the stream hands over still holds
// its slices when the next is read, and with fewer the list ran empty
// and full by turns (PostgreSQL's benchmark, session 13: one chunk in
// four read into new slices while others were dropped).
func NewBufsOf(n int) *Bufs {
	return &Bufs{free: make(chan bufPair, max(n, 1)), lent: map[*source.Change][]any{}}
}

// ChunkBufs returns a free list for the engine's range chunks: one more
// than it reads at once (Config.Ahead).
func (e *Engine) ChunkBufs() *Bufs { return NewBufsOf(e.cfg.Ahead + 1) }

// Get returns empty rows with room for rows changes and values for rows
// rows of cols columns: from the free list when they are large enough,
// else new ones (always new on nil). The values are not zeroed; each
// row's are all written.
func (b *Bufs) Get(rows, cols int) ([]source.Change, []any) {
	if b == nil {
		return make([]source.Change, 0, rows), make([]any, rows*cols)
	}
	select {
	case p := <-b.free:
		if cap(p.rows) >= rows && len(p.values) >= rows*cols {
			return p.rows, p.values
		}
	default:
	}
	return make([]source.Change, 0, rows), make([]any, rows*cols)
}

// Lend records that rows (a chunk's, as read) use values; a no-op on nil.
func (b *Bufs) Lend(rows []source.Change, values []any) {
	if b == nil || cap(rows) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.lent) >= maxLent {
		clear(b.lent)
	}
	b.lent[&rows[:1][0]] = values
}

// GiveBack puts a chunk's slices on the free list; rows share the first
// element of the rows lent (others, and nil, are ignored). Nothing may refer to the
// rows or their values any more.
func (b *Bufs) GiveBack(rows []source.Change) {
	if b == nil || cap(rows) == 0 {
		return
	}
	first := &rows[:1][0]
	b.mu.Lock()
	values, ok := b.lent[first]
	delete(b.lent, first)
	b.mu.Unlock()
	if !ok {
		return
	}
	select {
	case b.free <- bufPair{rows: rows[:0], values: values}:
	default:
	}
}
