package log_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/cdcd-dev/cdcd/log"
)

// TestFetchInto: a fetch with FetchOptions.Into returns its records in
// Into's array while it has room, each as a fetch without it returns it,
// and a fetch into the same slice again returns the new records, not
// the old ones.
func TestFetchInto(t *testing.T) {
	ctx := context.Background()
	l := openEmbedded(t, t.TempDir(), log.Options{SegmentBytes: 4 << 10, IndexIntervalBytes: 256})
	t.Cleanup(func() { _ = l.Close() })
	if err := l.CreateTopic(ctx, "t", log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		rec := []log.Record{{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "value-%d", i), Partition: 0,
			Headers: []log.Header{{Key: "h", Value: fmt.Appendf(nil, "%d", i)}}}}
		if err := l.Produce(ctx, "t", rec); err != nil {
			t.Fatal(err)
		}
	}
	into := make([]log.Record, 0, 4096) // above what a fetch sizes its slice for
	for _, from := range []int64{0, 17, 40} {
		want, err := l.Fetch(ctx, "t", 0, from, log.FetchOptions{MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.Fetch(ctx, "t", 0, from, log.FetchOptions{MaxBytes: 1 << 20, Into: into})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || len(got) == 0 {
			t.Fatalf("from %d: %d records into the slice, %d without it", from, len(got), len(want))
		}
		if &got[0] != &into[:1][0] {
			t.Fatalf("from %d: the records are not in Into's array", from)
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.Offset != w.Offset || string(g.Key) != string(w.Key) || string(g.Value) != string(w.Value) ||
				string(g.Header("h")) != string(w.Header("h")) || g.Partition != w.Partition || !g.Timestamp.Equal(w.Timestamp) {
				t.Fatalf("from %d, record %d: %+v into the slice, %+v without it", from, i, g, w)
			}
		}
	}
}
