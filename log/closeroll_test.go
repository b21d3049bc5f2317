package log_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cdcd-dev/cdcd/log"
)

// TestCloseRollsActiveSegment: a clean close closes an active segment of
// at least 4 MiB (the next Open read and checked every batch of it: up to
// 128 MiB a partition at each restart), so the next Open reads none of it;
// a smaller one stays active (a restart makes no small segment); a crash
// after more appends is scanned at Open as before, and every record is
// there.
func TestCloseRollsActiveSegment(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	produce := func(l *log.Embedded, from, n int) {
		t.Helper()
		recs := make([]log.Record, n)
		for i := range recs {
			recs[i] = log.Record{Key: fmt.Appendf(nil, "k%d", from+i), Value: make([]byte, 300), Partition: 0}
		}
		if err := l.Produce(ctx, "t", recs); err != nil {
			t.Fatal(err)
		}
	}
	readAll := func(l *log.Embedded, want int64) {
		t.Helper()
		next := int64(0)
		for next < want {
			recs, err := l.Fetch(ctx, "t", 0, next, log.FetchOptions{MaxBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 || recs[0].Offset != next {
				t.Fatalf("a fetch at %d returned %d records", next, len(recs))
			}
			for _, r := range recs {
				if string(r.Key) != fmt.Sprintf("k%d", r.Offset) {
					t.Fatalf("offset %d holds key %s", r.Offset, r.Key)
				}
			}
			next = recs[len(recs)-1].Offset + 1
		}
		if next != want {
			t.Fatalf("read to %d, want %d", next, want)
		}
	}
	// Plain batches: the segment must reach closeRollBytes.
	l := openEmbedded(t, dir, log.Options{Compression: log.CompressionNone})
	if err := l.CreateTopic(ctx, "t", log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	// Small appends (under directWrite, 64 KiB) go through the flusher's
	// buffer, which keeps the last group's bytes after writing them: the
	// first version of the roll at close wrote them again past the end,
	// and every partition of cdcd bench's log was quarantined at the next
	// Open.
	for c := range 400 {
		produce(l, c*50, 50)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(dir, "topics", "t", "0")
	segments := func() []string {
		m, _ := filepath.Glob(filepath.Join(part, "*.log"))
		return m
	}
	if got := segments(); len(got) != 2 {
		t.Fatalf("segments after a clean close: %v, want the closed one and an empty one", got)
	}

	fs := &countingFS{FS: log.OSFS}
	l = openEmbedded(t, dir, log.Options{FS: fs})
	if n := fs.reads.Load(); n != 0 {
		t.Errorf("Open after a clean close read the active segment %d times, want none", n)
	}
	if r := l.Recovery(); len(r.Truncations) > 0 || len(r.Losses) > 0 {
		t.Fatalf("Open after a clean close found damage: %+v", r)
	}
	if q, _ := filepath.Glob(filepath.Join(dir, "quarantine", "*")); len(q) > 0 {
		t.Fatalf("Open after a clean close quarantined %v", q)
	}
	readAll(l, 20000)
	produce(l, 20000, 500)

	// A crash now: the directory as it is, the log still open.
	crashed := filepath.Join(t.TempDir(), "crashed")
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := segments(); len(got) != 2 {
		t.Errorf("a clean close of a small active segment closed it: segments %v", got)
	}
	fs = &countingFS{FS: log.OSFS}
	c := openEmbedded(t, crashed, log.Options{FS: fs})
	defer c.Close()
	if fs.reads.Load() == 0 {
		t.Error("Open after a crash did not scan the active segment")
	}
	readAll(c, 20500)
}
