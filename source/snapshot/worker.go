package snapshot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cdcd-dev/cdcd/source"
)

// Prepare describes every queued table (so Observe knows their keys before
// the stream starts). A table that is gone ends its run.
func (e *Engine) Prepare(ctx context.Context, db Database) error {
	e.mu.Lock()
	runs := append([]*run(nil), e.runs...)
	e.mu.Unlock()
	for _, r := range runs {
		if err := e.describe(ctx, db, r); err != nil {
			return err
		}
	}
	return nil
}

// describe looks a run's table up; a table that is gone ends the run.
func (e *Engine) describe(ctx context.Context, db Database, r *run) error {
	t, err := db.Describe(ctx, r.rec.Table)
	if errors.Is(err, ErrTableGone) {
		return e.fail(ctx, r, err)
	}
	if err != nil {
		return err
	}
	e.mu.Lock()
	r.describe(t)
	e.mu.Unlock()
	return nil
}

// fail ends a run that cannot go on, saying why.
func (e *Engine) fail(ctx context.Context, r *run, err error) error {
	e.logger.Error("snapshot ended: the table cannot be read", "table", r.rec.Table, "err", err,
		"what_to_do", "check the table and the request (cdcd snapshot "+r.rec.Table+"), then ask again")
	return e.update(ctx, func() {
		for i, x := range e.runs {
			if x == r {
				e.runs = append(e.runs[:i], e.runs[i+1:]...)
				break
			}
		}
		r.stopped = true
		p := r.progress(false)
		p.State, p.Error, p.Finished = "failed", err.Error(), time.Now().UTC()
		e.finished = append(e.finished, p)
		e.reindexLocked()
	})
}

// Run reads chunks for the queued runs, one at a time, until ctx ends or
// db fails. It runs beside the source's stream, which must deliver the
// watermarks (Watermark) for chunks to complete. em is the Emitter the
// stream hands the chunks' rows to: when it is a source.Preparer, each
// chunk's rows are prepared (encoded) on the goroutine that read them,
// before the high watermark is written, so the stream's goroutine only
// drops what the window superseded and places the rest. em may be nil.
func (e *Engine) Run(ctx context.Context, db Database, em source.Emitter) error {
	e.prep, _ = em.(source.Preparer)
	var pool *readers
	if p, ok := db.(Parallel); ok {
		pool = newReaders(p, e.cfg.Ahead)
	}
	defer pool.close() // after the readers' goroutines see ctx end
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tick := time.NewTicker(e.cfg.ProgressEvery)
	defer tick.Stop()
	for {
		r := e.next()
		if r == nil {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-e.wake:
				continue
			}
		}
		select {
		case <-tick.C:
			e.logProgress()
		default:
		}
		if err := e.step(ctx, db, pool, r); err != nil {
			if errors.Is(err, ErrTableGone) {
				if err := e.fail(ctx, r, err); err != nil {
					return err
				}
				continue
			}
			return err
		}
	}
}

// next returns the first run with work left, nil when none (or paused).
func (e *Engine) next() *run {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.paused {
		return nil
	}
	for _, r := range e.runs {
		if !r.finished {
			return r
		}
	}
	return nil
}

// step does the next thing a run needs: describe, plan, reset, one chunk.
func (e *Engine) step(ctx context.Context, db Database, pool *readers, r *run) error {
	if r.tbl == nil {
		return e.describe(ctx, db, r)
	}
	if r.rec.Replace && r.rec.ResetID == "" {
		return e.update(ctx, func() { r.rec.ResetID = newID() }) // saved before its watermark is written
	}
	e.mu.Lock() // the stream sets these (Watermark, Checkpoint)
	resetting := r.rec.Replace && !r.rec.ResetDone && !r.resetSeen
	e.mu.Unlock()
	if resetting {
		return e.reset(ctx, db, r)
	}
	if !r.rec.Planned {
		return e.plan(ctx, db, r)
	}
	e.mu.Lock()
	if r.began.IsZero() {
		r.began, r.beganRows = time.Now(), r.readRows
	}
	e.mu.Unlock()
	if q, ids := e.pointQuery(r); q != nil {
		if err := e.drain(ctx, r, false); err != nil {
			return err
		}
		began := time.Now()
		if _, err := e.chunk(ctx, db, r, *q, ids); err != nil {
			return err
		}
		e.throttle(ctx, began)
		return nil
	}
	return e.rangeStep(ctx, db, pool, r)
}

// rangeStep keeps up to Ahead range chunks in flight (each read while the
// stream emits the one before) and waits for the oldest. A chunk read
// again makes the ones after it read again too (the stream cancels them):
// the range goes on from the last chunk emitted.
func (e *Engine) rangeStep(ctx context.Context, db Database, pool *readers, r *run) error {
	if !r.cursorSet {
		e.mu.Lock()
		r.moveCursor()
		e.mu.Unlock()
	}
	for len(r.ahead) < e.cfg.Ahead && !r.readEnd {
		began := time.Now()
		q := ChunkQuery{Where: r.rec.Where, After: r.cursor, Upper: r.rec.Upper, Limit: e.cfg.ChunkRows}
		if pool != nil {
			var prev *chunk
			if n := len(r.ahead); n > 0 {
				prev = r.ahead[n-1]
			}
			c, err := e.startParallel(ctx, pool, r, q, prev)
			if err != nil {
				return err
			}
			r.ahead = append(r.ahead, c)
			r.cursor, r.readEnd = c.query.To, keysEqual(c.query.To, r.rec.Upper)
			e.throttle(ctx, began)
			continue
		}
		c, err := e.start(ctx, db, r, q, nil)
		if err != nil {
			return err
		}
		r.ahead = append(r.ahead, c)
		if len(c.res.Rows) < q.Limit || c.res.Last == nil || keysEqual(c.res.Last, r.rec.Upper) {
			r.readEnd = true
		} else {
			r.cursor = c.res.Last
		}
		e.throttle(ctx, began)
	}
	if len(r.ahead) == 0 {
		e.mu.Lock()
		done := len(r.windows) == 0 && !r.unresolved() && r.rangeDone
		said, rows := done && !r.finished, r.rows()
		r.finished = r.finished || done
		e.mu.Unlock()
		if said {
			// Said before the save that ends the run: a crash between
			// that save and its "snapshot done" leaves this line as the
			// run's last.
			e.logger.Info("snapshot read to the end; done once its rows are durable", "table", r.rec.Table, "rows", rows)
		}
		if !done { // keys wait to be read again: pointQuery takes them next
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		return nil
	}
	t := time.Now()
	o, err := e.wait(ctx, r.ahead[0])
	if err != nil {
		return err
	}
	since(&e.tm.waiting, t)
	r.ahead = r.ahead[1:]
	switch o {
	case outcomeEmitted:
		return nil
	case outcomeCut:
		r.cuts++
	case outcomeRetry:
		r.retries++
	}
	return e.drain(ctx, r, true)
}

// drain waits for the range chunks in flight. When one was not emitted
// whole (read again, cut, stopped), or restart is set, the range goes on
// from the last key emitted: the chunks after it were refused, and a
// cursor left after them would wait for chunks no longer in flight.
func (e *Engine) drain(ctx context.Context, r *run, restart bool) error {
	for len(r.ahead) > 0 {
		o, err := e.wait(ctx, r.ahead[0])
		if err != nil {
			return err
		}
		r.ahead = r.ahead[1:]
		restart = restart || o != outcomeEmitted
	}
	if restart {
		e.mu.Lock()
		r.moveCursor()
		e.mu.Unlock()
	}
	return nil
}

// plan fixes the run's upper bound and saves it before any chunk of the
// run is emitted; a replacing run's, after its reset marker (read again
// when the read missed a change from before the marker).
func (e *Engine) plan(ctx context.Context, db Database, r *run) error {
	p, err := db.Plan(ctx, r.rec.Table, r.tbl, r.rec.Where)
	if err != nil {
		return err
	}
	if r.resetSeen && p.Consistent != nil && !p.Consistent(r.resetPos) {
		e.logger.Info("upper bound read again: a change the stream delivered before the reset was not visible to its read", "table", r.rec.Table)
		return nil
	}
	upper, est := p.Upper, p.Estimate
	err = e.update(ctx, func() {
		r.rec.Planned, r.rec.Upper, r.rec.Estimate = true, upper, est
		if upper == nil {
			r.rangeDone = true
		} else if r.tbl.ParseKey != nil {
			r.upperVals, _ = r.tbl.ParseKey(upper)
		}
		r.settleBound()
	})
	if err == nil {
		e.logger.Info("snapshot started", "table", r.rec.Table, "estimated_rows", est, "replace", r.rec.Replace, "where", r.rec.Where)
	}
	return err
}

// reset writes the run's reset watermark (again after a restart: the
// first one the stream meets places the marker) and waits until the
// stream meets one.
func (e *Engine) reset(ctx context.Context, db Database, r *run) error {
	if !r.resetWritten {
		if err := db.WriteWatermark(ctx, kindReset+":"+r.rec.ResetID); err != nil {
			return fmt.Errorf("snapshot: reset watermark of %s: %w", r.rec.Table, err)
		}
		r.resetWritten = true
	}
	select { // a stopped run is noticed within a second
	case <-r.resetCh:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Second):
	}
	return nil
}

// pointQuery returns a chunk of the keys to read again when it is their
// turn: after the range, or earlier once a chunk's worth waits (they are
// held in memory; and read early, a hot key is changed, and dropped,
// again).
func (e *Engine) pointQuery(r *run) (*ChunkQuery, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	waiting := 0
	for _, k := range r.reread {
		if k.resolvedAt == nil && !k.inFlight {
			waiting++
		}
	}
	if waiting == 0 || !r.rangeDone && waiting < e.cfg.ChunkRows {
		return nil, nil
	}
	var keys []Key
	var ids []string
	for id, k := range r.reread {
		if k.resolvedAt != nil || k.inFlight {
			continue
		}
		k.inFlight = true
		keys, ids = append(keys, k.key), append(ids, id)
		if len(keys) >= e.cfg.ChunkRows {
			break
		}
	}
	return &ChunkQuery{Keys: keys}, ids
}

// chunk runs one chunk and waits until the stream has met its high
// watermark.
func (e *Engine) chunk(ctx context.Context, db Database, r *run, q ChunkQuery, point []string) (outcome, error) {
	c, err := e.start(ctx, db, r, q, point)
	if err != nil {
		return 0, err
	}
	return e.wait(ctx, c)
}

// start writes a chunk's low watermark, reads it and writes its high
// watermark; the stream then decides (wait).
func (e *Engine) start(ctx context.Context, db Database, r *run, q ChunkQuery, point []string) (*chunk, error) {
	e.mu.Lock()
	c := &chunk{id: e.nextChunkIDLocked(), run: r, query: q, point: point, done: make(chan outcome, 1), epoch: r.epoch}
	e.chunks[c.id] = c
	e.mu.Unlock()
	t := time.Now()
	res, err := e.lowRead(ctx, db, &t, r, c)
	if err != nil {
		e.release(c)
		return nil, err
	}
	e.prepare(res)
	t = since(&e.tm.read, t)
	e.mu.Lock()
	c.res, c.highAt = res, t
	e.mu.Unlock()
	defer since(&e.tm.high, t)
	if err := db.WriteWatermark(ctx, kindHigh+":"+c.id); err != nil {
		e.release(c)
		return nil, fmt.Errorf("snapshot: high watermark of %s: %w", r.rec.Table, err)
	}
	return c, nil
}

// chunkDB is what writes a chunk's watermarks and reads it: the Database
// or a Parallel one's ChunkReader.
type chunkDB interface {
	ReadChunk(ctx context.Context, table string, t *Table, q ChunkQuery) (*Chunk, error)
	WriteWatermark(ctx context.Context, id string) error
}

// lowRead writes chunk c's low watermark and reads it, in one call when db
// is a LowReader (its time counts as the read's then); *t is when the
// step began, moved on to the low watermark's end.
func (e *Engine) lowRead(ctx context.Context, db chunkDB, t *time.Time, r *run, c *chunk) (*Chunk, error) {
	if lr, ok := db.(LowReader); ok {
		res, err := lr.ReadChunkAfterLow(ctx, kindLow+":"+c.id, r.rec.Table, r.tbl, c.query)
		if err != nil {
			return nil, fmt.Errorf("snapshot: low watermark and read of a chunk of %s: %w", r.rec.Table, err)
		}
		return res, nil
	}
	if err := db.WriteWatermark(ctx, kindLow+":"+c.id); err != nil {
		return nil, fmt.Errorf("snapshot: low watermark of %s: %w", r.rec.Table, err)
	}
	*t = since(&e.tm.low, *t)
	res, err := db.ReadChunk(ctx, r.rec.Table, r.tbl, c.query)
	if err != nil {
		return nil, fmt.Errorf("snapshot: read a chunk of %s: %w", r.rec.Table, err)
	}
	return res, nil
}

// wait returns a chunk's outcome once the stream has met its high
// watermark.
func (e *Engine) wait(ctx context.Context, c *chunk) (outcome, error) {
	var failed <-chan struct{}
	if c.par != nil {
		failed = c.par.written
	}
	for {
		select {
		case o := <-c.done:
			return o, nil
		case <-failed: // its reader goroutine ended: failed, or the high watermark is written
			if c.par.err != nil {
				return 0, c.par.err
			}
			failed = nil
		case <-ctx.Done():
			e.release(c)
			return 0, ctx.Err()
		}
	}
}

// release forgets a chunk that will not complete.
func (e *Engine) release(c *chunk) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := c.run
	delete(e.chunks, c.id)
	for i, w := range r.windows {
		if w == c {
			r.windows = append(r.windows[:i], r.windows[i+1:]...)
			break
		}
	}
	for _, id := range c.point {
		if k := r.reread[id]; k != nil {
			k.inFlight, k.readded = false, false
		}
	}
}

// prepare has the Emitter encode a chunk's rows ahead (see Run).
func (e *Engine) prepare(res *Chunk) {
	if e.prep != nil && len(res.Rows) > 0 {
		e.prep.Prepare(res.Rows)
	}
}

// throttle sleeps so a run reads at most MaxRowsPerSecond.
func (e *Engine) throttle(ctx context.Context, began time.Time) {
	if e.cfg.MaxRowsPerSecond <= 0 {
		return
	}
	want := time.Duration(float64(e.cfg.ChunkRows) / float64(e.cfg.MaxRowsPerSecond) * float64(time.Second))
	if d := want - time.Since(began); d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}
