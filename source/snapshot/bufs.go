package snapshot

import (
	"bytes"
	"strings"
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
	lent map[*source.Change]bufPair
}

// bufPair is one chunk's rows (empty, with their capacity) and values,
// and what the source lent with them (LendWith).
type bufPair struct {
	rows   []source.Change
	values []any
	extra  any
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
	return &Bufs{free: make(chan bufPair, max(n, 1)), lent: map[*source.Change]bufPair{}}
}

// ChunkBufs returns a free list for the engine's range chunks: one more
// than it reads at once (Config.Ahead).
func (e *Engine) ChunkBufs() *Bufs { return NewBufsOf(e.cfg.Ahead + 1) }

// Get returns empty rows with room for rows changes and values for rows
// rows of cols columns: from the free list when they are large enough,
// else new ones (always new on nil). The values are not zeroed; each
// row's are all written.
func (b *Bufs) Get(rows, cols int) ([]source.Change, []any) {
	r, v, _ := b.GetWith(rows, cols)
	return r, v
}

// GetWith is Get, also returning what was lent with the slices (LendWith;
// nil with new slices).
func (b *Bufs) GetWith(rows, cols int) ([]source.Change, []any, any) {
	if b != nil {
		select {
		case p := <-b.free:
			if cap(p.rows) >= rows && len(p.values) >= rows*cols {
				return p.rows, p.values, p.extra
			}
		default:
		}
	}
	return make([]source.Change, 0, rows), make([]any, rows*cols), nil
}

// Lend records that rows (a chunk's, as read) use values; a no-op on nil.
func (b *Bufs) Lend(rows []source.Change, values []any) { b.LendWith(rows, values, nil) }

// LendWith is Lend, keeping extra with the slices until they come back
// from GetWith: what else the source reads the chunk into (the storage
// its values point into), used again on the same terms.
func (b *Bufs) LendWith(rows []source.Change, values []any, extra any) {
	if b == nil || cap(rows) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.lent) >= maxLent {
		clear(b.lent)
	}
	b.lent[&rows[:1][0]] = bufPair{values: values, extra: extra}
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
	p, ok := b.lent[first]
	delete(b.lent, first)
	b.mu.Unlock()
	if !ok {
		return
	}
	p.rows = rows[:0]
	select {
	case b.free <- p:
	default:
	}
}

// OwnValues returns copies of vals that share no memory with them: a
// source that reads chunks into storage lent with their slices (LendWith)
// writes over the values of rows it was given back, and a value kept
// beyond that (a key the run remembers, the row a stream keeps in its
// batch) must not change with it. Numbers and texts are copied (a source's
// values of other types are not read into storage used again).
func OwnValues(vals []any) []any {
	if vals == nil {
		return nil
	}
	out := make([]any, len(vals))
	for i, v := range vals {
		switch v := v.(type) {
		case string:
			out[i] = strings.Clone(v)
		case []byte:
			out[i] = bytes.Clone(v)
		case int64:
			out[i] = v
		case int32:
			out[i] = v
		case float64:
			out[i] = v
		case float32:
			out[i] = v
		default:
			out[i] = v
		}
	}
	return out
}
