package snapshot

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// The stream side: called from the source's stream goroutine, in stream
// order.

// Watermark ids: "L:<session>:<seq>" and "H:<session>:<seq>" bracket a
// chunk; "R:<reset id>" places a reset marker.
const (
	kindLow   = "L"
	kindHigh  = "H"
	kindReset = "R"
)

// chunk is one chunk of this session, from its registration until the
// stream meets its high watermark.
type chunk struct {
	id    string
	run   *run
	query ChunkQuery
	point []string // ids of the re-read keys it reads

	res *Chunk // set before the high watermark is written
	// highAt is when its high watermark's write began (zero: not yet).
	highAt time.Time

	low     source.Position
	lowSeen bool
	// The window: what changed between the watermarks.
	changed   map[string]bool
	shapes    []*schema.Table // table versions of the changes in the window
	truncated bool
	// epoch is the run's range epoch when the chunk started (range
	// chunks): a range chunk read again cancels the later ones of its
	// epoch, whose rows would leave a gap behind them.
	epoch int
	// par is set for a chunk read on a reader goroutine (parallel.go).
	par *pchunk

	done chan outcome
}

type outcome uint8

const (
	outcomeEmitted outcome = iota + 1
	outcomeRetry           // read again: inconsistent, or the shape changed
	outcomeStopped         // the run was stopped meanwhile
	// outcomeCut: emitted, but the read stopped at its Limit before the
	// chunk's To; the chunks after it were refused, and the range goes on
	// after its Last.
	outcomeCut
)

// Watermark handles a watermark the stream met at pos (a position no
// streamed change has: every change before it sorts below pos, every change
// after it above pos with any suffix). It returns the changes to emit
// there: a reset marker, or a chunk's rows (whose positions extend pos).
// Watermarks of other sessions, and ids it does not know, return nil.
func (e *Engine) Watermark(id string, pos source.Position) []source.Change {
	kind, rest, ok := strings.Cut(id, ":")
	if !ok {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch kind {
	case kindReset:
		return e.resetLocked(rest, pos)
	case kindLow:
		if c := e.chunks[rest]; c != nil && !c.lowSeen {
			c.low, c.lowSeen = append(source.Position(nil), pos...), true
			c.changed = map[string]bool{}
			c.run.windows = append(c.run.windows, c)
		}
	case kindHigh:
		if c := e.chunks[rest]; c != nil {
			return e.highLocked(c, pos)
		}
	}
	return nil
}

// resetLocked emits the reset marker of the run whose reset id is id, the
// first time this session meets one.
func (e *Engine) resetLocked(id string, pos source.Position) []source.Change {
	for _, r := range e.runs {
		if r.rec.ResetID != id || r.rec.ResetDone || r.resetSeen || r.tbl == nil {
			continue
		}
		r.resetSeen, r.resetPos = true, append(source.Position(nil), pos...)
		close(r.resetCh)
		e.logger.Info("snapshot reset: the table is emptied here and filled by the snapshot", "table", r.rec.Table, "reset", id)
		return []source.Change{{Table: r.tbl.Shape, Op: source.OpTruncate, Reset: id, Pos: r.resetPos,
			CommitTime: time.Now(), Snapshot: true}}
	}
	return nil
}

// highLocked closes a chunk's window and returns the rows to emit.
func (e *Engine) highLocked(c *chunk, pos source.Position) []source.Change {
	e.tm.chunks.Add(1)
	if !c.highAt.IsZero() {
		since(&e.tm.meet, c.highAt)
	}
	delete(e.chunks, c.id)
	r := c.run
	for i, w := range r.windows {
		if w == c {
			r.windows = append(r.windows[:i], r.windows[i+1:]...)
			break
		}
	}
	if o := e.vetLocked(c); o != outcomeEmitted {
		e.tm.refused.Add(1)
		if c.point == nil {
			r.cancelEpoch = c.epoch // also the ones of its epoch not started yet
		}
		for _, id := range c.point {
			if k := r.reread[id]; k != nil {
				k.inFlight, k.readded = false, false
			}
		}
		c.done <- o
		return nil
	}
	read := len(c.res.Rows)
	last, lastVals := c.res.Last, []any(nil)
	cut := c.query.To != nil && read >= c.query.Limit && c.res.Last != nil
	switch {
	case cut: // (Last, To] is not read: the later chunks of the epoch must not be emitted
		r.cancelEpoch, r.cutTo = c.epoch, c.query.To
		if r.tbl.Compare != nil {
			lastVals = OwnValues(c.res.Rows[read-1].Key()) // kept: the rows' storage is read into again
		}
	case c.query.To != nil: // the range read ends at To, whether or not a row has that key
		last = c.query.To
		if r.tbl.Compare != nil && r.tbl.ParseKey != nil {
			lastVals, _ = r.tbl.ParseKey(last)
		}
	case read > 0 && r.tbl.Compare != nil:
		lastVals = OwnValues(c.res.Rows[read-1].Key()) // kept: the rows' storage is read into again
	}
	rows := c.res.Rows[:0]
	switch {
	case c.truncated:
	case len(c.changed) == 0:
		rows = c.res.Rows
	default: // the keys are encoded only when the window saw changes
		for i := range c.res.Rows {
			if id, _, ok := changeKey(&c.res.Rows[i]); !ok || !c.changed[id] {
				rows = append(rows, c.res.Rows[i])
			}
		}
	}
	clear(c.res.Rows[len(rows):read])
	positions(rows, pos)
	em := emitted{pos: append(source.Position(nil), pos...), rows: int64(len(rows)), point: c.point != nil}
	if c.point != nil {
		for _, id := range c.point {
			k := r.reread[id]
			if k == nil {
				continue
			}
			if k.inFlight && !k.readded {
				k.resolvedAt = em.pos
			}
			k.inFlight, k.readded = false, false
		}
	} else {
		em.last = last
		if c.query.To == nil && (read < c.query.Limit || last == nil) || keysEqual(last, r.rec.Upper) {
			r.rangeDone = true
		}
		if last != nil {
			r.readLast, r.readVals = last, lastVals
		}
		if len(r.windows) == 0 {
			r.settleMaybe(r.readVals)
		}
	}
	if n := len(rows); n > 0 && r.rangeDone && len(r.windows) == 0 && !r.unresolved() {
		// The run's last row, as far as the engine knows now (a streamed
		// change may still ask a key to be read again): source.snapshot
		// "last_in_data_collection", which tells a sink the load's rows
		// have ended, so it commits them at once instead of waiting for
		// its commit interval (the COPY load marks its last row so too).
		rows[n-1].Place = source.PlaceLastInTable
	}
	r.readRows += em.rows
	r.emitted = append(r.emitted, em)
	if cut {
		e.tm.cut.Add(1)
		c.done <- outcomeCut
	} else {
		c.done <- outcomeEmitted
	}
	return rows
}

// vetLocked decides whether a chunk's rows may be emitted at its high
// watermark.
func (e *Engine) vetLocked(c *chunk) outcome {
	switch r := c.run; {
	case r.stopped:
		return outcomeStopped
	case c.res == nil || !c.lowSeen || c.point == nil && c.epoch == r.cancelEpoch:
		return outcomeRetry
	case c.res.Consistent != nil && !c.res.Consistent(c.low):
		e.tm.inconsistent.Add(1)
		e.logger.Info("chunk read again: a change the stream delivered before its low watermark was not visible to its read",
			"table", r.rec.Table)
		return outcomeRetry
	case c.reshaped():
		e.logger.Info("chunk read again: the table changed shape while it was read", "table", r.rec.Table)
		return outcomeRetry
	}
	return outcomeEmitted
}

// reshaped reports whether a change in the window had another shape than
// the chunk's rows: the rows would follow changes of a newer version.
func (c *chunk) reshaped() bool {
	if len(c.res.Rows) == 0 {
		return false
	}
	t := c.res.Rows[0].Table
	for _, s := range c.shapes {
		if s != t && !s.Equal(t) {
			return true
		}
	}
	return false
}

// positions gives rows the positions pos ‖ index (4 bytes, big-endian),
// cut from one allocation, and marks them rows of an incremental snapshot.
func positions(rows []source.Change, pos source.Position) {
	n := len(pos) + 4
	arena := make([]byte, 0, n*len(rows))
	for i := range rows {
		start := len(arena)
		arena = append(arena, pos...)
		arena = binary.BigEndian.AppendUint32(arena, uint32(i))
		rows[i].Pos = source.Position(arena[start:len(arena):len(arena)])
		rows[i].Place = source.PlaceIncremental
	}
}

// Observe looks at the changes batch[from:] the stream is about to emit:
// it records the keys changed in open windows and, for replacing runs,
// drops changes whose unchanged values the sink could not fill (see the
// package doc). It returns the batch without them.
func (e *Engine) Observe(batch []source.Change, from int) []source.Change {
	if !e.active.Load() {
		return batch
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	out := from
	for i := from; i < len(batch); i++ {
		c := &batch[i]
		if c.Snapshot || c.Reset != "" || c.Table == nil {
			batch[out] = batch[i]
			out++
			continue
		}
		r := e.runOfLocked(c.Table)
		if r != nil {
			r.track(c)
			if r.lacking() && e.dropLocked(r, c) {
				if out > 0 && c.Op == source.OpCreate && batch[out-1].KeyChange && batch[out-1].Op == source.OpDelete {
					batch[out-1].KeyChange = false // its insert is gone: nothing depends on the delete
				}
				continue
			}
		}
		batch[out] = batch[i]
		out++
	}
	clear(batch[out:])
	return batch[:out]
}

// track records a change in the run's open windows.
func (r *run) track(c *source.Change) {
	if len(r.windows) == 0 {
		return
	}
	id, _, ok := changeKey(c)
	for _, w := range r.windows {
		if !containsShape(w.shapes, c.Table) {
			w.shapes = append(w.shapes, c.Table)
		}
		if c.Op == source.OpTruncate || !ok {
			w.truncated = true
			continue
		}
		w.changed[id] = true
	}
}

func containsShape(s []*schema.Table, t *schema.Table) bool {
	for _, x := range s {
		if x == t {
			return true
		}
	}
	return false
}

// dropLocked reports whether a change of a replacing run's table must be
// dropped because it carries unchanged values the sink has no row to take
// from; it puts the change's key in the re-read set where no range chunk
// will read it.
func (e *Engine) dropLocked(r *run, c *source.Change) bool {
	if !carriesUnchanged(c) {
		return false
	}
	if r.rec.Replace && !r.resetSeen && !r.rec.ResetDone {
		// Before the reset marker the truncate drops it anyway, and the
		// sink may have no row for it (a run queued before the stream
		// replays the changes it follows, as an interrupted load's is).
		return true
	}
	if r.tbl == nil || r.tbl.KeyText == nil {
		return false
	}
	ownID, own, ok := changeKey(c)
	if !ok {
		return false
	}
	srcID, src := ownID, own
	if c.Op == source.OpCreate { // the insert of a key change: its values come from the old key
		if src = beforeKey(c); src == nil {
			return false
		}
		if srcID, ok = encodeKeyVals(c.Table, src); !ok {
			return false
		}
	}
	// Asked once a key: for a collated key each comparison is a round
	// trip to the database (dbOrder), on the stream's goroutine.
	pending, known := r.pendingOrder(srcID, src)
	if !pending {
		return false
	}
	if ownID != srcID {
		pending, known = r.pendingOrder(ownID, own)
	}
	text, ok := r.tbl.KeyText(own)
	if !ok {
		return false // cannot read it again: keep it, and the sink stops loudly
	}
	switch {
	case !r.rec.Planned: // above the bound, read later, no range chunk reads it
		r.addReread(text, own, true)
	case !pending || r.rangeDone:
		r.addReread(text, own, false)
	case r.rangeWindowOpen() || len(r.windows) > 0 && r.reread[ownID] != nil:
		// An open range window's chunk may hold the key (it drops it), or
		// the key waits to be read again, perhaps by the open window's
		// point chunk (which drops it). A point chunk's window alone does
		// not hold a key the range has not read: the range reads it later,
		// after this change. Put there too, every key changed while point
		// chunks ran went into the set, read by the next point chunk, in
		// whose window more did: under writes the set grew faster than
		// point chunks emptied it, and the range, which waits while a
		// chunk's worth of keys does, never went on (the composite-key
		// test's snapshot stalled at 5-20 rows a second, session 26).
		r.addReread(text, own, true)
	case !known:
		// Pending only because the order could not be told (the
		// database's comparison failed): it may be a key the range read.
		r.addReread(text, own, false)
	}
	return true
}

// rangeWindowOpen reports whether a range chunk's window is open.
func (r *run) rangeWindowOpen() bool {
	for _, w := range r.windows {
		if w.point == nil {
			return true
		}
	}
	return false
}

// carriesUnchanged reports whether c is an update, or the insert of a key
// change, with a value the source did not send.
func carriesUnchanged(c *source.Change) bool {
	if c.Op != source.OpUpdate && (c.Op != source.OpCreate || c.Before == nil) {
		return false
	}
	for _, v := range c.After {
		if schema.IsUnchanged(v) {
			return true
		}
	}
	return false
}

// beforeKey returns the key values of c.Before (nil when absent).
func beforeKey(c *source.Change) []any {
	if c.Before == nil {
		return nil
	}
	k := make([]any, len(c.Table.Key))
	for i, ci := range c.Table.Key {
		if ci >= len(c.Before) || c.Before[ci] == nil {
			return nil
		}
		k[i] = c.Before[ci]
	}
	return k
}

// Checkpoint records that every watermark at or before durable has had
// its changes made durable, and saves the progress that makes durable. A
// source calls it before it confirms durable to its database.
func (e *Engine) Checkpoint(ctx context.Context, durable source.Position) error {
	if !e.active.Load() {
		return nil
	}
	e.mu.Lock()
	changed := false
	for _, r := range e.runs {
		changed = r.checkpoint(durable) || changed
	}
	keep := e.runs[:0]
	var ended []*run
	for _, r := range e.runs {
		if r.finished && len(r.emitted) == 0 && len(r.reread) == 0 && (!r.rec.Replace || r.rec.ResetDone) {
			e.finishLocked(r)
			ended = append(ended, r)
			changed = true
			continue
		}
		keep = append(keep, r)
	}
	clear(e.runs[len(keep):])
	e.runs = keep
	if changed {
		e.reindexLocked()
	}
	e.mu.Unlock()
	if !changed {
		return nil
	}
	if err := e.save(ctx); err != nil {
		return err
	}
	// Said once saved: a run said to be done is not run again after a
	// crash (nor said to be done twice).
	for _, r := range ended { // no longer in e.runs: nothing changes them
		e.logger.Info("snapshot done", "table", r.rec.Table, "rows", r.rec.Rows, "replace", r.rec.Replace,
			"took", time.Since(r.rec.Started).Round(time.Millisecond))
	}
	return nil
}

// Active reports whether a run exists (queued, running or finishing): one
// atomic load, for a source's loop to call at every message.
func (e *Engine) Active() bool { return e.active.Load() }

// Finishing reports whether a run has read and emitted everything and
// waits only for its rows to be durable: a Checkpoint once they are ends
// it. A source checkpoints then, after the flush that makes them durable,
// rather than at its next periodic one, so a run is done (in status, in
// the saved state) when its rows are in the log, not up to a status
// interval later.
func (e *Engine) Finishing() bool {
	if !e.active.Load() {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.runs {
		if r.finished {
			return true
		}
	}
	return false
}

// checkpoint moves what durable covers into the saved record.
func (r *run) checkpoint(durable source.Position) bool {
	changed := false
	for len(r.emitted) > 0 && r.emitted[0].pos.Compare(durable) <= 0 {
		em := r.emitted[0]
		if em.last != nil {
			r.rec.Last = em.last
		}
		r.rec.Rows += em.rows
		r.emitted = r.emitted[1:]
		changed = true
	}
	for id, k := range r.reread {
		if k.resolvedAt != nil && k.resolvedAt.Compare(durable) <= 0 {
			delete(r.reread, id)
			changed = true
		}
	}
	if r.resetSeen && !r.rec.ResetDone && r.resetPos.Compare(durable) <= 0 {
		r.rec.ResetDone = true
		changed = true
	}
	return changed
}

// finishLocked keeps a run's end for status.
func (e *Engine) finishLocked(r *run) {
	p := r.progress(e.paused)
	p.State, p.Percent, p.ETA, p.Finished = "done", 100, 0, time.Now().UTC()
	e.finished = append(e.finished, p)
	if len(e.finished) > 32 {
		e.finished = e.finished[1:]
	}
}

// sessionSeq returns the next chunk id of this session.
func (e *Engine) nextChunkIDLocked() string {
	e.seq++
	return e.session + ":" + strconv.Itoa(e.seq)
}
