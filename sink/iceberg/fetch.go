package iceberg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
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
	// shape is the truncate's table version (a barrier's): the table is
	// created from it when no change before the truncate created it.
	shape *schema.Table
	// resumed: some partition skipped to a reset marker (reset.go).
	resumed bool
	// since is the earliest its changes may have reached the log, as far
	// as the fetcher can tell: the last time it found their partition's
	// end before it read them (the fetcher's start if it never did).
	since time.Time
	// waited: the channel was full when the batch was ready, so the
	// fetcher stopped reading until the loop took one (a commit ran): the
	// log may hold more than the batches in the channel.
	waited bool
	// windows are the pooled read buffers of the batch's fetches, which its
	// changes alias (windows.go).
	windows [][]byte
	// others counts its changes that are not inserts (change.insert).
	others int
}

// fetcher reads a table's topic partition by partition and decodes it.
type fetcher struct {
	w        *tableWriter
	next     []int64
	blocked  []bool  // stopped at a truncate (upsert)
	truncAt  []int64 // offset of that truncate
	truncPos []byte
	truncTbl *schema.Table // the truncate's table version
	// truncReset: the truncate the partitions stop at is a reset marker.
	truncReset bool
	resumed    bool // skipped to a reset marker since the last batch sent
	// spare holds change slices of batches the loop has taken (recycle),
	// for the next batches: a batch's slice, grown fetch by fetch (a
	// quarter at a time once large), was allocated about five times
	// over, and a change is about 190 bytes.
	spare chan []change
	most  int // the most changes a batch handed over had
	// recs is the records' slice the next fetch reads into
	// (log.FetchOptions.Into).
	recs []log.Record
	// bufs lends the fetches the table's windows and a headers slab; got
	// are the pooled windows the fetch under way took (windows.go).
	bufs log.FetchBuffers
	pool *windowPool
	got  [][]byte
	// endAt is, per partition, when the last fetch that found no record
	// began: what is read there later reached the log after it. A commit
	// that holds the fetcher up (its channel full) does not move it, so a
	// change that waited in the log meanwhile is known to have waited.
	endAt []time.Time
}

func newFetcher(w *tableWriter, next []int64) *fetcher {
	endAt := make([]time.Time, len(next))
	now := time.Now()
	for i := range endAt {
		endAt[i] = now
	}
	f := &fetcher{w: w, next: next, blocked: make([]bool, len(next)), truncAt: make([]int64, len(next)), endAt: endAt,
		spare: make(chan []change, 4), pool: w.windows}
	if f.pool != nil {
		f.bufs.Window = f.window
	}
	return f
}

// window gives a fetch a read buffer of n bytes from the table's pool and
// notes a pooled one for the batch (log.FetchBuffers.Window).
func (f *fetcher) window(n int) []byte {
	b, ref := f.pool.get(n)
	if ref != nil {
		f.got = append(f.got, ref)
	}
	return b
}

// recycle takes back a batch's change slice once the loop has copied its
// changes (tableWriter.accept): cleared, so that it pins no read buffer,
// and kept for a later batch when there is room. Safe from any goroutine.
func (f *fetcher) recycle(cs []change) {
	clear(cs)
	select {
	case f.spare <- cs[:0]:
	default:
	}
}

// changes returns an empty change slice for a new batch, a recycled one if
// any.
func (f *fetcher) changes() []change {
	select {
	case cs := <-f.spare:
		return cs
	default:
		return nil
	}
}

// batchBytes is about how much record data one batch carries.
const batchBytes = 1 << 20

func (f *fetcher) run(ctx context.Context, out chan<- fetched, resume <-chan struct{}) error {
	p, idle := 0, 0
	cur := fetched{changes: f.changes()}
	// sentFull: the last batch handed over was a full one. The loop learns
	// that the fetcher found the end of every partition after it only from
	// a smaller batch (tableWriter.caughtUp), so when there is nothing more
	// an empty one is handed over: else a backlog or a load whose last
	// batch is full would wait a commit interval for its tail's commit.
	sentFull := false
	send := func() error {
		f.most = max(f.most, len(cur.changes))
		cur.next = append([]int64(nil), f.next...)
		cur.resumed, f.resumed = f.resumed, false
		full := cur.bytes >= batchBytes
		if err := handOver(ctx, out, &cur); err != nil {
			return err
		}
		cur, sentFull = fetched{changes: f.changes()}, full
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
			cur.barrier, cur.shape = true, f.truncTbl
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
			f.truncPos = nil
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
		if cur.bytes >= batchBytes || ((len(cur.changes) > 0 || sentFull) && idle >= len(f.next)) {
			if err := send(); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

// handOver sends b, marked waited when the channel has no room for it.
func handOver(ctx context.Context, out chan<- fetched, b *fetched) error {
	select {
	case out <- *b:
		return nil
	default:
	}
	b.waited = true
	select {
	case out <- *b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
	began := time.Now()
	recs, err := w.s.lg.Fetch(ctx, w.cfg.Topic, p, f.next[p], log.FetchOptions{MaxBytes: w.s.cfg.FetchBytes, MaxWait: wait, Into: f.recs, Buffers: &f.bufs})
	// The windows go with the batch its changes are in, whatever the
	// fetch returned: only its commit hands them back.
	cur.windows = append(cur.windows, f.got...)
	clear(f.got)
	f.got = f.got[:0]
	defer func() {
		// The records are decoded into changes (which keep what they
		// need of them); their slice serves the next fetch, cleared so
		// that it pins no read buffer.
		clear(recs)
		if cap(recs) >= cap(f.recs) {
			f.recs = recs[:0]
		}
	}()
	var lost *log.DataLossError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return 0, ctx.Err()
	case errors.As(err, &lost):
		return 0, f.skipLoss(ctx, p, lost)
	case errors.Is(err, log.ErrOffsetOutOfRange):
		return 0, f.outOfRange(ctx, p, err)
	default:
		return 0, fmt.Errorf("iceberg: fetch %s/%d at %d: %w", w.cfg.Topic, p, f.next[p], err)
	}
	if len(recs) == 0 {
		f.endAt[p] = began
	} else if cur.since.IsZero() || f.endAt[p].Before(cur.since) {
		cur.since = f.endAt[p]
	}
	if need := len(cur.changes) + len(recs); need > cap(cur.changes) {
		// A change is large: a batch's slice is made for the most changes
		// a batch had, not grown fetch by fetch (a load read at the log's
		// end, where the loader writes, takes several fetches a batch).
		// A quarter more than needed: a batch a little larger than the
		// largest before would otherwise grow every recycled slice.
		cur.changes = slices.Grow(cur.changes, max(need+need/4, f.most)-len(cur.changes))
	}
	for i := range recs {
		rec := &recs[i]
		if rec.Value == nil {
			// A delete's tombstone (log.tombstones) makes no row. It is
			// buffered as skipped, as a truncate's extra copies are, so its
			// offset is committed even when it ends the partition: the
			// table would otherwise stay a record behind until the next
			// change.
			pos := rec.Header(schema.HeaderPosition)
			if err := f.passed(ctx, p, rec.Offset, pos); err != nil {
				return 0, err
			}
			f.next[p] = rec.Offset + 1
			cur.changes = append(cur.changes, change{partition: p, offset: rec.Offset, skip: true,
				info: schema.EnvelopeInfo{Position: pos}})
			cur.others++ // not an insert
			continue
		}
		c, err := w.decode(rec)
		if err != nil {
			return 0, err
		}
		if c.op() == 't' {
			if w.mode().barriers() {
				// Stop this partition at the truncate until all have it.
				reset := rec.Header(schema.HeaderReset) != nil
				if f.truncPos != nil && string(f.truncPos) != string(c.position()) && f.anyBlocked() {
					// Two truncates, each in some partitions only. A partition's
					// positions only grow, so the earlier one is missing from
					// the partitions that hold the later one. A reset marker is
					// missing only where a crash cut its append short (the log
					// makes each partition durable on its own) or where a
					// partition skipped to a later marker (reset.go); its run
					// is redone at a later position then (a load after its
					// slot was made again or resumed, a re-snapshot's marker
					// written anew), so it is moot, and so is a plain truncate
					// before a reset marker: the marker truncates the table
					// after it anyway. A plain truncate is replayed at its own
					// position (the emitter fills in missing copies), so two
					// plain ones pause the table.
					later := string(c.position()) > string(f.truncPos)
					switch {
					case !reset && !f.truncReset:
						// Unless a reset marker after them in p replaces the
						// table (a re-snapshot, the pause's fix).
						if ok, err := f.markerAfter(ctx, p, rec.Offset); err != nil || !ok {
							return 0, cmp.Or(err, badData(fmt.Errorf("iceberg: %s/%d: a truncate at position %x while other partitions wait at a truncate at %x: the earlier is missing from some partitions, which hold the later",
								w.cfg.Topic, p, c.position(), f.truncPos)))
						}
						if !later {
							f.next[p] = rec.Offset + 1
							continue
						}
						f.releaseBlocked()
					case later:
						f.releaseBlocked()
					default:
						f.next[p] = rec.Offset + 1
						continue
					}
				}
				// The position is copied: the batch the truncate was read in
				// may be committed, and its window reused, while p waits.
				f.blocked[p], f.truncAt[p], f.truncPos, f.truncReset = true, rec.Offset, append(f.truncPos[:0:0], c.position()...), reset
				f.truncTbl = c.table
				return i, nil
			}
			// Truncates are written to every partition; the changelog records
			// the copy in partition 0. The others stay in the buffer, so their
			// offsets get committed, but make no row.
			c.skip = p != 0
		}
		pos := c.position()
		if err := f.passed(ctx, p, rec.Offset, pos); err != nil {
			return 0, err
		}
		f.next[p] = rec.Offset + 1
		if !c.insert() {
			cur.others++
		}
		cur.changes = append(cur.changes, c)
		cur.bytes += len(rec.Value)
		if string(pos) > string(cur.lastPos) {
			cur.lastPos = pos
		}
	}
	return len(recs), nil
}

// passed handles a record of partition p at offset off and position pos
// (nothing to do unless pos is after the truncate other partitions wait
// at, f.truncPos): p's positions
// only grow, so that truncate is not in p and never will be — its append
// was cut short by a crash. A reset marker so cut is moot (its run is
// redone at a later position, whose marker truncates the table): the
// partitions waiting at it go on at once, rather than wait for a marker
// that may come much later or, were the run given up, never. A plain
// truncate is moot only before a reset marker in p; else the table pauses:
// no crash leaves one partial (it is replayed at its own position), and its
// keys in p would otherwise survive it.
func (f *fetcher) passed(ctx context.Context, p int32, off int64, pos []byte) error {
	if f.truncPos == nil || string(pos) <= string(f.truncPos) {
		return nil
	}
	if !f.anyBlocked() {
		f.truncPos = nil
		return nil
	}
	what := "a reset marker is missing from a partition that holds later positions (a crash cut its append short; its run is redone later): the partitions waiting at it go on"
	if !f.truncReset {
		if ok, err := f.markerAfter(ctx, p, off); err != nil || !ok {
			return cmp.Or(err, badData(fmt.Errorf("iceberg: %s/%d: a truncate at position %x, which other partitions wait at, is missing from this partition, which holds position %x after it",
				f.w.cfg.Topic, p, f.truncPos, pos)))
		}
		what = "a truncate is missing from a partition that holds later positions, before a reset marker that replaces the table: the partitions waiting at it go on"
	}
	f.w.logger.Info(what, "partition", p, "truncate_position", fmt.Sprintf("%x", f.truncPos), "position", fmt.Sprintf("%x", pos))
	f.releaseBlocked()
	f.truncPos = nil
	return nil
}

// markerAfter reports whether partition p holds a reset marker at or after
// offset off (a rare path: a plain truncate missing from some partitions).
func (f *fetcher) markerAfter(ctx context.Context, p int32, off int64) (bool, error) {
	_, _, found, err := f.w.findReset(ctx, p, off)
	return found, err
}

// releaseBlocked lets the partitions stopped at an earlier truncate go
// past it: a partition that skipped to a reset marker waits there, and the
// marker truncates the table after that truncate anyway.
func (f *fetcher) releaseBlocked() {
	for q, b := range f.blocked {
		if b {
			f.blocked[q], f.next[q] = false, f.truncAt[q]+1
		}
	}
}

func (f *fetcher) anyBlocked() bool {
	for _, b := range f.blocked {
		if b {
			return true
		}
	}
	return false
}
