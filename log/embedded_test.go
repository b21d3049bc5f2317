package log_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/log/logtest"
)

// testLogger writes the log's messages to the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

func openEmbedded(t testing.TB, dir string, opts log.Options) *log.Embedded {
	t.Helper()
	l, err := log.Open(dir, opts, testLogger(t))
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return l
}

func TestContract(t *testing.T) {
	logtest.Run(t, func(t *testing.T) log.Log {
		l := openEmbedded(t, t.TempDir(), log.Options{SegmentBytes: 16 << 10, IndexIntervalBytes: 512})
		t.Cleanup(func() { _ = l.Close() })
		return l
	})
}

func TestContractIntervalSync(t *testing.T) {
	logtest.Run(t, func(t *testing.T) log.Log {
		l := openEmbedded(t, t.TempDir(), log.Options{Sync: log.SyncInterval, SyncInterval: 10 * time.Millisecond})
		t.Cleanup(func() { _ = l.Close() })
		return l
	})
}

func TestReopenKeepsEverything(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := log.Options{SegmentBytes: 4 << 10, IndexIntervalBytes: 256}
	l := openEmbedded(t, dir, opts)
	if err := l.CreateTopic(ctx, "orders", log.TopicConfig{Partitions: 2, Cleanup: log.CleanupCompact}); err != nil {
		t.Fatal(err)
	}
	var want []log.Record
	for i := 0; i < 200; i++ {
		recs := []log.Record{{Key: fmt.Appendf(nil, "k%d", i%13), Value: fmt.Appendf(nil, "value-%d", i), Partition: -1,
			Headers: []log.Header{{Key: "i", Value: fmt.Appendf(nil, "%d", i)}}}}
		if err := l.Produce(ctx, "orders", recs); err != nil {
			t.Fatal(err)
		}
		want = append(want, recs...)
	}
	if err := l.CommitOffsets(ctx, "sink", "orders", map[int32]int64{0: 3, 1: 4}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); !errors.Is(err, log.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	l = openEmbedded(t, dir, opts)
	defer l.Close()
	if l.Recovery().Lost() {
		t.Fatalf("clean reopen reported loss: %+v", l.Recovery())
	}
	info, err := l.DescribeTopic(ctx, "orders")
	if err != nil || info.Config.Cleanup != log.CleanupCompact || info.Config.Partitions != 2 {
		t.Fatalf("DescribeTopic after reopen = %+v, %v", info, err)
	}
	got := map[int32][]log.Record{}
	for p := int32(0); p < 2; p++ {
		for off := int64(0); off < info.Partitions[p].End; {
			recs, err := l.Fetch(ctx, "orders", p, off, log.FetchOptions{MaxBytes: 300})
			if err != nil {
				t.Fatal(err)
			}
			got[p] = append(got[p], recs...)
			off = recs[len(recs)-1].Offset + 1
		}
	}
	for _, w := range want {
		g := got[w.Partition][w.Offset]
		if string(g.Value) != string(w.Value) || string(g.Key) != string(w.Key) || string(g.Header("i")) != string(w.Header("i")) {
			t.Fatalf("%d/%d = %q %q, want %q %q", w.Partition, w.Offset, g.Key, g.Value, w.Key, w.Value)
		}
	}
	offs, err := l.CommittedOffsets(ctx, "sink", "orders")
	if err != nil || offs[0] != 3 || offs[1] != 4 {
		t.Fatalf("offsets after reopen = %v, %v", offs, err)
	}
	// Appends continue after the recovered end.
	rec := []log.Record{{Key: []byte("k0"), Value: []byte("after"), Partition: 0}}
	if err := l.Produce(ctx, "orders", rec); err != nil || rec[0].Offset != info.Partitions[0].End {
		t.Fatalf("append after reopen at %d, %v; want %d", rec[0].Offset, err, info.Partitions[0].End)
	}
}

func TestLockedDir(t *testing.T) {
	dir := t.TempDir()
	l := openEmbedded(t, dir, log.Options{})
	defer l.Close()
	_, err := log.Open(dir, log.Options{}, nil)
	var le *log.LockError
	if !errors.As(err, &le) || !errors.Is(err, log.ErrLocked) || le.PID != os.Getpid() {
		t.Fatalf("second Open: %v", err)
	}
	t.Log(err)
}

func TestReadOnlyWhileWriterRuns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w := openEmbedded(t, dir, log.Options{})
	defer w.Close()
	if err := w.CreateTopic(ctx, "t", log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if err := w.Produce(ctx, "t", []log.Record{{Value: []byte("a"), Partition: 0}, {Value: []byte("b"), Partition: 0}}); err != nil {
		t.Fatal(err)
	}
	if err := w.CommitOffsets(ctx, "g", "t", map[int32]int64{0: 1}); err != nil {
		t.Fatal(err)
	}
	r := openEmbedded(t, dir, log.Options{ReadOnly: true})
	defer r.Close()
	recs, err := r.Fetch(ctx, "t", 0, 0, log.FetchOptions{})
	if err != nil || len(recs) != 2 {
		t.Fatalf("read-only Fetch = %v, %v", recs, err)
	}
	offs, err := r.CommittedOffsets(ctx, "g", "t")
	if err != nil || offs[0] != 1 {
		t.Fatalf("read-only offsets = %v, %v", offs, err)
	}
	if err := r.Produce(ctx, "t", []log.Record{{Value: []byte("x"), Partition: 0}}); !errors.Is(err, log.ErrReadOnly) {
		t.Fatalf("read-only Produce: %v", err)
	}
	if err := r.CreateTopic(ctx, "u", log.TopicConfig{Partitions: 1}); !errors.Is(err, log.ErrReadOnly) {
		t.Fatalf("read-only CreateTopic: %v", err)
	}
}

func TestReservedTopic(t *testing.T) {
	ctx := context.Background()
	l := openEmbedded(t, t.TempDir(), log.Options{})
	defer l.Close()
	if err := l.Produce(ctx, log.OffsetsTopic, []log.Record{{Value: []byte("x"), Partition: 0}}); !errors.Is(err, log.ErrReservedTopic) {
		t.Fatalf("Produce to %s: %v", log.OffsetsTopic, err)
	}
	if err := l.DeleteTopic(ctx, log.OffsetsTopic); !errors.Is(err, log.ErrReservedTopic) {
		t.Fatalf("DeleteTopic(%s): %v", log.OffsetsTopic, err)
	}
	for _, bad := range []string{"", ".x", "a/b", "a b", string(make([]byte, 250))} {
		if err := l.CreateTopic(ctx, bad, log.TopicConfig{Partitions: 1}); !errors.Is(err, log.ErrInvalidTopic) {
			t.Errorf("CreateTopic(%q): %v", bad, err)
		}
	}
}

func TestDeleteTopicWakesFetch(t *testing.T) {
	ctx := context.Background()
	l := openEmbedded(t, t.TempDir(), log.Options{})
	defer l.Close()
	if err := l.CreateTopic(ctx, "t", log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.Fetch(ctx, "t", 0, 0, log.FetchOptions{MaxWait: time.Minute})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := l.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, log.ErrUnknownTopic) {
			t.Fatalf("Fetch woken by DeleteTopic returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DeleteTopic did not wake a long-polling Fetch")
	}
}

func TestCloseWakesFetch(t *testing.T) {
	ctx := context.Background()
	l := openEmbedded(t, t.TempDir(), log.Options{})
	if err := l.CreateTopic(ctx, "t", log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.Fetch(ctx, "t", 0, 0, log.FetchOptions{MaxWait: time.Minute})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, log.ErrClosed) {
		t.Fatalf("Fetch woken by Close returned %v", err)
	}
	if err := l.Produce(ctx, "t", []log.Record{{Value: []byte("x"), Partition: 0}}); !errors.Is(err, log.ErrClosed) {
		t.Fatalf("Produce after Close: %v", err)
	}
}

// TestReadOnlyDuringWritesAndCleanup opens read-only views again and again
// while a writer appends and compacts: every view opens without reporting
// loss and reads increasing offsets with intact values.
func TestReadOnlyDuringWritesAndCleanup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir := t.TempDir()
	w := openEmbedded(t, dir, log.Options{SegmentBytes: 2048, CleanupInterval: -1})
	defer w.Close()
	if err := w.CreateTopic(ctx, "c", log.TopicConfig{Partitions: 1, Cleanup: log.CleanupCompact}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				writerDone <- nil
				return
			default:
			}
			rec := []log.Record{{Key: fmt.Appendf(nil, "k%d", i%30), Value: fmt.Appendf(nil, "value-%d", i), Partition: 0}}
			if err := w.Produce(ctx, "c", rec); err != nil {
				writerDone <- err
				return
			}
			if i%50 == 0 {
				if err := w.Cleanup(ctx); err != nil {
					writerDone <- err
					return
				}
			}
		}
	}()
	for n := 0; n < 30; n++ {
		r, err := log.Open(dir, log.Options{ReadOnly: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Recovery().Lost() {
			t.Fatalf("read-only view %d reported loss: %+v", n, r.Recovery())
		}
		info, err := r.DescribeTopic(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		prev := int64(-1)
		for off := info.Partitions[0].Start; off < info.Partitions[0].End; {
			recs, err := r.Fetch(ctx, "c", 0, off, log.FetchOptions{})
			if err != nil {
				t.Fatalf("view %d: %v", n, err)
			}
			if len(recs) == 0 {
				break
			}
			for _, rec := range recs {
				if rec.Offset <= prev || string(rec.Value) != fmt.Sprintf("value-%d", rec.Offset) {
					t.Fatalf("view %d: record %d = %q after %d", n, rec.Offset, rec.Value, prev)
				}
				prev = rec.Offset
			}
			off = prev + 1
		}
		r.Close()
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
}

// TestCloseDuringProduce: Close while producers run ends every Produce
// with success or ErrClosed, never a hang, and what succeeded is there
// after reopening.
func TestCloseDuringProduce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := openEmbedded(t, dir, log.Options{})
	if err := l.CreateTopic(ctx, "t", log.TopicConfig{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	type ok struct {
		p   int32
		off int64
		v   string
	}
	acked := make(chan ok, 100000)
	done := make(chan error, 4)
	for w := 0; w < 4; w++ {
		go func() {
			for i := 0; ; i++ {
				recs := []log.Record{{Key: fmt.Appendf(nil, "w%d-%d", w, i), Value: fmt.Appendf(nil, "w%d-%d", w, i), Partition: -1}}
				if err := l.Produce(ctx, "t", recs); err != nil {
					done <- err
					return
				}
				acked <- ok{recs[0].Partition, recs[0].Offset, string(recs[0].Value)}
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for w := 0; w < 4; w++ {
		select {
		case err := <-done:
			if !errors.Is(err, log.ErrClosed) {
				t.Fatalf("Produce during Close: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Produce hung across Close")
		}
	}
	close(acked)
	l = openEmbedded(t, dir, log.Options{})
	defer l.Close()
	n := 0
	for a := range acked {
		recs, err := l.Fetch(ctx, "t", a.p, a.off, log.FetchOptions{MaxBytes: 1})
		if err != nil || len(recs) == 0 || string(recs[0].Value) != a.v {
			t.Fatalf("acknowledged %d/%d %s: got %v, %v", a.p, a.off, a.v, recs, err)
		}
		n++
	}
	t.Logf("%d acknowledged records intact after Close during Produce", n)
}
