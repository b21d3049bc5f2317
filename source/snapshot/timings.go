package snapshot

import (
	"sync/atomic"
	"time"
)

// Timings say where the chunks' time went, summed over every chunk this
// engine has read (all runs, all sessions of the process): for benchmarks,
// and for finding where a snapshot's pipeline waits. Chunks read at once
// overlap, so the sums may exceed the wall time.
type Timings struct {
	// Chunks counts the chunks whose high watermark the stream met.
	Chunks int64
	// ReaderWait is range chunks waiting for a free reader (Parallel).
	ReaderWait time.Duration
	// Low is writing low watermarks.
	Low time.Duration
	// Read is the chunks' reads (ReadChunk) and the Emitter's Prepare.
	Read time.Duration
	// Order is read chunks waiting for the chunk before them to write
	// its high watermark (Parallel).
	Order time.Duration
	// High is writing high watermarks.
	High time.Duration
	// Meet is from the start of a high watermark's write until the
	// stream met it.
	Meet time.Duration
	// EngineWait is the engine's goroutine waiting for the oldest chunk
	// in flight with nothing else to start.
	EngineWait time.Duration
	// Bounds is reading chunks' ends (Parallel).
	Bounds time.Duration
	// Refused counts the chunks whose high watermark the stream met
	// without emitting their rows: read again (a change their read may
	// have missed, a shape change), after a chunk before them was read
	// again or cut, or their run stopped. Each is a chunk read for
	// nothing.
	Refused int64
	// Inconsistent counts the chunks of Refused that failed the
	// consistency check (Chunk.Consistent): a transaction their read did
	// not see was delivered before their low watermark.
	Inconsistent int64
	// Cut counts the chunks emitted cut (their read stopped at its cap
	// before their range's end: more rows than the range's ends placed),
	// each refusing the chunks read ahead after it.
	Cut int64
}

// timings are an engine's Timings as they add up.
type timings struct {
	chunks, refused, inconsistent, cut                atomic.Int64
	readerWait, low, read, order, high, meet, waiting atomic.Int64
	bounds                                            atomic.Int64
}

// since adds the time since t to d and returns now.
func since(d *atomic.Int64, t time.Time) time.Time {
	now := time.Now()
	d.Add(int64(now.Sub(t)))
	return now
}

// Timings returns where the chunks' time went so far.
func (e *Engine) Timings() Timings {
	t := &e.tm
	return Timings{Chunks: t.chunks.Load(), ReaderWait: time.Duration(t.readerWait.Load()), Low: time.Duration(t.low.Load()),
		Read: time.Duration(t.read.Load()), Order: time.Duration(t.order.Load()), High: time.Duration(t.high.Load()),
		Meet: time.Duration(t.meet.Load()), EngineWait: time.Duration(t.waiting.Load()), Bounds: time.Duration(t.bounds.Load()),
		Refused: t.refused.Load(), Inconsistent: t.inconsistent.Load(), Cut: t.cut.Load()}
}
