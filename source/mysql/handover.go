package mysql

import (
	"context"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
)

// The stream's hand-over on a goroutine of its own.
//
// A streamed batch's Submit encodes every change (Avro key and envelope)
// under the Emitter's lock: about half of the stream goroutine's CPU,
// during which it read and decoded nothing. With an Emitter that
// pipelines, submitBatch now starts the Submit of a full or old batch on
// a goroutine (handover.start) and the stream decodes the next batch
// meanwhile, into a second set of buffers (streamBufs: the batch's
// slice, its rows' arena, its binlog places). At most one Submit is in
// flight: the next submitBatch, and every other call into the Emitter
// (flushBatch's Emit, a chunk's Submit), waits for it first (wait), so
// the Emitter still sees one caller and the batches in the stream's
// order. The in-flight buffers are emptied on the hand-over's goroutine
// once Submit returned (the Emitter keeps nothing of a batch but its
// positions) and become the spare set. Nothing about durability moves: a
// submitted batch was never counted durable before its Sync, and the
// change submitBatch keeps in the batch still freezes the durable point.
// A failed Submit fails every later wait (handover.failed): its changes
// are no longer in the batch to be emitted again, as they were when
// Submit ran on the stream's goroutine.
//
// The row images' values (numbers, dates, decimal and character texts'
// headers) are boxed from a reusable slab of the set (vals): once the set
// is released, its slab writes its chunks again from the start, where a
// slab of the stream's own left them to the collector and made new ones,
// about 80 bytes a streamed change. Each set has its own slab, so the
// values of a batch in flight are never written while the stream decodes
// the next one into the other set; a change kept past a release (the
// change submitBatch keeps, the one releaseRows keeps, an XA
// transaction's) takes copies of its values first (keep, cloneRow).

// streamBufs is the memory a batch's decoded changes refer to.
type streamBufs struct {
	batch  []source.Change
	arena  rowArena
	vals   pgdecode.Slab // the row images' values (fromImage); reusable
	places []source.BinlogPlace
	placed int // of places, handed out since the last release
}

// newStreamBufs returns an empty set of buffers.
func newStreamBufs() *streamBufs {
	return &streamBufs{vals: *pgdecode.NewReusableSlab()}
}

// release empties b for the next batch: nothing may refer to its rows,
// their values or its places any more.
func (b *streamBufs) release() {
	clear(b.batch)
	b.batch = b.batch[:0]
	b.arena.reset()
	b.vals.Reset()
	clear(b.places[:b.placed])
	b.places, b.placed = b.places[:0], 0
}

// handover is the Submit in flight, if any, and the spare buffers.
type handover struct {
	busy  bool
	done  chan error // the Submit's result, once it and the release are done
	out   *streamBufs
	spare *streamBufs
	// failed is the first failed Submit's error, returned by every wait
	// after it: the failed batch's changes are gone from the stream's
	// buffers, so nothing after them may be emitted or checkpointed (a
	// stop's final flush would otherwise emit the kept change and save a
	// checkpoint past the batch that never reached the log).
	failed error
}

// start submits out.batch on a goroutine; wait for it before the next
// call into the Emitter. REQUIRES: nothing in flight (wait).
func (h *handover) start(ctx context.Context, p source.Pipeliner, out *streamBufs, counted func(int)) {
	if h.done == nil {
		h.done = make(chan error, 1)
	}
	h.busy, h.out = true, out
	go func() {
		n := len(out.batch)
		err := p.Submit(ctx, out.batch)
		if err == nil {
			counted(n)
		}
		out.release()
		h.done <- err
	}()
}

// wait returns once no Submit is in flight, with the error of the first
// that failed, if any; the in-flight buffers are then the spare set.
func (h *handover) wait() error {
	if !h.busy {
		return h.failed
	}
	err := <-h.done
	h.busy, h.spare, h.out = false, h.out, nil
	if err != nil && h.failed == nil {
		h.failed = err
	}
	return h.failed
}

// takeSpare returns the spare buffers (empty), new ones if none.
// REQUIRES: nothing in flight.
func (h *handover) takeSpare() *streamBufs {
	b := h.spare
	h.spare = nil
	if b == nil {
		b = newStreamBufs()
	}
	return b
}
