package iceberg

import "sync"

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

// minPooledWindow is the smallest window the pool keeps.
const minPooledWindow = 64 << 10

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
}

func newWindowPool(limit int) *windowPool { return &windowPool{limit: limit} }

// get returns a window of n bytes: a free one of at least n and at most
// 4n bytes (it stays in use until its commit, so a small read does not
// take a large one), else a new one.
func (p *windowPool) get(n int) []byte {
	if n >= minPooledWindow {
		p.mu.Lock()
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
			p.mu.Unlock()
			return b[:n]
		}
		p.made++
		p.mu.Unlock()
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
		if poisonWindows {
			b = b[:cap(b)]
			for i := range b {
				b[i] = 0xa5
			}
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
