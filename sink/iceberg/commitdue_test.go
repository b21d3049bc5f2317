package iceberg

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestCommitDueFromArrival: the commit interval counts from when the
// buffer's oldest change reached the log, once the buffer has caught up
// with the log (no batch in the channel, the last one neither full nor
// held up); else from when the loop took the buffer's first batch, as
// before.
func TestCommitDueFromArrival(t *testing.T) {
	w := &tableWriter{s: &Sink{cfg: Config{CommitInterval: 10 * time.Second}}}
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	w.bufAt, w.bufSince = at, at.Add(-4*time.Second)
	if got, want := w.commitDue(false), at.Add(6*time.Second); !got.Equal(want) {
		t.Errorf("caught up: due %v, want %v (an interval after the oldest change arrived)", got, want)
	}
	if got, want := w.commitDue(true), at.Add(10*time.Second); !got.Equal(want) {
		t.Errorf("a batch waiting in the channel: due %v, want %v", got, want)
	}
	w.behind = true
	if got, want := w.commitDue(false), at.Add(10*time.Second); !got.Equal(want) {
		t.Errorf("fetcher behind: due %v, want %v", got, want)
	}
	w.behind, w.bufSince = false, at.Add(time.Second)
	if got, want := w.commitDue(false), at.Add(10*time.Second); !got.Equal(want) {
		t.Errorf("arrival after the buffer's start: due %v, want %v (never later than before)", got, want)
	}

	// The batches themselves: since is the last time the fetcher found
	// the partition's end before reading the change, wherever the batch
	// then waited; waited says it had to wait for room in the channel.
	dir := t.TempDir()
	reg := memRegistry(t)
	f := newFeed(t, filepath.Join(dir, "log"), reg, 1)
	s := New(Config{Pipeline: "p", Group: "g", Mode: ModeUpsert, IndexDir: filepath.Join(dir, "index"),
		Tables: []TableConfig{{Topic: "t", Ident: table.Identifier{"ns", "tbl"}}}, Compaction: CompactionConfig{Disabled: true}},
		testCatalog(t), f.lg, reg, slog.New(slog.DiscardHandler))
	tw := &tableWriter{s: s, cfg: s.cfg.Tables[0], tables: map[uint32]*schema.Table{}, partitions: 1}
	started := time.Now()
	fe := newFetcher(tw, []int64{0})
	f.upsert(1) // there before the fetcher first looked
	var cur fetched
	if n, err := fe.fetch(t.Context(), 0, 0, &cur); err != nil || n != 1 {
		t.Fatalf("fetch: %d, %v", n, err)
	}
	if cur.since.Before(started) || cur.since.After(time.Now()) {
		t.Errorf("a change found at the fetcher's start: since %v, want the fetcher's start (at %v)", cur.since, started)
	}
	if n, err := fe.fetch(t.Context(), 0, 0, &cur); err != nil || n != 0 {
		t.Fatalf("fetch at the end: %d, %v", n, err)
	}
	end := fe.endAt[0]
	if end.Before(cur.since) {
		t.Fatalf("the end found at %v, before the fetcher's start %v", end, cur.since)
	}
	f.upsert(2)
	next := fetched{}
	if n, err := fe.fetch(t.Context(), 0, 0, &next); err != nil || n != 1 {
		t.Fatalf("fetch: %d, %v", n, err)
	}
	if !next.since.Equal(end) {
		t.Errorf("since %v, want %v: when the fetcher last found the partition's end", next.since, end)
	}

	// Handing a batch over: waited only when the channel had no room.
	out := make(chan fetched, 1)
	if err := handOver(t.Context(), out, &next); err != nil || next.waited {
		t.Fatalf("a channel with room: %v, waited %v", err, next.waited)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := handOver(ctx, out, &next); err != context.Canceled || !next.waited {
		t.Fatalf("a full channel: %v, waited %v; want it marked waited", err, next.waited)
	}
	if b := <-out; b.waited || len(b.changes) != 1 || b.changes[0].offset != 1 {
		t.Fatalf("the batch sent: waited %v, %d changes", b.waited, len(b.changes))
	}
}
