package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/source"
)

// batchSizes is a collector that records the size of every batch. It
// listens for catch-ups (source.CatchUpNotifier): the stream looks how
// far behind it is only for such an Emitter.
type batchSizes struct {
	*collector
	mu    sync.Mutex
	sizes []int
}

func (b *batchSizes) Emit(ctx context.Context, batch []source.Change) error {
	b.mu.Lock()
	b.sizes = append(b.sizes, len(batch))
	b.mu.Unlock()
	return b.collector.Emit(ctx, batch)
}

func (b *batchSizes) CaughtUp() {}

// TestBacklogBatchesLarger: a stream that reads a backlog it was found
// far behind of hands it over in batches of up to backlogBatchMax times
// BatchMax (not more), every change once and in order; once caught up,
// a lone change is handed over within BatchDelay again, not the
// backlog's longer wait.
func TestBacklogBatchesLarger(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE backlog (id int PRIMARY KEY, v text)`)
	const batchMax, delay = 300, 400 * time.Millisecond
	opts := func(c *Config) {
		c.StatusInterval, c.HeartbeatInterval, c.PublicationCheckInterval = time.Minute, -1, time.Minute
		c.BatchMax, c.BatchDelay, c.CatchUpLag = batchMax, delay, 64<<10
	}
	// A first run creates the slot; the backlog is written while no
	// reader runs.
	stop, r := e.startReader(t, []string{"backlog"}, false, newCollector(), opts)
	for deadline := time.Now().Add(30 * time.Second); !r.Stats().Streaming.Load(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reader is not streaming after 30 s")
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	const txs, per = 8, 1000
	for i := range txs {
		e.exec(t, fmt.Sprintf(`INSERT INTO backlog SELECT g, repeat('x', 100) FROM generate_series(%d, %d) g`, i*per+1, (i+1)*per))
	}
	var end uint64
	if err := e.conn.QueryRow(t.Context(), "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").Scan(&end); err != nil {
		t.Fatal(err)
	}
	b := &batchSizes{collector: newCollector()}
	stop, r = e.startReader(t, []string{"backlog"}, false, b, opts)
	defer stop()
	got := b.wait(t, txs*per)
	for i, c := range got[:txs*per] {
		if id := c.After[0].(int64); id != int64(i+1) {
			t.Fatalf("change %d is of id %d, want %d", i, id, i+1)
		}
	}
	// Caught up: the stream received up to the server's end.
	for deadline := time.Now().Add(30 * time.Second); r.Stats().Received.Load() < end; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the stream received up to %X, not the end %X after 30 s", r.Stats().Received.Load(), end)
		}
	}
	b.mu.Lock()
	sizes := append([]int(nil), b.sizes...)
	b.mu.Unlock()
	most := 0
	for _, n := range sizes {
		most = max(most, n)
	}
	if most <= batchMax || most > backlogBatchMax*batchMax {
		t.Fatalf("the backlog's largest batch held %d changes, want more than BatchMax %d and at most %d (batches %v)",
			most, batchMax, backlogBatchMax*batchMax, sizes)
	}
	// Caught up: a lone change waits BatchDelay, not the backlog's
	// backlogBatchDelay times it.
	e.exec(t, `INSERT INTO backlog VALUES (0, 'lone')`)
	start := time.Now()
	b.wait(t, txs*per+1)
	if el := time.Since(start); el >= (backlogBatchDelay+1)*delay/2 {
		t.Fatalf("a lone change after the catch-up reached the Emitter %v after its commit; BatchDelay is %v", el.Round(time.Millisecond), delay)
	}
}

// TestBatchFullBehind: the flush rule's limits, behind a backlog and not.
func TestBatchFullBehind(t *testing.T) {
	r := &Reader{cfg: Config{BatchMax: 100, BatchDelay: 20 * time.Millisecond}}
	now := time.Now()
	for _, tc := range []struct {
		behind bool
		n      int
		age    time.Duration
		want   bool
	}{
		{false, 99, 19 * time.Millisecond, false},
		{false, 100, 0, true},
		{false, 1, 20 * time.Millisecond, true},
		{true, 100, 0, false},
		{true, 199, 99 * time.Millisecond, false},
		{true, 200, 0, true},
		{true, 1, 100 * time.Millisecond, true},
	} {
		s := &streamer{r: r, batch: make([]source.Change, tc.n), batchAt: now.Add(-tc.age)}
		if tc.behind {
			s.catchUpAt = 1 << 30
		}
		if got := s.batchFull(now); got != tc.want {
			t.Errorf("behind %v, %d changes, %v old: full %v, want %v", tc.behind, tc.n, tc.age, got, tc.want)
		}
	}
	// Received up to the end noted: no longer behind.
	s := &streamer{r: r, batch: make([]source.Change, 100), batchAt: now, catchUpAt: 1 << 30}
	r.stats.Received.Store(1 << 30)
	if !s.batchFull(now) {
		t.Error("a stream that received up to the end it was behind of still holds a full batch")
	}
}
