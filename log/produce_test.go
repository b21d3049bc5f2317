package log

import (
	"context"
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
