package iceberg

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// TestSourceCaughtUpCommitsAtOnce: a stream the fetcher kept up with (no
// backlog in the log) is committed as soon as the source says it caught
// up (Sink.CaughtUp) and the loop has read the topic's ends it took then,
// not a commit interval (here an hour) later. Without the notice nothing
// is committed. Changes produced after the notice wait for the interval
// again: one notice, one early commit.
func TestSourceCaughtUpCommitsAtOnce(t *testing.T) {
	dir := t.TempDir()
	reg := memRegistry(t)
	f := newFeed(t, filepath.Join(dir, "log"), reg, 2)
	produce := func(from, n int64) {
		var recs []log.Record
		for id := from; id < from+n; id++ {
			pos := f.position()
			env := schema.Envelope{Op: 'c', After: []any{id, fmt.Sprint("v", id), id % 7}, Source: schema.SourceInfo{Position: pos}}
			k, v := f.encode(&env)
			recs = append(recs, log.Record{Key: k, Value: v, Partition: log.PartitionFor(k, 2),
				Headers: []log.Header{{Key: schema.HeaderPosition, Value: pos}}})
		}
		if err := f.lg.Produce(t.Context(), "t", recs); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 200)
	end := f.end()
	s := New(Config{Pipeline: "p", Group: "g", Mode: ModeUpsert, IndexDir: filepath.Join(dir, "index"),
		Tables:         []TableConfig{{Topic: "t", Ident: table.Identifier{"ns", "tbl"}}},
		CommitInterval: time.Hour, RetryInterval: 200 * time.Millisecond,
		Compaction: CompactionConfig{Disabled: true}}, testCatalog(t), f.lg, reg, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}()
	r := &runningSink{s: s}
	time.Sleep(1500 * time.Millisecond) // the sink reads the 200 changes
	if c := s.Stats()[0].Commits.Load(); c != 0 {
		t.Fatalf("%d commits before any notice, with an hour's interval", c)
	}
	s.CaughtUp()
	waitFor(t, "the changes read before the notice to be committed", func() bool { return r.committedTo(end) })
	if got := s.Stats()[0].Rows.Load(); got != 200 {
		t.Errorf("committed %d rows, want 200", got)
	}
	// A notice taken before its changes are read: the loop commits once
	// it reaches the ends it took.
	produce(200, 50)
	end = f.end()
	s.CaughtUp()
	waitFor(t, "the changes of the second notice to be committed", func() bool { return r.committedTo(end) })
	commits := s.Stats()[0].Commits.Load()
	// No notice: the next changes wait for the interval.
	produce(250, 10)
	time.Sleep(1500 * time.Millisecond)
	if c := s.Stats()[0].Commits.Load(); c != commits {
		t.Errorf("%d commits after changes with no notice, want %d", c, commits)
	}
}
