package mysql

import (
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/source"
)

// TestBatchFullBehind: while the stream reads a backlog it was found far
// behind of, a batch's oldest change waits backlogBatchDelay times
// BatchDelay (the loop's receive deadline with it) and the count alone
// cuts it; caught up, BatchDelay again.
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
		{true, 99, 99 * time.Millisecond, false},
		{true, 100, 0, true},
		{true, 1, 100 * time.Millisecond, true},
	} {
		s := &streamer{r: r, streamBufs: &streamBufs{batch: make([]source.Change, tc.n)}, batchAt: now.Add(-tc.age)}
		if tc.behind {
			s.catchUpFile = "mariadb-bin.000002"
		}
		if got := s.batchFull(now); got != tc.want {
			t.Errorf("behind %v, %d changes, %v old: full %v, want %v", tc.behind, tc.n, tc.age, got, tc.want)
		}
		if want := map[bool]time.Duration{false: 20 * time.Millisecond, true: 100 * time.Millisecond}[tc.behind]; s.batchWait() != want {
			t.Errorf("behind %v: a batch waits %v, want %v", tc.behind, s.batchWait(), want)
		}
	}
}
