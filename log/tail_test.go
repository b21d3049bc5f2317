package log

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// tailTwins are two logs given the same appends: one with the tail cache
// (the default), one without (TailCacheBytes < 0), so every fetch of the
// first can be compared with the files' answer.
type tailTwins struct {
	t          *testing.T
	dirs       [2]string
	logs       [2]*Embedded
	opts       [2]Options
	tailServed uint64
}

func newTailTwins(t *testing.T, o Options) *tailTwins {
	tw := &tailTwins{t: t, dirs: [2]string{t.TempDir(), t.TempDir()}}
	tw.opts[0], tw.opts[1] = o, o
	tw.opts[1].TailCacheBytes = -1
	tw.open()
	t.Cleanup(func() {
		for _, l := range tw.logs {
			if l != nil {
				_ = l.Close()
			}
		}
	})
	return tw
}

func (tw *tailTwins) open() {
	for i := range tw.logs {
		l, err := Open(tw.dirs[i], tw.opts[i], nil)
		if err != nil {
			tw.t.Fatal(err)
		}
		tw.logs[i] = l
	}
}

func (tw *tailTwins) reopen() {
	tw.noteServed()
	for _, l := range tw.logs {
		if err := l.Close(); err != nil {
			tw.t.Fatal(err)
		}
	}
	tw.open()
}

func (tw *tailTwins) noteServed() {
	for _, p := range tw.logs[0].Stats().Partitions {
		tw.tailServed += p.TailFetches
	}
	for _, p := range tw.logs[1].Stats().Partitions {
		if p.TailFetches != 0 || p.TailBytes != 0 {
			tw.t.Fatalf("the log without a tail served %d fetches from it", p.TailFetches)
		}
	}
}

func (tw *tailTwins) do(f func(l *Embedded) error) {
	for _, l := range tw.logs {
		if err := f(l); err != nil {
			tw.t.Fatal(err)
		}
	}
}

// randomRecords are n records for partitions [0, parts): compressible or
// not, some with headers.
func randomRecords(rng *rand.Rand, n int, parts int32) []Record {
	recs := make([]Record, n)
	for i := range recs {
		v := make([]byte, rng.IntN(600))
		if rng.IntN(2) == 0 {
			for j := range v {
				v[j] = byte(rng.Uint32())
			}
		}
		r := Record{Key: fmt.Appendf(nil, "k%d", rng.IntN(1000)), Value: v, Partition: rng.Int32N(parts),
			Timestamp: time.UnixMilli(1_700_000_000_000 + rng.Int64N(1_000_000))} // both logs the same
		if rng.IntN(3) == 0 {
			r.Headers = []Header{{Key: "cdcd.position", Value: fmt.Appendf(nil, "%016d", rng.Uint64())}}
		}
		recs[i] = r
	}
	return recs
}

// compare fetches partition p of topic from offset with maxBytes from
// both logs and fails on any difference.
func (tw *tailTwins) compare(ctx context.Context, topic string, p int32, offset int64, maxBytes int, buffers bool) int {
	var got [2][]Record
	var errs [2]error
	for i, l := range tw.logs {
		opts := FetchOptions{MaxBytes: maxBytes}
		if buffers {
			opts.Buffers = &FetchBuffers{Window: func(n int) []byte { return make([]byte, n) }}
		}
		got[i], errs[i] = l.Fetch(ctx, topic, p, offset, opts)
	}
	if (errs[0] == nil) != (errs[1] == nil) {
		tw.t.Fatalf("%s/%d at %d: with the tail err %v, without %v", topic, p, offset, errs[0], errs[1])
	}
	if len(got[0]) != len(got[1]) {
		tw.t.Fatalf("%s/%d at %d max %d: %d records with the tail, %d without", topic, p, offset, maxBytes, len(got[0]), len(got[1]))
	}
	for k := range got[0] {
		a, b := got[0][k], got[1][k]
		if a.Offset != b.Offset || a.Partition != b.Partition || !a.Timestamp.Equal(b.Timestamp) ||
			!bytes.Equal(a.Key, b.Key) || !bytes.Equal(a.Value, b.Value) || len(a.Headers) != len(b.Headers) {
			tw.t.Fatalf("%s/%d at %d: record %d differs: with the tail offset %d key %q ts %v value %d bytes, without %d %q %v %d",
				topic, p, offset, k, a.Offset, a.Key, a.Timestamp, len(a.Value), b.Offset, b.Key, b.Timestamp, len(b.Value))
		}
		for h := range a.Headers {
			if a.Headers[h].Key != b.Headers[h].Key || !bytes.Equal(a.Headers[h].Value, b.Headers[h].Value) {
				tw.t.Fatalf("%s/%d at %d: record %d header %d differs", topic, p, offset, k, h)
			}
		}
	}
	return len(got[0])
}

// TestTailMatchesFiles: every fetch served with the tail cache returns
// exactly what the same log without it returns, for random appends
// (compressed and plain batches, one record to hundreds), random offsets
// and budgets, with and without FetchBuffers; across retention, a reopen
// and appends after it; and the tail does serve most of them.
func TestTailMatchesFiles(t *testing.T) {
	for _, comp := range []Compression{CompressionS2, CompressionNone} {
		t.Run(comp.String(), func(t *testing.T) {
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(1, uint64(comp)))
			tw := newTailTwins(t, Options{CleanupInterval: -1, SegmentBytes: 1 << 20, Compression: comp, TailCacheBytes: 1 << 20})
			const parts = 3
			tw.do(func(l *Embedded) error {
				return l.CreateTopic(ctx, "t", TopicConfig{Partitions: parts, RetentionBytes: 3 << 20})
			})
			var next [parts]int64 // the reader right behind
			for round := 0; round < 300; round++ {
				recs := randomRecords(rng, 1+rng.IntN(rng.IntN(400)+1), parts)
				if round%37 == 5 { // a batch too large for the tail: it empties it
					for i := 0; i < 500; i++ {
						v := make([]byte, 700)
						for j := range v {
							v[j] = byte(rng.Uint32())
						}
						recs = append(recs, Record{Key: []byte("big"), Value: v, Partition: 1, Timestamp: time.UnixMilli(1_700_000_000_000)})
					}
				}
				for _, l := range tw.logs {
					cp := append([]Record(nil), recs...)
					if err := l.Produce(ctx, "t", cp); err != nil {
						t.Fatal(err)
					}
				}
				for p := int32(0); p < parts; p++ {
					for {
						n := tw.compare(ctx, "t", p, next[p], 1+rng.IntN(64<<10), rng.IntN(2) == 0)
						if n == 0 {
							break
						}
						next[p] += int64(n)
					}
					info, err := tw.logs[0].DescribeTopic(ctx, "t")
					if err != nil {
						t.Fatal(err)
					}
					pi := info.Partitions[p]
					if pi.End > pi.Start {
						tw.compare(ctx, "t", p, pi.Start+rng.Int64N(pi.End-pi.Start), 1+rng.IntN(256<<10), rng.IntN(2) == 0)
					}
				}
				switch round {
				case 100, 200:
					tw.do(func(l *Embedded) error { return l.Cleanup(ctx) }) // retention
					for p := int32(0); p < parts; p++ {
						info, _ := tw.logs[0].DescribeTopic(ctx, "t")
						next[p] = max(next[p], info.Partitions[p].Start)
					}
				case 150:
					tw.reopen() // the tail starts empty; the files answer
				}
			}
			tw.noteServed()
			if tw.tailServed < 300 {
				t.Fatalf("the tail served %d fetches: the test compared files with files", tw.tailServed)
			}
		})
	}
}

// TestTailBounded: the tail never holds more than TailCacheBytes over all
// partitions, and a closed log holds none.
func TestTailBounded(t *testing.T) {
	ctx := context.Background()
	const limit = 512 << 10
	l, err := Open(t.TempDir(), Options{CleanupInterval: -1, TailCacheBytes: limit}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"a", "b"} {
		if err := l.CreateTopic(ctx, topic, TopicConfig{Partitions: 4}); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 200; i++ {
		topic := []string{"a", "b"}[i%2]
		if err := l.Produce(ctx, topic, randomRecords(rng, 1+rng.IntN(300), 4)); err != nil {
			t.Fatal(err)
		}
		var held int64
		for _, p := range l.Stats().Partitions {
			held += p.TailBytes
			if p.TailBytes > limit/2 {
				t.Fatalf("%s/%d holds %d bytes in its tail, over half the limit %d", p.Topic, p.Partition, p.TailBytes, limit)
			}
		}
		if held > limit || held != l.tail.used.Load() {
			t.Fatalf("the tails hold %d bytes (counted %d), limit %d", held, l.tail.used.Load(), limit)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := l.tail.used.Load(); n != 0 {
		t.Fatalf("a closed log's tails hold %d bytes", n)
	}
}

// TestTailNotForCompacted: a compacted topic's fetches never come from the
// tail (compaction rewrites batches).
func TestTailNotForCompacted(t *testing.T) {
	ctx := context.Background()
	l := openTest(t, t.TempDir(), nil)
	if err := l.CreateTopic(ctx, "c", TopicConfig{Partitions: 1, Cleanup: CleanupCompact}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		mustProduce(t, l, "c", Record{Key: []byte("k"), Value: make([]byte, 2000), Partition: 0})
		if _, err := l.Fetch(ctx, "c", 0, int64(i), FetchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range l.Stats().Partitions {
		if p.Topic == "c" && (p.TailFetches != 0 || p.TailBytes != 0) {
			t.Fatalf("compacted topic: %d fetches from the tail, %d bytes held", p.TailFetches, p.TailBytes)
		}
	}
}
