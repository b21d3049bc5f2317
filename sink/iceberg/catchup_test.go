package iceberg

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// TestBacklogTailCommittedAtOnce: a table that reads a backlog (a load, a
// restart behind) commits the backlog's tail as soon as the fetcher
// reaches the end of the topic, not a commit interval later: with an
// interval of an hour, the table holds every offset well within the
// test's minute.
func TestBacklogTailCommittedAtOnce(t *testing.T) {
	// 3.5 MiB in 8 KiB rows, fetched 64 KiB at a time: three full batches,
	// each a forced commit of a 1 MiB buffer, then a tail of under half a
	// MiB.
	catchUpRun(t, 448, schema.SnapshotTrue, 64<<10, 1<<20)
}

// TestLoadEndCommittedAtOnce: a load smaller than a buffer (no backlog)
// is committed as soon as the fetcher has read its last row (marked
// last_in_data_collection) and found the end of the topic.
func TestLoadEndCommittedAtOnce(t *testing.T) {
	catchUpRun(t, 40, schema.SnapshotLastInColl, 64<<10, 1<<20)
}

// TestLoadEndInFullBatchCommittedAtOnce: a load whose last row is in a
// full batch (1.25 MiB, each partition read in one fetch) with nothing
// after it, in a buffer that holds far more, is committed at once too: the
// fetcher says it found the end of the topic with an empty batch. Without
// it the tail waited the commit interval (cdcd bench's load of 300,000
// rows: 2.4 s, then 12.2 s).
func TestLoadEndInFullBatchCommittedAtOnce(t *testing.T) {
	catchUpRun(t, 160, schema.SnapshotLastInColl, 8<<20, 64<<20)
}

// catchUpRun produces n snapshot reads of 8 KiB, the last one marked
// last, runs a sink with an hour's commit interval (and the fetch and
// buffer sizes given) over them and waits for the table to hold them all.
func catchUpRun(t *testing.T, n int64, last string, fetchBytes, maxBuffered int) {
	dir := t.TempDir()
	reg := memRegistry(t)
	f := newFeed(t, filepath.Join(dir, "log"), reg, 2)
	big := strings.Repeat("x", 8<<10)
	var recs []log.Record
	for id := int64(0); id < n; id++ {
		pos := f.position()
		row := []any{id, big + fmt.Sprint(id), id % 7}
		env := schema.Envelope{Op: 'r', After: row, Source: schema.SourceInfo{Position: pos, Snapshot: schema.SnapshotTrue}}
		if id == n-1 {
			env.Source.Snapshot = last
		}
		k, v := f.encode(&env)
		recs = append(recs, log.Record{Key: k, Value: v, Partition: log.PartitionFor(k, 2),
			Headers: []log.Header{{Key: schema.HeaderPosition, Value: pos}}})
	}
	if err := f.lg.Produce(t.Context(), "t", recs); err != nil {
		t.Fatal(err)
	}
	end := f.end()
	s := New(Config{Pipeline: "p", Group: "g", Mode: ModeUpsert, IndexDir: filepath.Join(dir, "index"),
		Tables:         []TableConfig{{Topic: "t", Ident: table.Identifier{"ns", "tbl"}}},
		CommitInterval: time.Hour, MaxBufferedBytes: maxBuffered, FetchBytes: fetchBytes, RetryInterval: 200 * time.Millisecond,
		Compaction: CompactionConfig{Disabled: true}}, testCatalog(t), f.lg, reg, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	r := &runningSink{s: s}
	waitFor(t, "the rows to be committed", func() bool { return r.committedTo(end) })
	if got := s.Stats()[0].SnapshotRows.Load(); got != n {
		t.Errorf("the table holds %d rows, want %d", got, n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestCaughtUpNeedsABacklog: only the end of a backlog of a whole buffer
// commits early; small batches of a stream the fetcher keeps up with, and a
// short run of full batches (what gathers while a commit runs), do not.
func TestCaughtUpNeedsABacklog(t *testing.T) {
	w := &tableWriter{s: &Sink{cfg: Config{MaxBufferedBytes: 4 * batchBytes}}}
	steps := []struct {
		bytes int
		want  bool
	}{
		{100, false},                             // a stream's batch
		{batchBytes, false}, {batchBytes, false}, // a short run of full batches
		{100, false},                                  // ... caught up: 2 MiB is no backlog
		{batchBytes, false}, {batchBytes + 10, false}, // a backlog ...
		{batchBytes, false}, {batchBytes, false}, // ... of 4 MiB
		{5, true},                                       // its end
		{5, false},                                      // the stream after it
		{batchBytes * 4, false}, {batchBytes / 2, true}, // one large batch is a backlog too
	}
	for i, s := range steps {
		if got := w.caughtUp(fetched{bytes: s.bytes}); got != s.want {
			t.Fatalf("step %d (%d bytes): caughtUp = %v, want %v", i, s.bytes, got, s.want)
		}
	}
}
