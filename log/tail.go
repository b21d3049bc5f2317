package log

import (
	"slices"
	"sort"
	"sync/atomic"
)

// The tail cache: a partition's most recently published batches, their
// records sections as decoded, kept in memory so that a reader right
// behind the producer (the Iceberg sink streaming) fetches them without a
// pread and without decoding S2. The producer has the plain records
// section when it seals a batch (it compressed it from there); instead of
// giving that buffer back to the batch pool at once, it hands it to the
// partition's flusher with the stored batch, and publish — the moment the
// batch becomes visible to readers, under p.mu — puts it in the tail.
//
// Rules that keep it exact:
//   - Only published batches enter it (publish, under p.mu, with p.end), so
//     a fetch sees from it only what it would see from the files.
//   - It is a contiguous suffix of the partition's batches: its last batch
//     ends at p.end, each starts where the one before it ends. A batch that
//     does not follow (never, in a topic that is not compacted) empties it
//     first.
//   - Only topics that are never compacted have one (compaction rewrites
//     batches); retention drops the entries below the new start; a repair
//     (lost offsets found), a rollback after a failed write and close empty
//     it. A fetch serves from it only when no lost range lies ahead of the
//     offset.
//   - A fetch served from it returns the records the file path returns: the
//     same batch-by-batch budget rule (batchReader.fits compares the
//     stored batch's recordsBound, kept in the entry), the same walk
//     (walkBody), the records' bytes copied into FetchBuffers.Window as a
//     compressed batch's decoding would be.
//   - Entries are reference counted: the cache holds one, a fetch copying
//     an entry's bytes another (taken under p.mu); the body goes back to
//     the batch pool when the last is dropped, never while read.
//
// Memory: Options.TailCacheBytes over all partitions (the buffers' capacity
// counts), and a partition keeps at most half of it. A partition over
// either evicts its own oldest entries when it publishes.

// tailMaxBuf is the largest batch buffer the tail keeps: a stream's
// batches (~40 KB for a 1000-row transaction over 8 partitions) are kept,
// a load's (~410 KB, in 576 KB buffers) are not — its sink fetched 2.6 to
// 10 MB behind the producer, beyond any small tail, and holding them made
// the batch pool allocate again (TestLoadReusesBatchBuffers).
const tailMaxBuf = 256 << 10

// tailEntry is one published batch in a partition's tail.
type tailEntry struct {
	h     batchHeader // the stored batch's header (Length: as stored)
	body  []byte      // the records section, decoded
	buf   []byte      // the buffer body is in (the batch pool's, if pooled)
	bound int64       // recordsBound of the stored batch (the fetch budget's rule)
	refs  atomic.Int32
	spare *batchBufs // where buf goes back once unreferenced; nil: the GC
	// slot is where the request refers to buf until publish takes it
	// (writeGroup sets it nil then); nil when the entry took nothing.
	slot *[]byte
}

// unref drops a reference; the last one gives the buffer back.
func (e *tailEntry) unref() {
	if e.refs.Add(-1) == 0 && e.spare != nil {
		e.spare.put(e.buf)
		e.buf, e.body = nil, nil
	}
}

// tailBudget is what every partition's tail of one log may hold together.
type tailBudget struct {
	limit int64 // bytes; > 0
	used  atomic.Int64
}

// newTailEntry makes the tail entry of stored batch b (sealed: CRC and
// base offset filled in), the j-th of r. A compressed batch's plain
// records are r.plains[j], a plain batch's its own bytes: the producer's
// buffers from the batch pool, which the tail takes over at publish
// (writeGroup) and gives back to the pool when it drops them.
func (p *partition) newTailEntry(r *appendReq, j int, b []byte, spare *batchBufs) *tailEntry {
	h, _ := parseBatchHeader(b)
	e := &tailEntry{h: h}
	if h.Flags&flagCompressed != 0 && (j >= len(r.plains) || r.plains[j] == nil) {
		return e // its plain form was too large to keep: the tail is cleared
	}
	if j < len(r.plains) && r.plains[j] != nil {
		pl := r.plains[j]
		e.buf, e.body, e.spare, e.slot = pl, pl[batchHeaderLen:], spare, &r.plains[j]
		e.bound = int64(len(e.body))
	} else {
		e.buf, e.body, e.spare, e.slot = b, b[batchHeaderLen:h.Size()], spare, &r.batches[j]
		e.bound = h.Size()
	}
	e.refs.Store(1)
	return e
}

// tailPublishLocked adds a published group's entries and evicts what is
// over the budget. REQUIRES: p.mu.
func (p *partition) tailPublishLocked(es []*tailEntry) {
	for _, e := range es {
		if e.buf == nil || cap(e.buf) > tailMaxBuf {
			p.tailClearLocked() // stays a contiguous suffix
			if e.buf != nil {
				e.refs.Store(0)
				e.spare.put(e.buf) // a large plain batch: back to the pool now
			}
			continue
		}
		if n := len(p.tail); n > 0 && p.tail[n-1].h.Last()+1 != e.h.Base {
			p.tailClearLocked()
		}
		p.tail = append(p.tail, e)
		p.tailBytes += int64(cap(e.buf))
		p.tailBudget.used.Add(int64(cap(e.buf)))
	}
	limit := p.tailBudget.limit
	for len(p.tail) > 0 && (p.tailBytes > limit/2 || p.tailBudget.used.Load() > limit) {
		p.tailEvictLocked()
	}
}

// tailEvictLocked drops the oldest entry. REQUIRES: p.mu, a non-empty tail.
func (p *partition) tailEvictLocked() {
	e := p.tail[0]
	p.tail[0] = nil
	p.tail = p.tail[1:]
	p.tailBytes -= int64(cap(e.buf))
	p.tailBudget.used.Add(-int64(cap(e.buf)))
	e.unref()
}

// tailClearLocked empties the tail. REQUIRES: p.mu.
func (p *partition) tailClearLocked() {
	for len(p.tail) > 0 {
		p.tailEvictLocked()
	}
	p.tail = nil
}

// tailDropBelowLocked drops the entries whose records all lie below
// start (retention moved the partition's start). REQUIRES: p.mu.
func (p *partition) tailDropBelowLocked(start int64) {
	for len(p.tail) > 0 && p.tail[0].h.Last() < start {
		p.tailEvictLocked()
	}
}

// tailAtLocked returns the entry holding offset, referenced, or nil when
// the tail does not hold it. REQUIRES: p.mu.
func (p *partition) tailAtLocked(offset int64) *tailEntry {
	t := p.tail
	if len(t) == 0 || offset < t[0].h.Base || offset >= p.end {
		return nil
	}
	i := sort.Search(len(t), func(i int) bool { return t[i].h.Last() >= offset })
	if i == len(t) {
		return nil
	}
	e := t[i]
	e.refs.Add(1)
	return e
}

// readTail is readPlan over the tail, from e (referenced; it holds
// offset) on, below end (the partition's end when the fetch began):
// the same records readPlan returns from the files, unless entries are
// evicted meanwhile, when it stops early (the next fetch reads the rest
// from the files).
func (p *partition) readTail(e *tailEntry, offset, end int64, maxBytes int, recs []Record, fb *FetchBuffers) ([]Record, error) {
	if fb != nil {
		clear(fb.headers) // the last fetch's: they refer to its records' bytes
		fb.headers = fb.headers[:0]
	}
	total := 0
	for {
		if len(recs) > 0 && e.bound > int64(maxBytes-total) {
			e.unref()
			return recs, nil // the next batch would overshoot: leave it for the next fetch
		}
		n := len(e.body)
		var body []byte
		if fb != nil && fb.Window != nil {
			body = fb.Window(n)[:n]
		} else {
			body = make([]byte, n)
		}
		copy(body, e.body)
		h := e.h
		p.noteRatioBound(h, e.bound)
		e.unref()
		recs = slices.Grow(recs, int(h.Count))
		err := walkBody(body, h, fb, func(rec Record) bool {
			if rec.Offset < offset {
				return true
			}
			rec.Partition = p.id
			recs = append(recs, rec)
			total += recordSize(&rec)
			return total < maxBytes
		})
		if err != nil {
			return nil, err // bytes the producer encoded: a bug, not damage
		}
		next := h.Last() + 1
		if total >= maxBytes || next >= end {
			return recs, nil
		}
		p.mu.Lock()
		e = p.tailAtLocked(next)
		p.mu.Unlock()
		if e == nil {
			return recs, nil // evicted meanwhile: the rest from the files next time
		}
	}
}

// noteRatioBound is noteRatio for a batch whose recordsBound is known.
func (p *partition) noteRatioBound(h batchHeader, bound int64) {
	q := int64(1024)
	if h.Flags&flagCompressed != 0 {
		q = min(h.Size()*1024/max(bound, 1)+1, 1024)
	}
	if p.storedPer1K.Load() != q {
		p.storedPer1K.Store(q)
	}
}

// tailFor returns the tail budget for a topic's partitions: nil for a
// compacted topic, a read-only log, or TailCacheBytes < 0.
func (l *Embedded) tailFor(cfg TopicConfig) *tailBudget {
	if cfg.Cleanup == CleanupCompact || l.opts.ReadOnly || l.opts.TailCacheBytes <= 0 {
		return nil
	}
	return &l.tail
}
