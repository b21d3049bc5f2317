package log

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// faultyLog opens a log on an error-injecting in-memory file system.
func faultyLog(t *testing.T, opts Options) (*Embedded, *errorFS, *memFS) {
	t.Helper()
	mfs := newMemFS()
	if err := mfs.MkdirAll("/data", 0o755); err != nil || syncDir(mfs, "/") != nil {
		t.Fatal("cannot make /data durable")
	}
	efs := &errorFS{FS: mfs}
	opts.FS = efs
	if opts.CleanupInterval == 0 {
		opts.CleanupInterval = -1
	}
	l, err := Open("/data/log", opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CreateTopic(context.Background(), "t", TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	return l, efs, mfs
}

// failOn returns an injector failing op on the topic's segment files with
// err.
func failOn(err error, ops ...string) func(op, path string) error {
	return func(op, path string) error {
		for _, o := range ops {
			if o == op && strings.Contains(path, "/topics/t/") && strings.HasSuffix(path, segmentSuffix) {
				return err
			}
		}
		return nil
	}
}

func partStats(l *Embedded, topic string) PartitionStats {
	for _, ps := range l.Stats().Partitions {
		if ps.Topic == topic {
			return ps
		}
	}
	return PartitionStats{}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDiskFullRecovers: while writes (or syncs, or creating the next
// segment) fail with ENOSPC, appends wait, nothing unsynced becomes
// visible and Stats says the partition is failing and why; once writes
// succeed again, the waiting appends land at the offsets they were given,
// and a reopen finds exactly them.
func TestDiskFullRecovers(t *testing.T) {
	for _, op := range []string{"write", "sync", "create"} {
		t.Run(op, func(t *testing.T) {
			ctx := context.Background()
			l, efs, _ := faultyLog(t, Options{SegmentBytes: 1024})
			defer l.Close()
			produce := func(v string) (int64, error) {
				recs := []Record{{Value: []byte(v), Partition: 0}}
				err := l.Produce(ctx, "t", recs)
				return recs[0].Offset, err
			}
			n := 0
			if op == "create" {
				// Fill the first segment so that the next append rolls.
				for partStats(l, "t").Segments == 1 {
					if _, err := produce(fmt.Sprintf("fill-%d-%s", n, strings.Repeat("x", 100))); err != nil {
						t.Fatal(err)
					}
					n++
				}
				for partStats(l, "t").Segments == 2 && l.topics["t"].parts[0].fl.size+150 < 1024 {
					if _, err := produce(fmt.Sprintf("fill-%d-%s", n, strings.Repeat("x", 100))); err != nil {
						t.Fatal(err)
					}
					n++
				}
			} else if _, err := produce("before"); err != nil {
				t.Fatal(err)
			}
			end := partStats(l, "t").End
			efs.set(failOn(syscall.ENOSPC, op))
			type result struct {
				off int64
				err error
			}
			done := make(chan result, 3)
			for i := 0; i < 3; i++ {
				go func() {
					off, err := produce(fmt.Sprintf("during-%d-%s", i, strings.Repeat("y", 200)))
					done <- result{off, err}
				}()
			}
			waitFor(t, "the partition to report failing writes", func() bool {
				ps := partStats(l, "t")
				return ps.WriteError != nil && ps.WriteFailures >= 2
			})
			ps := partStats(l, "t")
			var we *WriteError
			if !errors.As(ps.WriteError, &we) || !errors.Is(ps.WriteError, syscall.ENOSPC) || ps.WriteFailingSince.IsZero() {
				t.Fatalf("Stats while failing: %+v", ps)
			}
			if ps.End != end {
				t.Fatalf("End moved to %d while writes failed (was %d)", ps.End, end)
			}
			select {
			case r := <-done:
				t.Fatalf("an append returned while writes failed: %+v", r)
			default:
			}
			efs.set(nil)
			offs := map[int64]bool{}
			for i := 0; i < 3; i++ {
				r := <-done
				if r.err != nil || r.off < end || r.off >= end+3 || offs[r.off] {
					t.Fatalf("append after recovery: %+v (end was %d)", r, end)
				}
				offs[r.off] = true
			}
			if ps := partStats(l, "t"); ps.WriteError != nil || ps.End != end+3 {
				t.Fatalf("Stats after recovery: %+v", ps)
			}
			recs, err := l.Fetch(ctx, "t", 0, end, FetchOptions{})
			if err != nil || len(recs) != 3 || !strings.HasPrefix(string(recs[0].Value), "during-") {
				t.Fatalf("Fetch after recovery: %d records, %v", len(recs), err)
			}
			dir := l.Dir()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l2, err := Open(dir, Options{FS: efs, SegmentBytes: 1024, CleanupInterval: -1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			if rep := l2.Recovery(); rep.Lost() {
				t.Fatalf("reopen after a recovered disk-full: %+v", rep)
			}
			if got := partStats(l2, "t").End; got != end+3 {
				t.Fatalf("End after reopen = %d, want %d", got, end+3)
			}
		})
	}
}

// TestCloseWhileWritesFail: Close does not wait for the disk; the waiting
// appends get the *WriteError, and none of them is in the log afterwards.
func TestCloseWhileWritesFail(t *testing.T) {
	ctx := context.Background()
	l, efs, mfs := faultyLog(t, Options{})
	if err := l.Produce(ctx, "t", []Record{{Value: []byte("ok"), Partition: 0}}); err != nil {
		t.Fatal(err)
	}
	efs.set(failOn(syscall.EIO, "sync"))
	errc := make(chan error, 1)
	go func() { errc <- l.Produce(ctx, "t", []Record{{Value: []byte("never"), Partition: 0}}) }()
	waitFor(t, "failing writes", func() bool { return partStats(l, "t").WriteError != nil })
	_ = l.Close()
	var we *WriteError
	if err := <-errc; !errors.As(err, &we) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Produce when the log closed while writes failed: %v", err)
	}
	for _, fs := range []FS{efs, mfs.crashClone()} {
		efs.set(nil)
		l, err := Open("/data/log", Options{FS: fs, CleanupInterval: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := partStats(l, "t").End; got != 1 || len(l.Recovery().Losses) > 0 {
			t.Fatalf("End = %d, recovery %+v; want 1 and no loss", got, l.Recovery())
		}
		_ = l.Close()
	}
}

// TestFaultyDiskCrashClone: writes, syncs, segment creations and
// truncations fail at random while producers append; at random moments
// the machine "crashes". Every crash state opens with no loss and holds
// every record acknowledged before it; at the end, with the disk healthy
// again, every append has returned and the log holds exactly them.
func TestFaultyDiskCrashClone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(11, 3))
	opts := Options{SegmentBytes: 2048, IndexIntervalBytes: 128}
	l, efs, mfs := faultyLog(t, opts)
	var rmu sync.Mutex
	frng := rand.New(rand.NewPCG(5, 5))
	efs.set(func(op, path string) error {
		rmu.Lock()
		defer rmu.Unlock()
		if strings.Contains(path, "/topics/t/") && frng.IntN(10) == 0 {
			return syscall.ENOSPC
		}
		return nil
	})
	var mu sync.Mutex
	acked := map[int64]string{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for id := 0; id < 3; id++ {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				recs := make([]Record, 1+n%4)
				for i := range recs {
					recs[i] = Record{Value: fmt.Appendf(nil, "p%d-n%d-%d-%s", id, n, i, strings.Repeat("z", n%50)), Partition: 0}
				}
				if err := l.Produce(ctx, "t", recs); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, r := range recs {
					acked[r.Offset] = string(r.Value)
				}
				mu.Unlock()
			}
		})
	}
	for crash := 0; crash < 15; crash++ {
		time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
		mu.Lock()
		want := make(map[int64]string, len(acked))
		for o, v := range acked {
			want[o] = v
		}
		mu.Unlock()
		clone := mfs.crashClone()
		cl, err := Open("/data/log", Options{FS: clone, SegmentBytes: 2048, CleanupInterval: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rep := cl.Recovery(); len(rep.Losses) > 0 {
			t.Fatalf("crash %d reported loss: %+v", crash, rep.Losses)
		}
		got := readPartition(t, cl, "t", 0)
		for o, v := range want {
			if got[o] != v {
				t.Fatalf("crash %d: acknowledged record %d = %.20q, want %.20q", crash, o, got[o], v)
			}
		}
		_ = cl.Close()
	}
	efs.set(nil)
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if ps := partStats(l, "t"); ps.WriteFailures == 0 || ps.WriteError != nil {
		t.Fatalf("the disk never failed, or the partition did not recover: %+v", ps)
	}
	got := readPartition(t, l, "t", 0)
	if len(got) != len(acked) {
		t.Fatalf("log holds %d records, %d were acknowledged", len(got), len(acked))
	}
	for o, v := range acked {
		if got[o] != v {
			t.Fatalf("record %d = %.20q, want %.20q", o, got[o], v)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
