package postgres

import (
	"sync"

	"github.com/cdcd-dev/cdcd/source"
)

// A range chunk's rows and their values are cut from two large slices (for
// the benchmark table about 1.6 MB of changes and 1 MB of values a chunk
// of 8,192 rows), made afresh for every chunk: zeroing them and collecting
// them cost the incremental path several times what they cost the initial
// load, whose batches go back to a free list once the Emitter has them
// (BENCHMARKS.md, session 8). These do too: the stream gives a chunk's rows
// back once it has submitted them (source.Pipeliner's Submit keeps nothing
// of a batch but its positions), after copying the values of the one row
// it keeps in its batch. A chunk that is read again, dropped whole, split
// in halves or handed to an Emitter that does not pipeline is never given
// back: its slices are the collector's, as before.

// chunkBufs is a Reader's free list of chunk slices and the slices lent to
// chunks in flight.
type chunkBufs struct {
	free chan chunkBuf
	mu   sync.Mutex
	// lent maps a chunk's rows (their first element, which the rows the
	// engine emits share) to its values; cleared when it grows past
	// maxLent (chunks never given back).
	lent map[*source.Change][]any
}

// chunkBuf is one chunk's rows (empty, with their capacity) and values.
type chunkBuf struct {
	rows   []source.Change
	values []any
}

// maxLent bounds the chunks lent and not given back that chunkBufs
// remembers.
const maxLent = 16

// The free list holds two chunks' slices: three readers take one each as
// the stream gives them back one at a time; four held more (a sampled
// chunk's rows grow to twice a chunk) and the benchmark's peak RSS rose
// by 10-70 MB (BENCHMARKS.md, session 8).
func newChunkBufs() *chunkBufs {
	return &chunkBufs{free: make(chan chunkBuf, 2), lent: map[*source.Change][]any{}}
}

// get returns slices for a chunk of about rows rows of cols values: from
// the free list when they are large enough, else new ones.
func (b *chunkBufs) get(rows, cols int) chunkBuf {
	select {
	case c := <-b.free:
		if cap(c.rows) >= rows && len(c.values) >= rows*cols {
			return c
		}
	default:
	}
	return chunkBuf{rows: make([]source.Change, 0, rows), values: make([]any, rows*cols)}
}

// lend records that rows (a chunk's, as read) use values.
func (b *chunkBufs) lend(rows []source.Change, values []any) {
	if cap(rows) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.lent) >= maxLent {
		clear(b.lent)
	}
	b.lent[&rows[:1][0]] = values
}

// giveBack puts a chunk's slices on the free list; rows share the first
// element of the rows lent. Nothing may refer to the rows or their values
// any more.
func (b *chunkBufs) giveBack(rows []source.Change) {
	if cap(rows) == 0 {
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
	case b.free <- chunkBuf{rows: rows[:0], values: values}:
	default:
	}
}
