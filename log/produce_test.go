package log

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"
)

// TestBatchBufsKeepSmallerBuffers: a batch larger than the newest kept
// buffer takes an older one that fits and leaves the smaller ones for
// smaller batches; a miss gives up only the smallest kept buffer.
func TestBatchBufsKeepSmallerBuffers(t *testing.T) {
	var f batchBufs
	small, large := f.get(100<<10), f.get(600<<10)
	f.put(large)
	f.put(small) // the newest
	if got := f.get(500 << 10); cap(got) != cap(large) || &got[:1][0] != &large[:1][0] {
		t.Fatalf("a batch of 500 KiB got a buffer of %d bytes, not the kept one of %d", cap(got), cap(large))
	}
	if len(f.free) != 1 || f.bytes != cap(small) {
		t.Fatalf("after taking the large buffer %d buffers (%d bytes) are kept, want the small one (%d)", len(f.free), f.bytes, cap(small))
	}
	if got := f.get(50 << 10); &got[:1][0] != &small[:1][0] {
		t.Fatal("a batch of 50 KiB did not get the kept small buffer")
	}
	// Misses: nothing kept fits, the smallest goes, the rest stay.
	a, b, c := f.get(64<<10), f.get(200<<10), f.get(400<<10)
	f.put(a)
	f.put(c)
	f.put(b)
	if got := f.get(1 << 20); cap(got) < 1<<20 {
		t.Fatalf("a batch of 1 MiB got %d bytes", cap(got))
	}
	if len(f.free) != 2 || f.bytes != cap(b)+cap(c) {
		t.Fatalf("after a miss %d buffers (%d bytes) are kept, want the two larger ones (%d)", len(f.free), f.bytes, cap(b)+cap(c))
	}
}

// TestCloseReleasesBatchBuffers: a closed log keeps no spare batch
// buffers (up to spareBatchBytes each) while something still refers to it
// — a benchmark's rounds held every closed log and grew by them.
func TestCloseReleasesBatchBuffers(t *testing.T) {
	ctx := context.Background()
	l := openTest(t, t.TempDir(), nil)
	if err := l.CreateTopic(ctx, "t", TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		mustProduce(t, l, "t", Record{Value: make([]byte, 1000), Partition: int32(i % 2)})
	}
	if l.spare.bytes == 0 {
		t.Fatal("no spare batch buffers kept after produces: the test shows nothing")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l.spare.bytes != 0 || len(l.spare.free) != 0 {
		t.Errorf("a closed log keeps %d bytes in %d spare batch buffers", l.spare.bytes, len(l.spare.free))
	}
}

// TestBatchBufsKeepPipelinePeak: buffers given back after a peak of more
// than spareBatchBytes out at once are kept for the next peak (a
// pipelined load drains and fills again), and dropped once the peak is
// two windows old.
func TestBatchBufsKeepPipelinePeak(t *testing.T) {
	clock := newClock()
	f := batchBufs{now: clock.now}
	const n = 500 << 10 // a load's batch per partition: 576 KB buffers
	cycle := func() {
		bufs := make([][]byte, 40) // 23 MB out: more than spareBatchBytes
		for i := range bufs {
			bufs[i] = f.get(n)
		}
		for _, b := range bufs {
			f.put(b)
		}
	}
	cycle()
	if f.made != 40 {
		t.Fatalf("the first peak made %d buffers, want 40", f.made)
	}
	for round := 0; round < 3; round++ {
		clock.advance(spareWindow / 2)
		cycle()
	}
	if f.made != 40 {
		t.Errorf("three more peaks of the same size made %d buffers more; a peak's buffers were dropped when given back (%d bytes kept)", f.made-40, f.bytes)
	}
	if f.out != 0 {
		t.Errorf("%d bytes counted out with every buffer given back", f.out)
	}
	// Idle for two windows: the next buffers given back are kept up to
	// spareBatchBytes only.
	clock.advance(2 * spareWindow)
	b := f.get(n)
	f.put(b)
	for i := 0; i < 40; i++ {
		f.put(f.get(n))
	}
	if f.bytes > spareBatchBytes+cap(b) {
		t.Errorf("two windows after the peak %d bytes are kept, want at most about %d", f.bytes, spareBatchBytes)
	}
	// A peak and then no appends at all: trim (the cleaner's tick) gives
	// the buffers over spareBatchBytes up once the peak is two windows old.
	cycle()
	f.trim()
	if f.bytes <= spareBatchBytes {
		t.Fatalf("right after a peak trim left %d bytes, want the peak's", f.bytes)
	}
	clock.advance(2 * spareWindow)
	f.trim()
	if f.bytes > spareBatchBytes {
		t.Errorf("two idle windows after the peak trim left %d bytes, want at most %d", f.bytes, spareBatchBytes)
	}
}

// TestLoadReusesBatchBuffers: appends started five at a time (a
// pipelined load: more than spareBatchBytes of batches in flight) and
// then awaited make their batch buffers once; the next rounds reuse them.
func TestLoadReusesBatchBuffers(t *testing.T) {
	ctx := context.Background()
	l, err := Open(t.TempDir(), Options{CleanupInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const parts, perPart, inFlight = 4, 900, 5
	if err := l.CreateTopic(ctx, "load", TopicConfig{Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	recs := make([]Record, parts*perPart) // ~0.9 MB a partition a call
	round := func() {
		waits := make([]func(context.Context) error, 0, inFlight)
		for c := 0; c < inFlight; c++ {
			for i := range recs {
				recs[i] = Record{Key: []byte("k"), Value: make([]byte, 1000), Partition: int32(i % parts)}
			}
			wait, err := l.StartProduce(ctx, "load", recs)
			if err != nil {
				t.Fatal(err)
			}
			waits = append(waits, wait)
		}
		for _, w := range waits {
			if err := w(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	round()
	made := l.spare.made
	if made < parts*inFlight {
		t.Fatalf("the first round made %d batch buffers, want at least %d", made, parts*inFlight)
	}
	round()
	round()
	if got := l.spare.made - made; got != 0 {
		t.Errorf("two more rounds of the same appends made %d batch buffers (the first made %d; %d bytes kept)", got, made, l.spare.bytes)
	}
}

// TestBatchedSizeBounds: batchedSize bounds a record's encoded size in a
// batch whatever its offset and timestamp deltas, and overshoots it by no
// more than those deltas' largest sizes.
func TestBatchedSizeBounds(t *testing.T) {
	long := func(n int) []byte { return make([]byte, n) }
	recs := []Record{
		{},
		{Key: []byte{}, Value: []byte{}},
		{Key: long(63), Value: long(64)},
		{Key: long(8191), Value: long(8192)},
		{Key: []byte("k"), Value: long(1 << 20), Headers: []Header{{Key: "cdcd.position", Value: long(16)}, {Key: "nil"}, {Key: string(long(200)), Value: long(70)}}},
	}
	for i := range recs {
		r := &recs[i]
		for _, d := range []struct {
			delta uint32
			ts    int64
		}{{0, 0}, {math.MaxUint32, math.MaxInt64}, {math.MaxUint32, math.MinInt64 + 1}} {
			var b batchBuilder
			b.reset(nil)
			b.firstTs = 0
			b.count = 1 // the timestamp is a delta from the first
			before := len(b.buf)
			b.add(r, d.delta, d.ts)
			got, bound := len(b.buf)-before, batchedSize(r)
			if got > bound {
				t.Errorf("record %d (deltas %d, %d) encodes in %d bytes, more than its bound %d", i, d.delta, d.ts, got, bound)
			}
			if d.delta == 0 && bound-got > binary.MaxVarintLen32+binary.MaxVarintLen64-2 {
				t.Errorf("record %d encodes in %d bytes; its bound %d is further off than the deltas' sizes", i, got, bound)
			}
		}
	}
}

// TestBatchBufferFitsBatch: a batch's buffer is of the size class of the
// batch (an eighth more, in 64 KB steps), not of an estimate a sixth
// larger: a load's buffers in flight were 576 KB for batches of 410 KB.
func TestBatchBufferFitsBatch(t *testing.T) {
	ctx := context.Background()
	// Plain: a compressed batch's buffer is sized for the block's bound.
	l, err := Open(t.TempDir(), Options{CleanupInterval: -1, Compression: CompressionNone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.CreateTopic(ctx, "t", TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	recs := make([]Record, 1250) // a load call's share of a partition
	for i := range recs {
		recs[i] = Record{Key: fmt.Appendf(nil, "%08d", i), Value: make([]byte, 290), Headers: []Header{
			{Key: "cdcd.position", Value: make([]byte, 16)}, {Key: "cdcd.txid", Value: []byte("1234567")}}}
	}
	if err := l.Produce(ctx, "t", recs); err != nil {
		t.Fatal(err)
	}
	batch := 0
	for _, p := range l.Stats().Partitions {
		if p.Topic == "t" {
			batch = int(p.AppendedBytes)
		}
	}
	if len(l.spare.free) != 1 {
		t.Fatalf("%d spare buffers after one batch, want 1", len(l.spare.free))
	}
	// The bound may count the deltas at their largest (15 bytes a record).
	const step = 64 << 10
	n := batch + (binary.MaxVarintLen32+binary.MaxVarintLen64)*len(recs)
	if got, most := cap(l.spare.free[0]), (n+n/8+step-1)/step*step; got > most {
		t.Errorf("a batch of %d bytes was built in a buffer of %d, more than %d", batch, got, most)
	}
}

// TestRecordLimitAtItsEdge: a Produce call sizes each record once and
// checks the limit (encodedSize > MaxRecordBytes) from that size,
// computing encodedSize only near the limit (tooLarge): records one byte
// either side of the limit, with 0 to 3 headers and keys of any length
// class, are told apart exactly as encodedSize tells them; the one over
// fails its call with ErrRecordTooLarge and appends nothing of it.
func TestRecordLimitAtItsEdge(t *testing.T) {
	big := make([]byte, MaxRecordBytes)
	rec := func(encoded, headers, key int) Record {
		r := Record{Key: big[:key]}
		for h := range headers {
			r.Headers = append(r.Headers, Header{Key: fmt.Sprint("h", h), Value: big[:h*100]})
		}
		r.Value = big[:0]
		r.Value = big[:encoded-encodedSize(&r)]
		if got := encodedSize(&r); got != encoded {
			t.Fatalf("built a record of %d bytes, want %d", got, encoded)
		}
		return r
	}
	for _, headers := range []int{0, 1, 2, 3} {
		for _, key := range []int{0, 1, 63, 64, 8191, 8192, 1 << 20} {
			for d := -40 - 20*headers; d <= 2; d++ {
				r := rec(MaxRecordBytes+d, headers, key)
				if got, want := tooLarge(&r, batchedSize(&r)), d > 0; got != want {
					t.Fatalf("%d headers, key %d: a record of encodedSize limit%+d is tooLarge=%v, want %v", headers, key, d, got, want)
				}
			}
		}
	}
	ctx := context.Background()
	l, err := Open(t.TempDir(), Options{CleanupInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.CreateTopic(ctx, "t", TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	over := rec(MaxRecordBytes+1, 2, 16)
	over.Partition = 1
	recs := []Record{{Key: []byte("a"), Value: []byte("b")}, over}
	if err := l.Produce(ctx, "t", recs); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("a call with a record one byte over the limit: %v, want ErrRecordTooLarge", err)
	}
	for _, p := range l.Stats().Partitions {
		if p.Topic == "t" && p.AppendedBytes != 0 {
			t.Errorf("partition %d appended %d bytes of a refused call", p.Partition, p.AppendedBytes)
		}
	}
}
