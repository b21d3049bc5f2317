package log

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// crashWorkload appends to a never-compacted and a compacted topic from
// several producers while a cleaner compacts and merges, and remembers
// every acknowledged record.
type crashWorkload struct {
	mu    sync.Mutex
	acked map[string]map[int32]map[int64]string // topic -> partition -> offset -> value
	// latest is, for the compacted topic, each key's newest acknowledged
	// offset.
	latest map[string]int64
	keyOf  map[int64]string // compacted topic offset -> key (one partition)
}

func newCrashWorkload() *crashWorkload {
	return &crashWorkload{
		acked:  map[string]map[int32]map[int64]string{"d": {}, "c": {}},
		latest: map[string]int64{},
		keyOf:  map[int64]string{},
	}
}

// produce appends one batch of records from producer id and records what
// was acknowledged.
func (w *crashWorkload) produce(ctx context.Context, l *Embedded, rng *rand.Rand, id, n int) error {
	topic := "d"
	if rng.IntN(3) == 0 {
		topic = "c"
	}
	recs := make([]Record, 1+rng.IntN(6))
	for i := range recs {
		key := fmt.Sprintf("k%d", rng.IntN(20))
		recs[i] = Record{Key: []byte(key), Value: fmt.Appendf(nil, "%s|%s|p%d-n%d-%d|%s", topic, key, id, n, i, make([]byte, rng.IntN(200))), Partition: -1}
		if topic == "c" {
			recs[i].Partition = 0
		}
	}
	if err := l.Produce(ctx, topic, recs); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range recs {
		parts := w.acked[topic]
		if parts[r.Partition] == nil {
			parts[r.Partition] = map[int64]string{}
		}
		parts[r.Partition][r.Offset] = string(r.Value)
		if topic == "c" {
			w.latest[string(r.Key)] = r.Offset
			w.keyOf[r.Offset] = string(r.Key)
		}
	}
	return nil
}

// snapshot copies what has been acknowledged so far.
func (w *crashWorkload) snapshot() (map[int32]map[int64]string, map[string]int64, map[int64]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := map[int32]map[int64]string{}
	for p, offs := range w.acked["d"] {
		d[p] = map[int64]string{}
		for o, v := range offs {
			d[p][o] = v
		}
	}
	latest := map[string]int64{}
	for k, o := range w.latest {
		latest[k] = o
	}
	values := map[int64]string{}
	for o, v := range w.acked["c"][0] {
		values[o] = v
	}
	return d, latest, values
}

// TestCrashClone crashes a log again and again while it appends, rolls,
// compacts and merges, by taking the durable state of an in-memory file
// system (unsynced data and directory entries dropped), and checks that
// every crash state opens without any loss reported, holds every record
// acknowledged before the crash intact at its offset, and holds nothing
// that was never appended.
func TestCrashClone(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runCrashClone(t, seed) })
	}
}

func runCrashClone(t *testing.T, seed uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 7))
	mfs := newMemFS()
	const dir = "/data/log"
	if err := mfs.MkdirAll("/data", 0o755); err != nil || syncDir(mfs, "/") != nil {
		t.Fatal("cannot make /data durable")
	}
	opts := Options{FS: mfs, SegmentBytes: 1024 + int64(rng.IntN(3072)), IndexIntervalBytes: 64 + rng.IntN(512), CleanupInterval: -1}
	l, err := Open(dir, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CreateTopic(ctx, "d", TopicConfig{Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	if err := l.CreateTopic(ctx, "c", TopicConfig{Partitions: 1, Cleanup: CleanupCompact}); err != nil {
		t.Fatal(err)
	}
	w := newCrashWorkload()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for id := 0; id < 3; id++ {
		wg.Go(func() {
			prng := rand.New(rand.NewPCG(seed, uint64(id)))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := w.produce(ctx, l, prng, id, n); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if err := l.Cleanup(ctx); err != nil {
				errs <- err
				return
			}
		}
	})
	for crash := 0; crash < 15; crash++ {
		time.Sleep(time.Duration(2+rng.IntN(15)) * time.Millisecond)
		d, latest, values := w.snapshot() // acknowledged, so synced, before the clone
		checkCrashState(t, mfs.crashClone(), dir, opts, d, latest, values)
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func checkCrashState(t *testing.T, fs *memFS, dir string, opts Options, d map[int32]map[int64]string, latest map[string]int64, values map[int64]string) {
	t.Helper()
	opts.FS = fs
	l, err := Open(dir, opts, nil)
	if err != nil {
		t.Fatalf("open after crash: %v", err)
	}
	defer l.Close()
	if rep := l.Recovery(); len(rep.Losses) > 0 {
		t.Fatalf("a crash state reported lost offsets: %+v", rep.Losses)
	}
	for p := int32(0); p < 3; p++ {
		got := readPartition(t, l, "d", p)
		for off, v := range d[p] {
			if got[off] != v {
				t.Fatalf("d/%d: acknowledged record %d = %.20q after the crash, want %.20q", p, off, got[off], v)
			}
		}
		for off, v := range got {
			if !strings.HasPrefix(v, "d|") {
				t.Fatalf("d/%d: record %d = %.20q was never appended", p, off, v)
			}
		}
	}
	got := readPartition(t, l, "c", 0)
	for key, off := range latest {
		if v, ok := got[off]; ok && v != values[off] {
			t.Fatalf("c: record %d = %.20q, want %.20q", off, v, values[off])
		} else if !ok && !newerKept(got, key, off) {
			t.Fatalf("c: key %s lost its newest acknowledged record %d", key, off)
		}
	}
}

// newerKept reports whether a record of key after off is in got (written
// after the snapshot, it may have let compaction drop off).
func newerKept(got map[int64]string, key string, off int64) bool {
	for o, v := range got {
		if o > off && strings.HasPrefix(v, "c|"+key+"|") {
			return true
		}
	}
	return false
}

// readPartition reads a whole partition into offset -> value.
func readPartition(t *testing.T, l *Embedded, topic string, p int32) map[int64]string {
	t.Helper()
	ctx := context.Background()
	info, err := l.DescribeTopic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	pi := info.Partitions[p]
	for off := pi.Start; off < pi.End; {
		recs, err := l.Fetch(ctx, topic, p, off, FetchOptions{MaxBytes: 1 << 20})
		var dl *DataLossError
		if errors.As(err, &dl) {
			t.Fatalf("%s/%d: %v after a crash", topic, p, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			out[r.Offset] = string(r.Value)
		}
		off = recs[len(recs)-1].Offset + 1
	}
	return out
}
