package iceberg

import (
	"context"
	"fmt"
	"time"

	"github.com/cdcd-dev/cdcd/log"
)

// fetched is a batch the fetcher hands the committing loop.
type fetched struct {
	changes []change
	bytes   int
	// next is every partition's fetch position after this batch.
	next    []int64
	lastPos []byte
	// barrier (upsert mode): every partition stopped at the same truncate;
	// next then points past it. The fetcher waits for resume.
	barrier bool
}

// fetcher reads a table's topic partition by partition and decodes it.
type fetcher struct {
	w        *tableWriter
	next     []int64
	blocked  []bool  // stopped at a truncate (upsert)
	truncAt  []int64 // offset of that truncate
	truncPos []byte
}

func newFetcher(w *tableWriter, next []int64) *fetcher {
	return &fetcher{w: w, next: next, blocked: make([]bool, len(next)), truncAt: make([]int64, len(next))}
}

// batchBytes is about how much record data one batch carries.
const batchBytes = 1 << 20

func (f *fetcher) run(ctx context.Context, out chan<- fetched, resume <-chan struct{}) error {
	p, idle := 0, 0
	var cur fetched
	send := func() error {
		cur.next = append([]int64(nil), f.next...)
		select {
		case out <- cur:
		case <-ctx.Done():
			return ctx.Err()
		}
		cur = fetched{}
		return nil
	}
	for ctx.Err() == nil {
		if f.allBlocked() {
			if len(cur.changes) > 0 {
				if err := send(); err != nil {
					return err
				}
			}
			for i := range f.next {
				f.next[i] = f.truncAt[i] + 1
			}
			cur.barrier = true
			if err := send(); err != nil {
				return err
			}
			select {
			case <-resume:
			case <-ctx.Done():
				return ctx.Err()
			}
			for i := range f.blocked {
				f.blocked[i] = false
			}
			continue
		}
		wait := time.Duration(0)
		if idle >= len(f.next) {
			wait = 100 * time.Millisecond
		}
		n := 0
		if !f.blocked[p] {
			var err error
			if n, err = f.fetch(ctx, int32(p), wait, &cur); err != nil {
				return err
			}
		}
		if n == 0 {
			idle++
		} else {
			idle = 0
		}
		p = (p + 1) % len(f.next)
		// Hand over what we have when it is big, or when the topic is idle.
		if cur.bytes >= batchBytes || (len(cur.changes) > 0 && idle >= len(f.next)) {
			if err := send(); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

func (f *fetcher) allBlocked() bool {
	for _, b := range f.blocked {
		if !b {
			return false
		}
	}
	return len(f.blocked) > 0
}

// fetch reads one partition's next records into cur.
func (f *fetcher) fetch(ctx context.Context, p int32, wait time.Duration, cur *fetched) (int, error) {
	w := f.w
	recs, err := w.s.lg.Fetch(ctx, w.cfg.Topic, p, f.next[p], log.FetchOptions{MaxBytes: w.s.cfg.FetchBytes, MaxWait: wait})
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("iceberg: fetch %s/%d at %d: %w", w.cfg.Topic, p, f.next[p], err)
	}
	for i := range recs {
		rec := &recs[i]
		if rec.Value == nil {
			f.next[p] = rec.Offset + 1
			continue
		}
		c, err := w.decode(rec)
		if err != nil {
			return 0, err
		}
		if c.op() == 't' {
			if w.upsertMode() {
				// Stop this partition at the truncate until all have it.
				if f.truncPos != nil && string(f.truncPos) != string(c.position()) && f.anyBlocked() {
					return 0, badData(fmt.Errorf("iceberg: %s/%d: truncate at position %x while other partitions wait at %x",
						w.cfg.Topic, p, c.position(), f.truncPos))
				}
				f.blocked[p], f.truncAt[p], f.truncPos = true, rec.Offset, c.position()
				return i, nil
			}
			// Truncates are written to every partition; the changelog records
			// the copy in partition 0. The others stay in the buffer, so their
			// offsets get committed, but make no row.
			c.skip = p != 0
		}
		f.next[p] = rec.Offset + 1
		cur.changes = append(cur.changes, c)
		cur.bytes += len(rec.Value)
		if pos := c.position(); string(pos) > string(cur.lastPos) {
			cur.lastPos = pos
		}
	}
	return len(recs), nil
}

func (f *fetcher) anyBlocked() bool {
	for _, b := range f.blocked {
		if b {
			return true
		}
	}
	return false
}
