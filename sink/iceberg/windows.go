package iceberg

import (
	"sync"
	"unsafe"
)

// A table's fetches read the log into windows (log.FetchBuffers.Window):
// the buffers its records' bytes sit in, which the buffered changes alias
// (their key, body, position and after-image) until their commit. A
// window was allocated fresh for every fetch and left to the collector
// once the commit was done: a load allocated its log's bytes once more
// (377 MB of the 1,561 MB a 1M-row load allocated), which under the soft
// memory limit kept the collector running. Now the fetcher takes its
// windows from the table's windowPool and notes them in the batch
// (fetched.windows); the loop gathers the batches' windows with their
// changes (accept) and hands them back once a commit has emptied the
// buffer (committedNow): nothing then refers to them. What outlives the
// commit was copied out: the positions (accept: seen, lastPos; the
// fetcher's truncate position), the keys (the fold's keyArena, the index
// batch), the rows (Parquet and Arrow buffers copy the values). A commit
// that holds changes back (commitHolding) keeps some of its windows in
// use, so its windows are never handed back: the collector takes them.
//
// Windows are pooled only from minPooledWindow bytes, so a stream's small
// reads at the log's end neither pin a large window each until their
// commit nor fill the pool, and a commit that hands back no large window
// (a stream's) empties the pool: it holds memory only while a load or a
// backlog is read.

// Small reads (under minPooledWindow: the log's end, where a fetch finds
// only what was appended since the last one) are carved one after another
// from a shared chunk of chunkBytes instead of allocated each: a 1M-row
// load whose sink kept up with the loader read almost all of its records
// so, 225 of the 1,170 MB it allocated. A chunk is counted: each carve
// notes the chunk for its batch (get's ref) and adds a reference, release
// takes one away, and a chunk nothing refers to is carved again from its
// start (the current one) or kept like a large window. A commit that holds
// changes back drops its windows (forget): the references of the held
// changes are lost, so their chunks' counts would never reach zero (safe,
// but each would stay in refs for good); forget abandons those chunks
// instead — out of refs, never carved again nor kept, left to the
// collector — and later releases of them are ignored.

// minPooledWindow is the smallest window the pool keeps.
const minPooledWindow = 64 << 10

// chunkBytes is the size of the chunks small windows are carved from.
const chunkBytes = 256 << 10

// poisonWindows makes release overwrite every window it takes back, so
// that anything still reading one sees garbage instead of the right bytes
// by luck; the package's tests set it (TestMain).
var poisonWindows bool

// windowPool is a table's free list of windows, filled by the table's loop
// and drawn by its fetcher.
type windowPool struct {
	mu    sync.Mutex
	free  [][]byte
	bytes int // capacity of free
	limit int // the most bytes free holds
	// made and reused count the windows get made and took from free.
	made, reused int
	// chunk is the chunk small windows are carved from, at carved; refs
	// counts the references of each chunk in use, by its first byte.
	chunk  []byte
	carved int
	refs   map[*byte]int
}

func newWindowPool(limit int) *windowPool { return &windowPool{limit: limit} }

// get returns a window of n bytes: a free one of at least n and at most
// 4n bytes (it stays in use until its commit, so a small read does not
// take a large one), else a new one; a small one is carved from the
// current chunk. ref is what the window's batch hands back to release
// (the window, or its chunk), nil when nothing.
func (p *windowPool) get(n int) (b, ref []byte) {
	if n < minPooledWindow && n > 0 {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.chunk == nil || len(p.chunk)-p.carved < n {
			p.chunk, p.carved = p.takeLocked(chunkBytes), 0
			if p.refs == nil {
				p.refs = map[*byte]int{}
			}
		}
		b = p.chunk[p.carved : p.carved+n : p.carved+n]
		p.carved += n
		p.refs[unsafe.SliceData(p.chunk)]++
		return b, p.chunk[:0] // empty: a chunk's reference, not a window
	}
	if n >= minPooledWindow {
		p.mu.Lock()
		b := p.takeLocked(n)
		p.mu.Unlock()
		return b, b
	}
	return make([]byte, n), nil
}

// takeLocked returns a window of n bytes (n >= minPooledWindow): see get.
func (p *windowPool) takeLocked(n int) []byte {
	{
		best := -1
		for i, b := range p.free {
			if c := cap(b); c >= n && c <= 4*n && (best < 0 || c < cap(p.free[best])) {
				best = i
			}
		}
		if best >= 0 {
			b := p.free[best]
			last := len(p.free) - 1
			p.free[best], p.free[last] = p.free[last], nil
			p.free = p.free[:last]
			p.bytes -= cap(b)
			p.reused++
			return b[:n]
		}
		p.made++
	}
	return make([]byte, n)
}

// release takes back windows nothing refers to any more, keeping those
// of minPooledWindow bytes or more while the pool has room. Without one
// such window it empties the pool (see above).
// REQUIRES: no record read into ws, nor anything aliasing one, is used
// again.
func (p *windowPool) release(ws [][]byte) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	large := false
	for _, b := range ws {
		if cap(b) < minPooledWindow {
			continue
		}
		large = true
		if len(b) == 0 { // a chunk's reference (get)
			p.unrefLocked(b)
			continue
		}
		if poisonWindows {
			poison(b)
		}
		if p.bytes+cap(b) <= p.limit {
			p.free = append(p.free, b[:0])
			p.bytes += cap(b)
		}
	}
	if !large {
		clear(p.free)
		p.free, p.bytes = p.free[:0], 0
	}
}

// unrefLocked takes one reference of chunk away; a chunk nothing refers
// to is carved again from its start when it is the current one, else kept
// like a large window. An abandoned chunk (forget) is not counted: left to
// the collector.
func (p *windowPool) unrefLocked(chunk []byte) {
	key := unsafe.SliceData(chunk)
	r, ok := p.refs[key]
	switch {
	case !ok:
		return
	case r > 1:
		p.refs[key] = r - 1
		return
	}
	delete(p.refs, key)
	if poisonWindows {
		poison(chunk)
	}
	if p.chunk != nil && unsafe.SliceData(p.chunk) == key {
		p.carved = 0
		return
	}
	if p.bytes+cap(chunk) <= p.limit {
		p.free = append(p.free, chunk[:0])
		p.bytes += cap(chunk)
	}
}

// forget abandons the chunks among ws, which a commit that held changes
// back drops (see above); their other references are then ignored.
func (p *windowPool) forget(ws [][]byte) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range ws {
		if len(b) != 0 || cap(b) < minPooledWindow {
			continue // not a chunk's reference
		}
		key := unsafe.SliceData(b)
		if _, chunk := p.refs[key]; !chunk {
			continue
		}
		delete(p.refs, key)
		if p.chunk != nil && unsafe.SliceData(p.chunk) == key {
			p.chunk, p.carved = nil, 0
		}
	}
}

// poison overwrites b's whole capacity (poisonWindows).
func poison(b []byte) {
	b = b[:cap(b)]
	for i := range b {
		b[i] = 0xa5
	}
}
