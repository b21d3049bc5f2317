package log

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// defaultFetchBytes is FetchOptions.MaxBytes when it is 0.
const defaultFetchBytes = 1 << 20

// maxFetchEstimate bounds the records a fetch's slice is first made for.
const maxFetchEstimate = 1 << 16

// readPlan is a consistent view of the segments a read needs, taken under
// the partition's lock; the segments are acquired until release.
type readPlan struct {
	segs  []segView
	start int64
	end   int64
}

// segView is a segment's readable state at the time of the plan.
type segView struct {
	s     *segment
	size  int64
	maxTs int64
	idx   []indexEntry
}

func (rp *readPlan) release() {
	for _, v := range rp.segs {
		v.s.release()
	}
}

// planLocked captures the segments from index from on. REQUIRES: p.mu.
func (p *partition) planLocked(from int) readPlan {
	start, end := p.boundsLocked()
	rp := readPlan{start: start, end: end, segs: make([]segView, 0, len(p.segs)-from)}
	for _, s := range p.segs[from:] {
		s.acquire()
		rp.segs = append(rp.segs, segView{s: s, size: s.size, maxTs: s.maxTs, idx: s.idx})
	}
	return rp
}

// fetch implements Log.Fetch for one partition.
func (p *partition) fetch(ctx context.Context, offset int64, opts FetchOptions) ([]Record, error) {
	maxBytes := opts.MaxBytes
	if maxBytes <= 0 {
		maxBytes = defaultFetchBytes
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	deadline := time.Now().Add(opts.MaxWait)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		start, end := p.boundsLocked()
		if offset < start || offset > end {
			p.mu.Unlock()
			return nil, fmt.Errorf("%w: %s/%d offset %d not in [%d, %d]", ErrOffsetOutOfRange, p.topic, p.id, offset, start, end)
		}
		wake := p.notify
		var recs []Record
		var err error
		if offset < end {
			lost, inside := lostAt(p.lost, offset)
			if inside {
				p.mu.Unlock()
				return nil, p.dataLoss(lost)
			}
			stop := int64(math.MaxInt64)
			if lost != nil {
				stop = lost.From
			}
			rp := p.planLocked(segmentFor(p.segs, offset))
			p.mu.Unlock()
			recs, err = p.readPlan(&rp, offset, stop, maxBytes, opts.Into[:0], opts.Buffers)
			rp.release()
			if err != nil || len(recs) > 0 {
				return recs, err
			}
			if lost != nil {
				return nil, p.dataLoss(lost) // nothing left before the lost range
			}
		} else {
			p.mu.Unlock()
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil, nil
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-wake:
		case <-timer.C:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// readPlan reads records from offset on, below stop, until maxBytes of
// payload (at least one record) or the plan's end, appending them to recs
// (empty; FetchOptions.Into), with fb's memory if not nil
// (FetchOptions.Buffers).
func (p *partition) readPlan(rp *readPlan, offset, stop int64, maxBytes int, recs []Record, fb *FetchBuffers) ([]Record, error) {
	if fb != nil {
		clear(fb.headers) // the last fetch's: they refer to its records' bytes
		fb.headers = fb.headers[:0]
	}
	total := 0
	for _, v := range rp.segs {
		if v.size == 0 {
			continue
		}
		if v.s.base >= stop {
			break
		}
		pos := lookupOffset(v.idx, offset)
		r := newBatchReader(v.s.f, pos, v.size, p.readChunk(maxBytes), true)
		r.starts = v.idx
		if fb != nil {
			r.alloc = fb.Window
		}
		for total < maxBytes || len(recs) == 0 {
			if len(recs) > 0 && !r.fits(int64(maxBytes-total)) {
				return recs, nil // the next batch would overshoot: leave it for the next fetch
			}
			b, h, bpos, err := r.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				if len(recs) > 0 {
					return recs, nil // report the damage on the next fetch
				}
				return nil, p.readError(v.s, bpos, err)
			}
			if h.Last() < offset {
				continue
			}
			if h.Base >= stop {
				return recs, nil
			}
			p.noteRatio(h, b)
			first := len(recs) == 0
			recs = slices.Grow(recs, int(h.Count))
			err = walkRecords(b, h, fb, func(rec Record) bool {
				if rec.Offset < offset {
					return true
				}
				if rec.Offset >= stop {
					total = maxBytes // ends the reading
					return false
				}
				rec.Partition = p.id
				recs = append(recs, rec)
				total += recordSize(&rec)
				return total < maxBytes
			})
			if err != nil {
				return recs, p.readError(v.s, bpos, err)
			}
			if first && len(recs) > 0 && 2*h.Size() <= int64(maxBytes) && total < maxBytes {
				// Room for what the fetch will take at the first (small) batch's
				// bytes a record (at most what the segment holds after
				// it): growing by doubling copied the records about twice.
				per := max(total/len(recs), 1)
				more := min(int64(maxBytes-total)/int64(per)+1, (v.size-bpos-h.Size())/int64(per)+1, maxFetchEstimate)
				recs = slices.Grow(recs, int(more))
			}
		}
		if total >= maxBytes && len(recs) > 0 {
			break
		}
	}
	return recs, nil
}

// readChunk is how many bytes of a segment a fetch of maxBytes reads at
// once: maxBytes and a header, scaled by the stored size of the records'
// bytes the last fetch decoded (storedPer1K), up to 4 MiB.
func (p *partition) readChunk(maxBytes int) int {
	n := int64(maxBytes + batchHeaderLen)
	if q := p.storedPer1K.Load(); q > 0 && q < 1024 {
		n = n*q/1024 + fitsPeek
	}
	return int(min(n, 4<<20))
}

// noteRatio notes the stored size per 1024 bytes of records of a batch a
// fetch decodes (readChunk).
func (p *partition) noteRatio(h batchHeader, b []byte) {
	q := int64(1024)
	if h.Flags&flagCompressed != 0 {
		q = min(h.Size()*1024/max(recordsBound(h, b), 1)+1, 1024)
	}
	if p.storedPer1K.Load() != q {
		p.storedPer1K.Store(q)
	}
}

func (p *partition) readError(s *segment, pos int64, err error) error {
	if r, ok := err.(corruptReason); ok {
		return &CorruptionError{Path: s.path, Pos: pos, Reason: string(r)}
	}
	return fmt.Errorf("log: read %s at %d: %w", s.path, pos, err)
}

// offsetForTime implements Log.OffsetForTime for one partition.
func (p *partition) offsetForTime(ctx context.Context, ts time.Time) (int64, error) {
	target := ts.UnixMilli()
	if ts.Sub(time.UnixMilli(target)) > 0 {
		target++ // the first whole millisecond at or after ts
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return 0, ErrClosed
	}
	rp := p.planLocked(0)
	p.mu.Unlock()
	defer rp.release()
	for _, v := range rp.segs {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if v.size == 0 || v.maxTs < target {
			continue
		}
		off, found, err := p.findTime(v, target)
		if err != nil || found {
			return off, err
		}
	}
	return rp.end, nil
}

// findTime scans one segment for the first record at or after target ms.
func (p *partition) findTime(v segView, target int64) (int64, bool, error) {
	r := newBatchReader(v.s.f, lookupTime(v.idx, target), v.size, 256<<10, false)
	for {
		b, h, pos, err := r.next()
		if err == io.EOF {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, p.readError(v.s, pos, err)
		}
		if h.MaxTs < target {
			continue
		}
		var off int64 = -1
		err = walkRecords(b, h, nil, func(rec Record) bool {
			if rec.Timestamp.UnixMilli() >= target {
				off = rec.Offset
				return false
			}
			return true
		})
		if err != nil {
			return 0, false, p.readError(v.s, pos, err)
		}
		if off >= 0 {
			return off, true, nil
		}
	}
}
