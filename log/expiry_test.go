package log

import (
	"context"
	"testing"
	"time"
)

// TestExpiresAt: a record's expiry is its segment's newest timestamp plus
// the topic's retention, and agrees with what Cleanup then removes; no
// expiry where retention keeps records forever, for compacted topics and
// for offsets the partition does not hold.
func TestExpiresAt(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	l := openTest(t, t.TempDir(), clock)
	defer l.Close()
	for name, cfg := range map[string]TopicConfig{
		"t":       {Partitions: 1, Retention: time.Hour},
		"forever": {Partitions: 1},
		"compact": {Partitions: 1, Retention: time.Hour, Cleanup: CleanupCompact},
	} {
		if err := l.CreateTopic(ctx, name, cfg); err != nil {
			t.Fatal(err)
		}
	}
	old := clock.now().Add(-2 * time.Hour).Truncate(time.Millisecond)
	for i := 0; i < 60; i++ {
		mustProduce(t, l, "t", Record{Value: make([]byte, 100), Timestamp: old, Partition: 0})
		mustProduce(t, l, "forever", Record{Key: []byte("k"), Value: make([]byte, 100), Timestamp: old, Partition: 0})
		mustProduce(t, l, "compact", Record{Key: []byte("k"), Value: make([]byte, 100), Timestamp: old, Partition: 0})
	}
	now := clock.now().Truncate(time.Millisecond)
	for i := 0; i < 30; i++ {
		mustProduce(t, l, "t", Record{Value: make([]byte, 100), Timestamp: now, Partition: 0})
	}
	at, ok := l.ExpiresAt("t", 0, 0)
	if !ok || !at.Equal(old.Add(time.Hour)) {
		t.Fatalf("ExpiresAt(t, 0, 0) = %v, %v; want %v", at, ok, old.Add(time.Hour))
	}
	if at, ok := l.ExpiresAt("t", 0, 89); !ok || !at.Equal(now.Add(time.Hour)) {
		t.Fatalf("ExpiresAt(t, 0, 89) = %v, %v; want %v", at, ok, now.Add(time.Hour))
	}
	for _, c := range []struct {
		topic string
		off   int64
	}{{"forever", 0}, {"compact", 0}, {"t", 90}, {"nope", 0}} {
		if at, ok := l.ExpiresAt(c.topic, 0, c.off); ok {
			t.Errorf("ExpiresAt(%s, 0, %d) = %v, want none", c.topic, c.off, at)
		}
	}
	if err := l.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	info, _ := l.DescribeTopic(ctx, "t")
	if start := info.Partitions[0].Start; start == 0 {
		t.Fatal("retention removed nothing though offset 0 had expired")
	} else if _, ok := l.ExpiresAt("t", 0, 0); ok {
		t.Error("an offset retention removed still has an expiry")
	}
}
