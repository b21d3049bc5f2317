package log

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"
)

// partBuild collects one Produce call's records for one partition.
type partBuild struct {
	p       *partition
	b       batchBuilder
	batches [][]byte
	records int64
	req     *appendReq
	next    int64 // offset for the next record when filling in offsets
	left    int   // encoded size estimate of the records not yet added
	spare   *batchBufs
	zip     bool // compress batches (Options.Compression)
}

// seal finishes the current batch, compressing it when that pays
// (compressBatch): on the producing goroutine, not in the partition's
// writer, which is serial per partition.
func (pb *partBuild) seal() []byte {
	b := pb.b.finish()
	if pb.zip {
		if z := compressBatch(b, pb.spare.get, pb.spare.put); z != nil {
			pb.spare.put(b)
			pb.b.buf = nil
			return z
		}
	}
	return b
}

// batchBufs is a free list of batch buffers. Once an append is durable the
// flusher has written its batches and nothing refers to them any more, so
// a later Produce can build its batches in them: an initial load's batches
// were half of the bytes its process allocated, and the collections they
// paced a tenth of its CPU. Buffers are allocated in size classes (an
// eighth more than asked, in 64 KB steps), so a buffer fits the next
// batch of about its size.
//
// The list keeps spareBatchBytes, and beyond that as much as was recently
// out at once (handed out and not yet given back, up to maxSpareBatchBytes):
// a pipelined load (the daemon keeps four appends in flight, eight
// partitions each) has more than spareBatchBytes out at its peak, and
// when the pipeline drained (a COPY chunk slower than the log) the
// buffers over spareBatchBytes were dropped, to be made again at the next
// peak — 127 buffers of 576 KB in a load of 1M rows. Out counts a buffer
// until it is given back; an append that failed or whose caller gave up
// never gives its buffers back, so they count until the peak decays. The
// peak is kept for two windows of spareWindow, so a log whose appends got
// smaller (a load done, streaming on) keeps spareBatchBytes again; trim,
// from the background cleaner, does the same for a log with no appends.
type batchBufs struct {
	mu    sync.Mutex
	free  [][]byte
	bytes int // in free
	// out is the bytes handed out and not given back; peak and prevPeak
	// its highest in the current window (since winStart) and the one
	// before.
	out, peak, prevPeak int
	winStart            time.Time
	now                 func() time.Time // nil: time.Now
	made                int              // buffers allocated (tests)
}

const (
	spareBatchBytes    = 16 << 20
	maxSpareBatchBytes = 64 << 20
	spareWindow        = 30 * time.Second
)

// get returns an empty buffer of capacity n or more: the newest kept one
// that fits, else a new one. A kept buffer too small for this batch stays
// for a smaller one (a Produce call's batches differ by partition), except
// that a miss gives up the smallest, so the list follows batches that
// grow. Before, every buffer popped on the way to a fit was dropped, and a
// batch a size class larger than the newest kept one cost them all.
func (f *batchBufs) get(n int) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	smallest := -1
	for i := len(f.free) - 1; i >= 0; i-- {
		b := f.free[i]
		if cap(b) >= n {
			f.take(i)
			f.lend(cap(b))
			return b[:0]
		}
		if smallest < 0 || cap(b) < cap(f.free[smallest]) {
			smallest = i
		}
	}
	if smallest >= 0 {
		f.take(smallest)
	}
	const step = 64 << 10
	b := make([]byte, 0, (n+n/8+step-1)/step*step)
	f.made++
	f.lend(cap(b))
	return b
}

// lend counts n bytes out. REQUIRES: f.mu.
func (f *batchBufs) lend(n int) {
	f.out += n
	f.roll()
	f.peak = max(f.peak, f.out)
}

// roll starts a new window when the current one is over. REQUIRES: f.mu.
func (f *batchBufs) roll() {
	now := f.clock()
	if d := now.Sub(f.winStart); d >= spareWindow || d < 0 {
		f.prevPeak = f.peak
		if d >= 2*spareWindow || d < 0 {
			f.prevPeak = 0 // idle for a whole window
		}
		f.peak, f.winStart = f.out, now
	}
}

func (f *batchBufs) clock() time.Time {
	if f.now != nil {
		return f.now()
	}
	return time.Now()
}

// take removes the kept buffer i. REQUIRES: f.mu.
func (f *batchBufs) take(i int) {
	last := len(f.free) - 1
	f.bytes -= cap(f.free[i])
	f.free[i] = f.free[last]
	f.free[last] = nil
	f.free = f.free[:last]
}

// release drops the kept buffers: a closed log holds no memory for
// batches while its Embedded stays referenced.
func (f *batchBufs) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.free)
	f.free, f.bytes = nil, 0
}

// trim drops kept buffers beyond what put would keep now: the background
// cleaner calls it, so a log idle after a load (no put to find the peak
// gone) keeps spareBatchBytes again after two windows.
func (f *batchBufs) trim() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.roll()
	keep := max(spareBatchBytes, min(max(f.peak, f.prevPeak), maxSpareBatchBytes)-f.out)
	for f.bytes > keep && len(f.free) > 0 {
		f.take(0) // the oldest
	}
}

// put gives b back for reuse; the caller no longer refers to it.
// REQUIRES: b came from get.
func (f *batchBufs) put(b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.out = max(f.out-cap(b), 0)
	f.roll()
	if cap(b) > 2*softBatchBytes {
		return // a batch of one huge record: not worth keeping
	}
	kept := f.bytes + cap(b)
	if kept <= spareBatchBytes || f.out+kept <= min(max(f.peak, f.prevPeak), maxSpareBatchBytes) {
		f.free = append(f.free, b)
		f.bytes = kept
	}
}

// add encodes a record of size (batchedSize) into the current batch,
// starting a new batch at softBatchBytes. Buffers are sized from pb.left,
// the bound of the records still to come, so they do not grow by copying.
func (pb *partBuild) add(r *Record, size int, tsMs int64) {
	if pb.b.buf == nil || len(pb.b.buf) >= softBatchBytes {
		if pb.b.buf != nil {
			pb.batches = append(pb.batches, pb.seal())
		}
		pb.b.reset(pb.spare.get(batchHeaderLen + min(pb.left, softBatchBytes+size)))
	}
	pb.left -= size
	delta := uint32(0)
	if pb.b.count > 0 {
		delta = pb.b.last + 1
	}
	pb.b.add(r, delta, tsMs)
	pb.records++
}

// produce places, encodes, enqueues and waits for recs (see Log.Produce).
func (l *Embedded) produce(ctx context.Context, t *topic, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	builds, err := l.enqueue(t, recs, true)
	if err != nil {
		return err
	}
	if err := l.await(ctx, builds); err != nil {
		return err
	}
	for i := range recs {
		pb := builds.byPart[recs[i].Partition]
		recs[i].Offset = pb.next
		pb.next++
	}
	return nil
}

// enqueue places and encodes recs and hands their batches to the
// partitions' flushers; inline lets a lone partition's append be flushed
// by the calling goroutine.
func (l *Embedded) enqueue(t *topic, recs []Record, inline bool) (*partBuilds, error) {
	builds, err := l.buildBatches(t, recs)
	if err != nil {
		return nil, err
	}
	for _, pb := range builds.used {
		pb.batches = append(pb.batches, pb.seal())
		pb.req = newAppendReq(pb.batches, pb.records)
		if err := pb.p.enqueue(pb.req); err != nil {
			return nil, l.appendError(t, err)
		}
		// One partition: flush inline if idle. Several: let their flushers
		// fsync in parallel.
		pb.p.flush(inline && len(builds.used) == 1)
	}
	return builds, nil
}

// await waits until every batch of builds is durable, then recycles the
// batch buffers.
func (l *Embedded) await(ctx context.Context, builds *partBuilds) error {
	for _, pb := range builds.used {
		select {
		case err := <-pb.req.done:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err() // the flusher may still be writing the batches: not recycled
		}
		pb.next = pb.req.base
	}
	for _, pb := range builds.used {
		for i, b := range pb.batches {
			l.spare.put(b)
			pb.batches[i] = nil
		}
	}
	return nil
}

// StartProduce implements AsyncProducer.
func (l *Embedded) StartProduce(ctx context.Context, topic string, recs []Record) (func(context.Context) error, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := l.writable(topic); err != nil {
		return nil, err
	}
	t, err := l.lookup(topic)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return func(context.Context) error { return nil }, nil
	}
	builds, err := l.enqueue(t, recs, false)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return l.await(ctx, builds) }, nil
}

// buildBatches places recs (partition, timestamp), checks their sizes and
// encodes them into batches per partition. Each record is sized once
// (batchedSize, kept in sizes for the encoding pass): a load's Submit
// sized every record three times under the emitter's lock (encodedSize for
// the limit, batchedSize for the buffers and again as it was added), 0.1 s
// of a 3M-row load's 2.75 s profile (session 19).
func (l *Embedded) buildBatches(t *topic, recs []Record) (*partBuilds, error) {
	n := int32(len(t.parts))
	sp := recordSizes.Get().(*[]int32)
	defer recordSizes.Put(sp)
	if cap(*sp) < len(recs) {
		*sp = make([]int32, len(recs))
	}
	sizes := (*sp)[:len(recs)]
	builds := &partBuilds{byPart: make([]*partBuild, n)}
	var now time.Time
	for i := range recs {
		r := &recs[i]
		if r.Partition < 0 {
			r.Partition = PartitionFor(r.Key, n)
		} else if r.Partition >= n {
			return nil, fmt.Errorf("%w: %s has %d partitions; record %d asks for partition %d", ErrUnknownPartition, t.name, n, i, r.Partition)
		}
		if r.Timestamp.IsZero() {
			if now.IsZero() {
				now = time.UnixMilli(l.opts.now().UnixMilli())
			}
			r.Timestamp = now
		}
		size := batchedSize(r)
		if tooLarge(r, size) {
			return nil, fmt.Errorf("%w: %s record %d is %d bytes; the limit is %d", ErrRecordTooLarge, t.name, i, encodedSize(r), MaxRecordBytes)
		}
		sizes[i] = int32(size)
		pb := builds.byPart[r.Partition]
		if pb == nil {
			pb = &partBuild{p: t.parts[r.Partition], spare: &l.spare, zip: l.opts.Compression == CompressionS2}
			builds.byPart[r.Partition] = pb
			builds.used = append(builds.used, pb)
		}
		pb.left += size
	}
	for i := range recs {
		r := &recs[i]
		builds.byPart[r.Partition].add(r, int(sizes[i]), r.Timestamp.UnixMilli())
	}
	return builds, nil
}

// tooLarge is encodedSize(r) > MaxRecordBytes, the limit's definition,
// with encodedSize computed only near the limit: encodedSize is at most
// size (batchedSize) plus 30 bytes and 20 a header, since both count the
// key, value and header bytes and encodedSize adds 30 and 20 a header.
func tooLarge(r *Record, size int) bool {
	if size+3*binary.MaxVarintLen64+2*binary.MaxVarintLen64*len(r.Headers) <= MaxRecordBytes {
		return false
	}
	return encodedSize(r) > MaxRecordBytes
}

// recordSizes holds the size slices of buildBatches.
var recordSizes = sync.Pool{New: func() any { return new([]int32) }}

// partBuilds are one Produce call's builds: by partition (nil for a
// partition without records) and the ones in use.
type partBuilds struct {
	byPart []*partBuild
	used   []*partBuild
}

// appendError maps a partition closed by DeleteTopic to ErrUnknownTopic.
func (l *Embedded) appendError(t *topic, err error) error {
	if err == ErrClosed {
		if _, lerr := l.lookup(t.name); lerr != nil {
			return lerr
		}
	}
	return err
}
