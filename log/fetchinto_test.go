package log_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/cdcd-dev/cdcd/log"
)

// TestFetchInto: a fetch with FetchOptions.Into returns its records in
// Into's array while it has room, each as a fetch without it returns it,
// and a fetch into the same slice again returns the new records, not
// the old ones.
func TestFetchInto(t *testing.T) {
	ctx := context.Background()
	l := openEmbedded(t, t.TempDir(), log.Options{SegmentBytes: 4 << 10, IndexIntervalBytes: 256})
	t.Cleanup(func() { _ = l.Close() })
	if err := l.CreateTopic(ctx, "t", log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		rec := []log.Record{{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "value-%d", i), Partition: 0,
			Headers: []log.Header{{Key: "h", Value: fmt.Appendf(nil, "%d", i)}}}}
		if err := l.Produce(ctx, "t", rec); err != nil {
			t.Fatal(err)
		}
	}
	into := make([]log.Record, 0, 4096) // above what a fetch sizes its slice for
	for _, from := range []int64{0, 17, 40} {
		want, err := l.Fetch(ctx, "t", 0, from, log.FetchOptions{MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.Fetch(ctx, "t", 0, from, log.FetchOptions{MaxBytes: 1 << 20, Into: into})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || len(got) == 0 {
			t.Fatalf("from %d: %d records into the slice, %d without it", from, len(got), len(want))
		}
		if &got[0] != &into[:1][0] {
			t.Fatalf("from %d: the records are not in Into's array", from)
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.Offset != w.Offset || string(g.Key) != string(w.Key) || string(g.Value) != string(w.Value) ||
				string(g.Header("h")) != string(w.Header("h")) || g.Partition != w.Partition || !g.Timestamp.Equal(w.Timestamp) {
				t.Fatalf("from %d, record %d: %+v into the slice, %+v without it", from, i, g, w)
			}
		}
	}
}

// TestFetchBuffers: a fetch with FetchOptions.Buffers reads its records
// into the windows Window gives (their keys, values and header values
// alias them) and cuts their headers from a slab that the next fetch
// reuses; the records are those a fetch without it returns.
func TestFetchBuffers(t *testing.T) {
	// Padded, each batch's records take over 1 KiB and are compressed:
	// they are decoded into a window of Window's.
	for _, pad := range []int{0, 400} {
		t.Run(fmt.Sprintf("pad%d", pad), func(t *testing.T) { fetchBuffers(t, pad) })
	}
}

func fetchBuffers(t *testing.T, pad int) {
	ctx := context.Background()
	l := openEmbedded(t, t.TempDir(), log.Options{SegmentBytes: 64 << 10, IndexIntervalBytes: 256})
	t.Cleanup(func() { _ = l.Close() })
	if err := l.CreateTopic(ctx, "t", log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		var recs []log.Record
		for j := range 3 { // batches of three records, two headers each
			recs = append(recs, log.Record{Key: fmt.Appendf(nil, "k%d-%d", i, j), Value: fmt.Appendf(nil, "value-%d-%d%s", i, j, strings.Repeat("v", pad)), Partition: 0,
				Headers: []log.Header{{Key: "pos", Value: fmt.Appendf(nil, "%d", i)}, {Key: "tx", Value: fmt.Appendf(nil, "%d", j)}}})
		}
		if err := l.Produce(ctx, "t", recs); err != nil {
			t.Fatal(err)
		}
	}
	var windows [][]byte
	bufs := &log.FetchBuffers{Window: func(n int) []byte {
		w := make([]byte, n)
		windows = append(windows, w)
		return w
	}}
	inWindow := func(b []byte) bool {
		for _, w := range windows {
			lo, hi := uintptr(unsafe.Pointer(&w[0])), uintptr(unsafe.Pointer(&w[len(w)-1]))
			if len(b) > 0 && uintptr(unsafe.Pointer(&b[0])) >= lo && uintptr(unsafe.Pointer(&b[len(b)-1])) <= hi {
				return true
			}
		}
		return false
	}
	for _, p := range l.Stats().Partitions {
		if p.Topic == "t" && pad > 0 && p.Bytes*4 > int64(1200*pad) {
			t.Fatalf("%d bytes stored for %d of values: not compressed", p.Bytes, 1200*pad)
		}
	}
	maxBytes := 8 << 10 * (1 + pad/10)
	var firstHeader []*log.Header
	// From batch starts: the first record's headers start the slab.
	for _, from := range []int64{0, 0, 0, 333, 999} {
		windows = windows[:0]
		want, err := l.Fetch(ctx, "t", 0, from, log.FetchOptions{MaxBytes: maxBytes})
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.Fetch(ctx, "t", 0, from, log.FetchOptions{MaxBytes: maxBytes, Buffers: bufs})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || len(got) < 100 || len(windows) == 0 {
			t.Fatalf("from %d: %d records with buffers (%d windows), %d without", from, len(got), len(windows), len(want))
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.Offset != w.Offset || string(g.Key) != string(w.Key) || string(g.Value) != string(w.Value) || len(g.Headers) != 2 ||
				string(g.Header("pos")) != string(w.Header("pos")) || string(g.Header("tx")) != string(w.Header("tx")) {
				t.Fatalf("from %d, record %d: %+v with buffers, %+v without", from, i, g, w)
			}
			if !inWindow(g.Key) || !inWindow(g.Value) || !inWindow(g.Headers[1].Value) {
				t.Fatalf("from %d, record %d: its bytes are not in a window of Window's", from, i)
			}
			if cap(g.Headers) != 2 {
				t.Fatalf("from %d, record %d: headers of capacity %d, so an append would overwrite the next record's", from, i, cap(g.Headers))
			}
		}
		firstHeader = append(firstHeader, &got[0].Headers[0])
	}
	// The first fetches grew the slab they kept (each new one twice the
	// last); the ones after reuse it.
	for i := 3; i < len(firstHeader); i++ {
		if firstHeader[i] != firstHeader[2] {
			t.Errorf("fetch %d cut its headers from a new slab", i)
		}
	}
}

// TestFetchReadsBatchesOnce: a reader fetching a partition of 400 KB
// batches 1 MiB at a time reads each batch from the file once, in one read
// a fetch: a fetch's read ends at a batch boundary the index knows (with
// the next batch's header, to see that it does not fit), not inside the
// batch the fetch leaves for the next one (which read it again: a quarter
// more than a load's fetches returned). Every record comes back, in order.
func TestFetchReadsBatchesOnce(t *testing.T) {
	// Compressed (the default), each batch is also decoded once, into a
	// window of its decoded size: what the fetches read is then the
	// stored bytes and the plain ones.
	plain := fetchReadsBatchesOnce(t, log.CompressionNone, 0)
	fetchReadsBatchesOnce(t, log.CompressionS2, plain)
}

// fetchReadsBatchesOnce runs TestFetchReadsBatchesOnce with compression c,
// where decoded more bytes may be read in total; it returns the bytes
// stored.
func fetchReadsBatchesOnce(t *testing.T, c log.Compression, decoded int64) int64 {
	t.Helper()
	ctx := context.Background()
	fs := &countingFS{FS: log.OSFS}
	l := openEmbedded(t, t.TempDir(), log.Options{FS: fs, Compression: c})
	defer l.Close()
	if err := l.CreateTopic(ctx, "t", log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	const calls, perCall = 12, 1000
	for c := range calls {
		recs := make([]log.Record, perCall)
		for i := range recs {
			recs[i] = log.Record{Key: fmt.Appendf(nil, "k%d-%d", c, i), Value: make([]byte, 380), Partition: 0}
		}
		if err := l.Produce(ctx, "t", recs); err != nil {
			t.Fatal(err)
		}
	}
	var stored int64
	for _, p := range l.Stats().Partitions {
		if p.Topic == "t" {
			stored = p.Bytes
		}
	}
	var read int64
	fs.reads.Store(0)
	fb := &log.FetchBuffers{Window: func(n int) []byte { read += int64(n); return make([]byte, n) }}
	next, fetches := int64(0), 0
	for next < calls*perCall {
		recs, err := l.Fetch(ctx, "t", 0, next, log.FetchOptions{MaxBytes: 1 << 20, Buffers: fb})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 || recs[0].Offset != next {
			t.Fatalf("a fetch at %d returned %d records from %v", next, len(recs), recs[0].Offset)
		}
		next = recs[len(recs)-1].Offset + 1
		fetches++
	}
	// Each fetch may read the header of the batch it leaves (to see
	// that it does not fit) again.
	t.Logf("%v: %d fetches read %d bytes; stored %d, decoded %d", c, fetches, read, stored, decoded)
	// The first fetch of compressed batches reads its budget in stored
	// bytes (it does not know yet how well they compress): all of this
	// partition, whose later batches the next fetches read again.
	if read > stored*(1+min(decoded, 1))+decoded+int64(fetches)*64 {
		t.Errorf("%v: %d fetches read %d bytes of a partition of %d (%d decoded): %.2f times", c, fetches, read, stored, decoded, float64(read)/float64(stored+decoded))
	}
	if c == log.CompressionS2 && stored*4 > decoded {
		t.Errorf("compressed, the partition takes %d bytes; plain %d", stored, decoded)
	}
	if n := fs.reads.Load(); n > int64(fetches) {
		t.Errorf("%v: %d fetches made %d reads of the segment", c, fetches, n)
	}
	return stored
}

// countingFS counts reads of segment files.
type countingFS struct {
	log.FS
	reads atomic.Int64
}

func (c *countingFS) OpenFile(name string, flag int, perm os.FileMode) (log.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return countingFile{File: f, reads: &c.reads}, nil
}

type countingFile struct {
	log.File
	reads *atomic.Int64
}

func (f countingFile) ReadAt(b []byte, off int64) (int, error) {
	f.reads.Add(1)
	return f.File.ReadAt(b, off)
}
