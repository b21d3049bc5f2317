package log

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for Options.now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClock() *fakeClock { return &fakeClock{t: time.UnixMilli(1_700_000_000_000)} }

func openTest(t *testing.T, dir string, clock *fakeClock) *Embedded {
	t.Helper()
	opts := Options{SegmentBytes: 1024, IndexIntervalBytes: 128, CleanupInterval: -1}
	if clock != nil {
		opts.now = clock.now
	}
	l, err := Open(dir, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustProduce(t *testing.T, l *Embedded, topic string, recs ...Record) {
	t.Helper()
	if err := l.Produce(context.Background(), topic, recs); err != nil {
		t.Fatal(err)
	}
}

// readAll returns every record of a partition from its start.
func readAll(t *testing.T, l *Embedded, topic string, part int32) []Record {
	t.Helper()
	info, err := l.DescribeTopic(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	pi := info.Partitions[part]
	var out []Record
	for off := pi.Start; off < pi.End; {
		recs, err := l.Fetch(context.Background(), topic, part, off, FetchOptions{MaxBytes: 1 << 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		out = append(out, recs...)
		off = recs[len(recs)-1].Offset + 1
	}
	return out
}

func TestRetentionByAge(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	l := openTest(t, t.TempDir(), clock)
	defer l.Close()
	if err := l.CreateTopic(ctx, "t", TopicConfig{Partitions: 1, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	old := clock.now().Add(-2 * time.Hour)
	for i := 0; i < 60; i++ {
		mustProduce(t, l, "t", Record{Value: make([]byte, 100), Timestamp: old, Partition: 0})
	}
	for i := 0; i < 30; i++ {
		mustProduce(t, l, "t", Record{Value: make([]byte, 100), Timestamp: clock.now(), Partition: 0})
	}
	before := l.Stats().Partitions
	if err := l.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	info, _ := l.DescribeTopic(ctx, "t")
	p := info.Partitions[0]
	if p.Start == 0 || p.Start > 60 || p.End != 90 {
		t.Fatalf("after retention: %+v", p)
	}
	if _, err := l.Fetch(ctx, "t", 0, 0, FetchOptions{}); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("Fetch below the new start: %v", err)
	}
	if got := readAll(t, l, "t", 0); len(got) != int(90-p.Start) || got[0].Offset != p.Start {
		t.Fatalf("read %d records from %d", len(got), got[0].Offset)
	}
	if _, err := os.Stat(filepath.Join(l.topics["t"].dir, "0", segmentName(0, segmentSuffix))); !os.IsNotExist(err) {
		t.Fatalf("first segment still on disk: %v", err)
	}
	after := l.Stats().Partitions
	t.Logf("segments %d -> %d, bytes %d -> %d", before[len(before)-1].Segments, after[len(after)-1].Segments, before[len(before)-1].Bytes, after[len(after)-1].Bytes)
}

func TestRetentionBySize(t *testing.T) {
	ctx := context.Background()
	l := openTest(t, t.TempDir(), nil)
	defer l.Close()
	if err := l.CreateTopic(ctx, "t", TopicConfig{Partitions: 1, RetentionBytes: 3000}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		mustProduce(t, l, "t", Record{Value: make([]byte, 100), Partition: 0})
	}
	if err := l.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	info, _ := l.DescribeTopic(ctx, "t")
	p := info.Partitions[0]
	if p.Bytes < 3000 || p.Bytes > 3000+1024 || p.End != 100 {
		t.Fatalf("after size retention: %+v", p)
	}
}

func TestCompaction(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	dir := t.TempDir()
	l := openTest(t, dir, clock)
	if err := l.CreateTopic(ctx, "c", TopicConfig{Partitions: 1, Cleanup: CleanupCompact, DeleteRetention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i < 200; i++ {
		k := fmt.Sprintf("key-%d", i%10)
		r := Record{Key: []byte(k), Value: fmt.Appendf(nil, "v%d", i), Partition: 0}
		if i%10 == 3 && i > 100 {
			r.Value = nil // key-3 ends deleted
		}
		mustProduce(t, l, "c", r)
		want[k] = string(r.Value)
	}
	if err := l.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(l *Embedded, tombstones bool) {
		t.Helper()
		recs := readAll(t, l, "c", 0)
		p := l.topics["c"].parts[0]
		p.mu.Lock()
		activeBase := p.segs[len(p.segs)-1].base
		p.mu.Unlock()
		seen := map[string]int64{}
		prev := int64(-1)
		for _, r := range recs {
			if r.Offset <= prev {
				t.Fatalf("offsets not increasing: %d after %d", r.Offset, prev)
			}
			prev = r.Offset
			if r.Offset >= activeBase {
				continue
			}
			if _, dup := seen[string(r.Key)]; dup {
				t.Fatalf("key %s twice in closed segments (offsets %d, %d)", r.Key, seen[string(r.Key)], r.Offset)
			}
			seen[string(r.Key)] = r.Offset
			if r.Value == nil && !tombstones {
				t.Fatalf("tombstone for %s at %d survived DeleteRetention", r.Key, r.Offset)
			}
		}
		last := map[string]string{}
		for _, r := range recs {
			last[string(r.Key)] = string(r.Value)
		}
		for k, v := range want {
			if v == "" && !tombstones {
				continue
			}
			if last[k] != v {
				t.Fatalf("latest %s = %q, want %q", k, last[k], v)
			}
		}
		if recs[len(recs)-1].Offset != 199 {
			t.Fatalf("last offset %d, want 199", recs[len(recs)-1].Offset)
		}
	}
	check(l, true)
	clock.advance(2 * time.Hour)
	if err := l.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	check(l, false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTest(t, dir, clock)
	defer l.Close()
	if l.Recovery().Lost() {
		t.Fatalf("reopen after compaction reported loss: %+v", l.Recovery())
	}
	check(l, false)
}

func TestStatsAndLag(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	l := openTest(t, t.TempDir(), clock)
	defer l.Close()
	if err := l.CreateTopic(ctx, "t", TopicConfig{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	t0 := clock.now()
	for i := 0; i < 10; i++ {
		mustProduce(t, l, "t", Record{Value: []byte("x"), Timestamp: t0.Add(time.Duration(i) * time.Second), Partition: 0})
	}
	clock.advance(20 * time.Second)
	if err := l.CommitOffsets(ctx, "g", "t", map[int32]int64{0: 4}); err != nil {
		t.Fatal(err)
	}
	lags, err := l.GroupLag(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if len(lags) != 2 {
		t.Fatalf("lags = %+v", lags)
	}
	if l0 := lags[0]; l0.Records != 6 || l0.Committed != 4 || l0.Seconds != 16 {
		t.Fatalf("partition 0 lag = %+v, want 6 records, 16 s", l0)
	}
	if l1 := lags[1]; l1.Records != 0 || l1.Seconds != 0 || l1.Committed != -1 {
		t.Fatalf("partition 1 lag = %+v", l1)
	}
	groups, _ := l.ListGroups(ctx)
	if len(groups) != 1 || groups[0] != "g" {
		t.Fatalf("groups = %v", groups)
	}
	st := l.Stats()
	var p0 PartitionStats
	for _, p := range st.Partitions {
		if p.Topic == "t" && p.Partition == 0 {
			p0 = p
		}
	}
	if p0.End != 10 || p0.AppendedRecords != 10 || p0.Syncs == 0 || p0.Bytes == 0 || p0.LastAppend.IsZero() {
		t.Fatalf("stats = %+v", p0)
	}
	if err := l.DeleteGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if groups, _ := l.ListGroups(ctx); len(groups) != 0 {
		t.Fatalf("groups after delete = %v", groups)
	}
}

// TestCleanupConcurrent runs compaction and retention in a loop while a
// producer appends and a consumer tails: the tail sees every record, in
// order, and nothing blocks.
func TestCleanupConcurrent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := openTest(t, t.TempDir(), nil)
	defer l.Close()
	if err := l.CreateTopic(ctx, "c", TopicConfig{Partitions: 1, Cleanup: CleanupCompact, DeleteRetention: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	if err := l.CreateTopic(ctx, "d", TopicConfig{Partitions: 1, RetentionBytes: 4096}); err != nil {
		t.Fatal(err)
	}
	const n = 1500
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := l.Cleanup(ctx); err != nil && ctx.Err() == nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	tailErr := make(chan error, 2)
	for _, topic := range []string{"c", "d"} {
		go func() {
			off := int64(0)
			for off < n {
				recs, err := l.Fetch(ctx, topic, 0, off, FetchOptions{MaxWait: time.Second})
				if errors.Is(err, ErrOffsetOutOfRange) && topic == "d" {
					info, _ := l.DescribeTopic(ctx, topic)
					off = info.Partitions[0].Start
					continue
				}
				if err != nil {
					tailErr <- err
					return
				}
				for _, r := range recs {
					if r.Offset < off || (topic == "c" && string(r.Value) != fmt.Sprint(r.Offset) && r.Value != nil) {
						tailErr <- fmt.Errorf("%s: record %d = %q after %d", topic, r.Offset, r.Value, off)
						return
					}
					off = r.Offset + 1
				}
			}
			tailErr <- nil
		}()
	}
	for i := 0; i < n; i++ {
		for _, topic := range []string{"c", "d"} {
			rec := Record{Key: fmt.Appendf(nil, "k%d", i%20), Value: fmt.Appendf(nil, "%d", i), Partition: 0}
			if i%7 == 0 {
				rec.Value = nil
			}
			mustProduce(t, l, topic, rec)
		}
	}
	for i := 0; i < 2; i++ {
		if err := <-tailErr; err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	<-done
}

// TestMergeLeftoverAfterCrash simulates a crash between a merge's rename
// and the removal of its other inputs: Open drops the covered leftover
// without reporting loss, and the content is unchanged.
func TestMergeLeftoverAfterCrash(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := openTest(t, dir, nil)
	if err := l.CreateTopic(ctx, "c", TopicConfig{Partitions: 1, Cleanup: CleanupCompact}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 120; i++ {
		mustProduce(t, l, "c", Record{Key: fmt.Appendf(nil, "k%d", i), Value: make([]byte, 60), Partition: 0})
	}
	pdir := filepath.Join(l.topics["c"].dir, "0")
	saved := map[string][]byte{}
	ents, _ := os.ReadDir(pdir)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(pdir, e.Name()))
		saved[e.Name()] = b
	}
	for i := 0; i < 60; i++ { // supersede the first half of the keys
		mustProduce(t, l, "c", Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("new"), Partition: 0})
	}
	before := len(l.topics["c"].parts[0].segs)
	if err := l.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	after := len(l.topics["c"].parts[0].segs)
	if after >= before {
		t.Fatalf("no merge happened: %d -> %d segments", before, after)
	}
	want := readAll(t, l, "c", 0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	restored := 0
	for name, b := range saved {
		if _, err := os.Stat(filepath.Join(pdir, name)); os.IsNotExist(err) && filepath.Ext(name) == segmentSuffix {
			if err := os.WriteFile(filepath.Join(pdir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
			restored++
		}
	}
	if restored == 0 {
		t.Fatal("no merged-away segment to restore")
	}
	l = openTest(t, dir, nil)
	defer l.Close()
	if l.Recovery().Lost() {
		t.Fatalf("leftover reported as loss: %+v", l.Recovery())
	}
	got := readAll(t, l, "c", 0)
	if len(got) != len(want) {
		t.Fatalf("after reopen %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Offset != want[i].Offset || string(got[i].Value) != string(want[i].Value) {
			t.Fatalf("record %d = %d %q, want %d %q", i, got[i].Offset, got[i].Value, want[i].Offset, want[i].Value)
		}
	}
	t.Logf("segments %d -> %d, restored %d leftovers", before, after, restored)
}
