package snapshot

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Several range chunks at once (a Parallel database).
//
// One chunk's read between its watermarks is most of a snapshot's time,
// and it leaves the database's other cores idle, as do the round trips
// around it. With a Parallel database the engine fixes each range chunk's
// last key first (Bounds: about Limit rows apart, exact or estimated from
// a sample, many chunks' ends in one read), so the next chunk's range is
// known at once, and reads up to Ahead chunks at the same time, each on a
// reader of its own: low watermark, read, high watermark. Their windows
// overlap in the stream. A chunk's end is only where its range stops: rows
// inserted into the range since the ends were read, or an estimate short
// of the truth, make the chunk longer, deleted ones shorter. A chunk reads
// its range (After, To] up to ChunkCap·ChunkRows rows in key order; one
// that stops there is cut: its rows up to its last key are emitted, the
// chunks after it refused (as after a chunk read again), and the range
// goes on after that key, up to the same ends.
//
// The ends were read one chunk at a time once: the table's description
// and an index read of Limit keys, five round trips a chunk on the
// engine's goroutine while no new chunk could start. A batch of eight
// saved the round trips; the index read of every key stayed (about 0.45
// PostgreSQL CPU-µs a row of the benchmark table, half a chunk's read).
// PostgreSQL now places the ends by a page sample (about 0.04 µs a row:
// BENCHMARKS.md, session 7); a range that goes on after a chunk read
// again or cut keeps the ends it has (moveCursor).
//
// Each chunk stays correct on its own, whatever the others do. Its read
// sees every change the stream delivered before its low watermark (the
// consistency check), and none after its high one (written after the
// read). Every change the stream delivers between the two is recorded in
// every window open then (track), this chunk's included, so a row whose
// key changed in its window is dropped and the stream's version, emitted
// where it was, stands; a row whose key did not change is the same at the
// high watermark as at the read, and is emitted there, before every later
// change. Other chunks' windows only hold other keys' rows: their ranges
// are disjoint, (After, To].
//
// What depends on chunk order is the range's progress (the last key
// emitted, saved at checkpoints): a chunk's rows must not be emitted
// before the chunks before it, or a restart after its checkpoint would
// skip theirs. So the high watermarks are written in chunk order (each
// waits until the one before is written, or failed: then it fails too),
// and the stream meets them in that order; a chunk read again cancels
// the later ones of its range epoch as before.

// maxBounds is the most chunks' ends one Bounds read returns (held in
// memory until their chunks start).
const maxBounds = 1 << 16

// ChunkCap is how many times ChunkRows a range chunk with an end (To)
// reads at most, its Limit: the end may hold more rows than planned (an
// estimated end, rows inserted since), and a chunk's rows are held in
// memory until its high watermark.
const ChunkCap = 2

// pchunk is a range chunk read by a reader goroutine.
type pchunk struct {
	written chan struct{} // closed once its high watermark is written, or it failed
	err     error         // why it failed; set before written is closed
}

// readers is the Parallel database's pool of chunk readers: at most as
// many as chunks are read at once (Ahead). A chunk's reader goes back once
// its high watermark is written, and the stream may meet that watermark,
// and the engine start the next chunk, before it does: without the bound
// the pool then opened one more connection (a fourth backend for three
// chunks, seen in session 7), kept for the rest of the run.
type readers struct {
	db   Parallel
	busy chan struct{} // a token per reader handed out; its capacity is the bound
	mu   sync.Mutex
	free []ChunkReader
	all  []ChunkReader
	wg   sync.WaitGroup // reader goroutines running
}

func newReaders(db Parallel, most int) *readers {
	return &readers{db: db, busy: make(chan struct{}, max(most, 1))}
}

// get returns an idle reader, opening one when none is idle; it waits
// while the bound's worth of readers are handed out.
func (p *readers) get(ctx context.Context) (ChunkReader, error) {
	select {
	case p.busy <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		rd := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return rd, nil
	}
	p.mu.Unlock()
	rd, err := p.db.Reader(ctx)
	if err != nil {
		<-p.busy
		return nil, err
	}
	p.mu.Lock()
	p.all = append(p.all, rd)
	p.mu.Unlock()
	return rd, nil
}

// put gives a reader back; a reader whose read failed is closed (its
// connection's state is unknown).
func (p *readers) put(rd ChunkReader, failed bool) {
	defer func() { <-p.busy }()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !failed {
		p.free = append(p.free, rd)
		return
	}
	rd.Close()
	for i, x := range p.all {
		if x == rd {
			p.all = append(p.all[:i], p.all[i+1:]...)
			break
		}
	}
}

// close waits for the reader goroutines and closes every reader.
func (p *readers) close() {
	if p == nil {
		return
	}
	p.wg.Wait()
	for _, rd := range p.all {
		rd.Close()
	}
	p.all, p.free = nil, nil
}

// startParallel fixes a range chunk's end and starts its read on a reader
// goroutine; prev is the chunk in flight before it (nil: none). It
// returns with the chunk registered; the cursor moves past it.
func (e *Engine) startParallel(ctx context.Context, p *readers, r *run, q ChunkQuery, prev *chunk) (*chunk, error) {
	if len(r.bounds) == 0 && !r.boundsLast {
		t := time.Now()
		ks, last, err := p.db.Bounds(ctx, r.rec.Table, r.tbl, q, maxBounds)
		if err != nil {
			return nil, fmt.Errorf("snapshot: ends of chunks of %s: %w", r.rec.Table, err)
		}
		since(&e.tm.bounds, t)
		r.ends, r.endsAfter, r.endsLast = ks, q.After, last || len(ks) == 0
		r.bounds, r.boundsLast = r.ends, r.endsLast
	}
	q.To = r.rec.Upper // about a chunk left: read to the bound
	if len(r.bounds) > 0 {
		q.To, r.bounds = r.bounds[0], r.bounds[1:]
	}
	q.Limit *= ChunkCap
	e.mu.Lock()
	c := &chunk{id: e.nextChunkIDLocked(), run: r, query: q, done: make(chan outcome, 1), epoch: r.epoch,
		par: &pchunk{written: make(chan struct{})}}
	e.chunks[c.id] = c
	e.mu.Unlock()
	var before *pchunk
	if prev != nil {
		before = prev.par
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		err := e.readParallel(ctx, p, c, before)
		if err != nil {
			e.release(c)
			c.par.err = err
		}
		close(c.par.written)
	}()
	return c, nil
}

// readParallel writes a chunk's low watermark, reads it, waits for the
// chunk before it to write its high watermark and writes its own.
func (e *Engine) readParallel(ctx context.Context, p *readers, c *chunk, before *pchunk) error {
	r := c.run
	t := time.Now()
	rd, err := p.get(ctx)
	if err != nil {
		return fmt.Errorf("snapshot: a reader for %s: %w", r.rec.Table, err)
	}
	t = since(&e.tm.readerWait, t)
	failed := true
	defer func() { p.put(rd, failed) }()
	res, err := e.lowRead(ctx, rd, &t, r, c)
	if err != nil {
		return err
	}
	e.prepare(res)
	e.mu.Lock()
	c.res = res
	e.mu.Unlock()
	t = since(&e.tm.read, t)
	if before != nil {
		select {
		case <-before.written:
		case <-ctx.Done():
			return ctx.Err()
		}
		if before.err != nil {
			failed = false
			return fmt.Errorf("snapshot: a chunk of %s before this one failed: %w", r.rec.Table, before.err)
		}
	}
	t = since(&e.tm.order, t)
	e.mu.Lock()
	c.highAt = t
	e.mu.Unlock()
	if err := rd.WriteWatermark(ctx, kindHigh+":"+c.id); err != nil {
		return fmt.Errorf("snapshot: high watermark of %s: %w", r.rec.Table, err)
	}
	since(&e.tm.high, t)
	failed = false
	return nil
}
