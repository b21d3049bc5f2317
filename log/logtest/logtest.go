// Package logtest is the contract suite for log.Log implementations. It
// runs unchanged against the embedded log and against log/kafka, so it uses
// nothing but the interface, and it tolerates what Kafka does differently
// where the contract allows (extra internal topics, timestamp precision of
// one millisecond).
package logtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/log"
)

// Opener returns a fresh, empty log for one test and arranges (with
// t.Cleanup) for it to be closed.
type Opener func(t *testing.T) log.Log

// Run runs every contract test as a subtest.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(*testing.T, log.Log)
	}{
		{"Topics", testTopics},
		{"TopicID", testTopicID},
		{"InvalidTopicConfig", testInvalidTopicConfig},
		{"ProduceFetchOrder", testProduceFetchOrder},
		{"KeyPlacement", testKeyPlacement},
		{"ExplicitPartition", testExplicitPartition},
		{"LongPollWakes", testLongPollWakes},
		{"LongPollTimeout", testLongPollTimeout},
		{"OffsetForTime", testOffsetForTime},
		{"GroupCommits", testGroupCommits},
		{"OffsetOutOfRange", testOffsetOutOfRange},
		{"TombstonesAndEmptyValues", testTombstones},
		{"HeadersRoundTrip", testHeaders},
		{"Timestamps", testTimestamps},
		{"MaxBytes", testMaxBytes},
		{"ConcurrentProducers", testConcurrentProducers},
		{"ContextCancellation", testContextCancel},
		{"UnknownTopicAndPartition", testUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

// topicName is a unique legal topic name for the test.
func topicName(t *testing.T, suffix string) string {
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return fmt.Sprintf("%s.%s.%d", name, suffix, rand.IntN(1_000_000))
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func create(t *testing.T, l log.Log, name string, partitions int32) {
	t.Helper()
	if err := l.CreateTopic(ctxFor(t), name, log.TopicConfig{Partitions: partitions}); err != nil {
		t.Fatalf("CreateTopic(%s): %v", name, err)
	}
}

// fetchAll reads a partition from offset to its end.
func fetchAll(t *testing.T, l log.Log, topic string, partition int32, from int64) []log.Record {
	t.Helper()
	ctx := ctxFor(t)
	info, err := l.DescribeTopic(ctx, topic)
	if err != nil {
		t.Fatalf("DescribeTopic: %v", err)
	}
	end := info.Partitions[partition].End
	var out []log.Record
	for off := from; off < end; {
		recs, err := l.Fetch(ctx, topic, partition, off, log.FetchOptions{MaxWait: time.Second})
		if err != nil {
			t.Fatalf("Fetch(%s/%d@%d): %v", topic, partition, off, err)
		}
		if len(recs) == 0 {
			t.Fatalf("Fetch(%s/%d@%d) returned nothing before end %d", topic, partition, off, end)
		}
		out = append(out, recs...)
		off = recs[len(recs)-1].Offset + 1
	}
	return out
}

func testTopics(t *testing.T, l log.Log) {
	ctx := ctxFor(t)
	a, b := topicName(t, "a"), topicName(t, "b")
	create(t, l, b, 3)
	create(t, l, a, 1)
	if err := l.CreateTopic(ctx, a, log.TopicConfig{Partitions: 1}); !errors.Is(err, log.ErrTopicExists) {
		t.Fatalf("second CreateTopic: got %v, want ErrTopicExists", err)
	}
	info, err := l.DescribeTopic(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != b || info.Config.Partitions != 3 || len(info.Partitions) != 3 {
		t.Fatalf("DescribeTopic = %+v", info)
	}
	for i, p := range info.Partitions {
		if p.Partition != int32(i) || p.Start != 0 || p.End != 0 {
			t.Fatalf("partition %d = %+v, want empty", i, p)
		}
	}
	names, err := l.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !containsAll(names, a, b) || !isSorted(names) {
		t.Fatalf("ListTopics = %v, want sorted and containing %s, %s", names, a, b)
	}
	if err := l.DeleteTopic(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := l.DescribeTopic(ctx, a); !errors.Is(err, log.ErrUnknownTopic) {
		t.Fatalf("DescribeTopic after delete: %v", err)
	}
	if err := l.DeleteTopic(ctx, a); !errors.Is(err, log.ErrUnknownTopic) {
		t.Fatalf("second DeleteTopic: %v", err)
	}
	names, _ = l.ListTopics(ctx)
	if containsAll(names, a) {
		t.Fatalf("ListTopics after delete still has %s: %v", a, names)
	}
	// A re-created topic starts empty.
	recreate(t, l, a)
	produce(t, l, a, log.Record{Key: []byte("k"), Value: []byte("v"), Partition: 0})
	info, _ = l.DescribeTopic(ctx, a)
	if info.Partitions[0].End != 1 {
		t.Fatalf("End after one record = %d", info.Partitions[0].End)
	}
}

// testTopicID: every topic has an ID, distinct from other topics', and a
// topic deleted and created again has a new one.
func testTopicID(t *testing.T, l log.Log) {
	ctx := ctxFor(t)
	a, b := topicName(t, "a"), topicName(t, "b")
	create(t, l, a, 1)
	create(t, l, b, 1)
	ia, err := l.DescribeTopic(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := l.DescribeTopic(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if ia.ID == "" || ia.ID == ib.ID {
		t.Fatalf("IDs %q and %q: want two different, non-empty identities", ia.ID, ib.ID)
	}
	if again, _ := l.DescribeTopic(ctx, a); again.ID != ia.ID {
		t.Fatalf("ID changed between two DescribeTopic calls: %q then %q", ia.ID, again.ID)
	}
	if err := l.DeleteTopic(ctx, a); err != nil {
		t.Fatal(err)
	}
	recreate(t, l, a)
	ia2, err := l.DescribeTopic(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if ia2.ID == "" || ia2.ID == ia.ID {
		t.Fatalf("re-created topic's ID = %q, want a new one (was %q)", ia2.ID, ia.ID)
	}
}

// recreate creates a deleted topic again (one partition). Kafka deletes
// asynchronously, so creation may report the topic as existing for a
// moment.
func recreate(t *testing.T, l log.Log, name string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := l.CreateTopic(ctxFor(t), name, log.TopicConfig{Partitions: 1})
		if err == nil {
			return
		}
		if !errors.Is(err, log.ErrTopicExists) || time.Now().After(deadline) {
			t.Fatalf("re-create %s: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func testInvalidTopicConfig(t *testing.T, l log.Log) {
	if err := l.CreateTopic(ctxFor(t), topicName(t, "zero"), log.TopicConfig{Partitions: 0}); err == nil {
		t.Fatal("CreateTopic with 0 partitions succeeded")
	}
}

func produce(t *testing.T, l log.Log, topic string, recs ...log.Record) []log.Record {
	t.Helper()
	if err := l.Produce(ctxFor(t), topic, recs); err != nil {
		t.Fatalf("Produce(%s): %v", topic, err)
	}
	return recs
}

func testProduceFetchOrder(t *testing.T, l log.Log) {
	topic := topicName(t, "t")
	create(t, l, topic, 4)
	const calls, per = 20, 25
	want := map[int32][]string{}
	for c := 0; c < calls; c++ {
		recs := make([]log.Record, per)
		for i := range recs {
			recs[i] = log.Record{Key: fmt.Appendf(nil, "key-%d", i%7), Value: fmt.Appendf(nil, "v-%d-%d", c, i), Partition: -1}
		}
		produce(t, l, topic, recs...)
		for _, r := range recs {
			want[r.Partition] = append(want[r.Partition], string(r.Value))
		}
	}
	for p := int32(0); p < 4; p++ {
		got := fetchAll(t, l, topic, p, 0)
		if len(got) != len(want[p]) {
			t.Fatalf("partition %d: %d records, want %d", p, len(got), len(want[p]))
		}
		for i, r := range got {
			if r.Offset != int64(i) || string(r.Value) != want[p][i] || r.Partition != p {
				t.Fatalf("partition %d record %d = offset %d partition %d %q, want offset %d %q", p, i, r.Offset, r.Partition, r.Value, i, want[p][i])
			}
		}
	}
}

func testKeyPlacement(t *testing.T, l log.Log) {
	topic := topicName(t, "t")
	create(t, l, topic, 5)
	var recs []log.Record
	for i := 0; i < 50; i++ {
		recs = append(recs, log.Record{Key: fmt.Appendf(nil, "customer-%d", i), Value: []byte("x"), Partition: -1})
	}
	produce(t, l, topic, recs...)
	for _, r := range recs {
		if want := log.PartitionFor(r.Key, 5); r.Partition != want {
			t.Fatalf("key %q placed in %d, PartitionFor says %d", r.Key, r.Partition, want)
		}
		got := fetchAll(t, l, topic, r.Partition, r.Offset)
		if !bytes.Equal(got[0].Key, r.Key) {
			t.Fatalf("key %q not at %d/%d (found %q)", r.Key, r.Partition, r.Offset, got[0].Key)
		}
	}
}

func testExplicitPartition(t *testing.T, l log.Log) {
	topic := topicName(t, "t")
	create(t, l, topic, 3)
	recs := produce(t, l, topic,
		log.Record{Key: []byte("a"), Value: []byte("1"), Partition: 2},
		log.Record{Key: []byte("a"), Value: []byte("2"), Partition: 1},
		log.Record{Value: []byte("3"), Partition: 2})
	if recs[0].Partition != 2 || recs[1].Partition != 1 || recs[2].Partition != 2 || recs[2].Offset != 1 {
		t.Fatalf("placement = %+v", recs)
	}
	if got := fetchAll(t, l, topic, 2, 0); len(got) != 2 || string(got[1].Value) != "3" {
		t.Fatalf("partition 2 = %+v", got)
	}
	err := l.Produce(ctxFor(t), topic, []log.Record{{Value: []byte("x"), Partition: 3}})
	if !errors.Is(err, log.ErrUnknownPartition) {
		t.Fatalf("Produce to partition 3 of 3: %v", err)
	}
}

func testLongPollWakes(t *testing.T, l log.Log) {
	topic := topicName(t, "t")
	create(t, l, topic, 1)
	type result struct {
		recs []log.Record
		err  error
		took time.Duration
	}
	ch := make(chan result, 1)
	go func() {
		start := time.Now()
		recs, err := l.Fetch(ctxFor(t), topic, 0, 0, log.FetchOptions{MaxWait: 20 * time.Second})
		ch <- result{recs, err, time.Since(start)}
	}()
	time.Sleep(100 * time.Millisecond)
	produce(t, l, topic, log.Record{Value: []byte("wake"), Partition: 0})
	select {
	case r := <-ch:
		if r.err != nil || len(r.recs) != 1 || string(r.recs[0].Value) != "wake" {
			t.Fatalf("long poll = %+v, %v", r.recs, r.err)
		}
		if r.took > 10*time.Second {
			t.Fatalf("long poll took %v", r.took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("long poll did not wake on new data")
	}
}

func testLongPollTimeout(t *testing.T, l log.Log) {
	topic := topicName(t, "t")
	create(t, l, topic, 1)
	start := time.Now()
	recs, err := l.Fetch(ctxFor(t), topic, 0, 0, log.FetchOptions{MaxWait: 300 * time.Millisecond})
	took := time.Since(start)
	if err != nil || len(recs) != 0 {
		t.Fatalf("Fetch on empty partition = %v, %v", recs, err)
	}
	if took < 250*time.Millisecond || took > 10*time.Second {
		t.Fatalf("MaxWait 300ms took %v", took)
	}
	start = time.Now()
	if recs, err := l.Fetch(ctxFor(t), topic, 0, 0, log.FetchOptions{}); err != nil || len(recs) != 0 {
		t.Fatalf("Fetch without MaxWait = %v, %v", recs, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Fetch without MaxWait took %v", took)
	}
}

func testOffsetForTime(t *testing.T, l log.Log) {
	ctx := ctxFor(t)
	topic := topicName(t, "t")
	create(t, l, topic, 1)
	t0 := time.UnixMilli(time.Now().Add(-time.Hour).UnixMilli())
	var recs []log.Record
	for i := 0; i < 10; i++ {
		recs = append(recs, log.Record{Value: fmt.Appendf(nil, "%d", i), Timestamp: t0.Add(time.Duration(i) * time.Second), Partition: 0})
	}
	produce(t, l, topic, recs[:5]...)
	produce(t, l, topic, recs[5:]...)
	cases := []struct {
		ts   time.Time
		want int64
	}{
		{t0.Add(-time.Minute), 0},
		{t0, 0},
		{t0.Add(time.Millisecond), 1},
		{t0.Add(3 * time.Second), 3},
		{t0.Add(5*time.Second - time.Millisecond), 5},
		{t0.Add(9 * time.Second), 9},
		{t0.Add(10 * time.Second), 10}, // after the last: the end offset
	}
	for _, c := range cases {
		got, err := l.OffsetForTime(ctx, topic, 0, c.ts)
		if err != nil || got != c.want {
			t.Errorf("OffsetForTime(t0%+v) = %d, %v; want %d", c.ts.Sub(t0), got, err, c.want)
		}
	}
}

func testGroupCommits(t *testing.T, l log.Log) {
	ctx := ctxFor(t)
	topic := topicName(t, "t")
	create(t, l, topic, 3)
	g1, g2 := topicName(t, "g1"), topicName(t, "g2")
	got, err := l.CommittedOffsets(ctx, g1, topic)
	if err != nil || len(got) != 0 {
		t.Fatalf("CommittedOffsets before any commit = %v, %v", got, err)
	}
	if err := l.CommitOffsets(ctx, g1, topic, map[int32]int64{0: 5, 2: 7}); err != nil {
		t.Fatal(err)
	}
	if err := l.CommitOffsets(ctx, g2, topic, map[int32]int64{1: 1}); err != nil {
		t.Fatal(err)
	}
	if err := l.CommitOffsets(ctx, g1, topic, map[int32]int64{2: 9}); err != nil {
		t.Fatal(err)
	}
	got, err = l.CommittedOffsets(ctx, g1, topic)
	if err != nil || !sameOffsets(got, map[int32]int64{0: 5, 2: 9}) {
		t.Fatalf("g1 offsets = %v, %v", got, err)
	}
	got, err = l.CommittedOffsets(ctx, g2, topic)
	if err != nil || !sameOffsets(got, map[int32]int64{1: 1}) {
		t.Fatalf("g2 offsets = %v, %v", got, err)
	}
}

func testOffsetOutOfRange(t *testing.T, l log.Log) {
	ctx := ctxFor(t)
	topic := topicName(t, "t")
	create(t, l, topic, 1)
	produce(t, l, topic, log.Record{Value: []byte("a"), Partition: 0}, log.Record{Value: []byte("b"), Partition: 0})
	if _, err := l.Fetch(ctx, topic, 0, 3, log.FetchOptions{}); !errors.Is(err, log.ErrOffsetOutOfRange) {
		t.Fatalf("Fetch past end: %v", err)
	}
	if _, err := l.Fetch(ctx, topic, 0, -1, log.FetchOptions{}); !errors.Is(err, log.ErrOffsetOutOfRange) {
		t.Fatalf("Fetch at -1: %v", err)
	}
	if recs, err := l.Fetch(ctx, topic, 0, 2, log.FetchOptions{}); err != nil || len(recs) != 0 {
		t.Fatalf("Fetch at end = %v, %v; want empty", recs, err)
	}
	if recs, err := l.Fetch(ctx, topic, 0, 1, log.FetchOptions{}); err != nil || len(recs) != 1 || string(recs[0].Value) != "b" {
		t.Fatalf("Fetch at 1 = %v, %v", recs, err)
	}
}

func testTombstones(t *testing.T, l log.Log) {
	topic := topicName(t, "t")
	create(t, l, topic, 1)
	produce(t, l, topic,
		log.Record{Key: []byte("k"), Value: nil, Partition: 0},
		log.Record{Key: []byte("k"), Value: []byte{}, Partition: 0},
		log.Record{Key: nil, Value: []byte("v"), Partition: 0},
		log.Record{Key: []byte{}, Value: []byte("v"), Partition: 0})
	got := fetchAll(t, l, topic, 0, 0)
	if len(got) != 4 {
		t.Fatalf("got %d records", len(got))
	}
	if got[0].Value != nil {
		t.Errorf("tombstone came back as %#v, want nil", got[0].Value)
	}
	if got[1].Value == nil || len(got[1].Value) != 0 {
		t.Errorf("empty value came back as %#v, want non-nil empty", got[1].Value)
	}
	if got[2].Key != nil {
		t.Errorf("nil key came back as %#v", got[2].Key)
	}
	if got[3].Key == nil || len(got[3].Key) != 0 {
		t.Errorf("empty key came back as %#v", got[3].Key)
	}
}

func testHeaders(t *testing.T, l log.Log) {
	topic := topicName(t, "t")
	create(t, l, topic, 1)
	hs := []log.Header{
		{Key: "source-position", Value: []byte{0, 0, 0, 1, 2, 3}},
		{Key: "tx", Value: []byte("42")},
		{Key: "tx", Value: []byte("dup")},
		{Key: "empty", Value: []byte{}},
		{Key: "null", Value: nil},
	}
	produce(t, l, topic,
		log.Record{Key: []byte("k"), Value: []byte("v"), Headers: hs, Partition: 0},
		log.Record{Key: []byte("k"), Value: []byte("v2"), Partition: 0})
	got := fetchAll(t, l, topic, 0, 0)
	if len(got[0].Headers) != len(hs) {
		t.Fatalf("headers = %+v", got[0].Headers)
	}
	for i, h := range hs {
		g := got[0].Headers[i]
		if g.Key != h.Key || !bytes.Equal(g.Value, h.Value) || (g.Value == nil) != (h.Value == nil) {
			t.Errorf("header %d = %q:%#v, want %q:%#v", i, g.Key, g.Value, h.Key, h.Value)
		}
	}
	if v := got[0].Header("tx"); string(v) != "42" {
		t.Errorf("Header(tx) = %q", v)
	}
	if len(got[1].Headers) != 0 {
		t.Errorf("record without headers came back with %+v", got[1].Headers)
	}
}

func testTimestamps(t *testing.T, l log.Log) {
	topic := topicName(t, "t")
	create(t, l, topic, 1)
	explicit := time.Date(2024, 3, 1, 12, 0, 0, 123_000_000, time.UTC)
	before := time.Now().Add(-time.Second)
	recs := produce(t, l, topic, log.Record{Value: []byte("a"), Timestamp: explicit, Partition: 0}, log.Record{Value: []byte("b"), Partition: 0})
	after := time.Now().Add(time.Second)
	if recs[1].Timestamp.Before(before) || recs[1].Timestamp.After(after) {
		t.Errorf("filled-in timestamp %v not near now", recs[1].Timestamp)
	}
	got := fetchAll(t, l, topic, 0, 0)
	if !got[0].Timestamp.Equal(explicit) {
		t.Errorf("explicit timestamp came back as %v, want %v", got[0].Timestamp, explicit)
	}
	if got[1].Timestamp.UnixMilli() != recs[1].Timestamp.UnixMilli() {
		t.Errorf("filled-in timestamp came back as %v, Produce said %v", got[1].Timestamp, recs[1].Timestamp)
	}
}

func testMaxBytes(t *testing.T, l log.Log) {
	topic := topicName(t, "t")
	create(t, l, topic, 1)
	big := bytes.Repeat([]byte("x"), 10_000)
	var recs []log.Record
	for i := 0; i < 20; i++ {
		recs = append(recs, log.Record{Value: big, Partition: 0})
	}
	produce(t, l, topic, recs...)
	got, err := l.Fetch(ctxFor(t), topic, 0, 0, log.FetchOptions{MaxBytes: 100})
	if err != nil || len(got) < 1 {
		t.Fatalf("Fetch with tiny MaxBytes = %d records, %v; want at least one", len(got), err)
	}
	got, err = l.Fetch(ctxFor(t), topic, 0, 0, log.FetchOptions{MaxBytes: 50_000})
	if err != nil || len(got) < 1 || len(got) >= 20 {
		t.Fatalf("Fetch with MaxBytes 50k = %d records, %v; want a part", len(got), err)
	}
	if all := fetchAll(t, l, topic, 0, 0); len(all) != 20 {
		t.Fatalf("fetched %d of 20", len(all))
	}
}

func testConcurrentProducers(t *testing.T, l log.Log) {
	topic := topicName(t, "t")
	create(t, l, topic, 2)
	const producers, calls = 8, 30
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for w := 0; w < producers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := 0; c < calls; c++ {
				recs := []log.Record{
					{Key: fmt.Appendf(nil, "w%d", w), Value: fmt.Appendf(nil, "%d", c), Partition: -1},
					{Key: fmt.Appendf(nil, "w%d", w), Value: fmt.Appendf(nil, "%d.b", c), Partition: -1},
				}
				if err := l.Produce(context.Background(), topic, recs); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	next := map[string]int{}
	half := map[string]bool{}
	total := 0
	for p := int32(0); p < 2; p++ {
		for _, r := range fetchAll(t, l, topic, p, 0) {
			total++
			k := string(r.Key)
			if half[k] {
				if want := fmt.Sprintf("%d.b", next[k]); string(r.Value) != want {
					t.Fatalf("key %s: got %q, want %q", k, r.Value, want)
				}
				half[k] = false
				next[k]++
			} else {
				if want := fmt.Sprint(next[k]); string(r.Value) != want {
					t.Fatalf("key %s: got %q, want %q (per-key order broken)", k, r.Value, want)
				}
				half[k] = true
			}
		}
	}
	if total != producers*calls*2 {
		t.Fatalf("read %d records, want %d", total, producers*calls*2)
	}
}

func testContextCancel(t *testing.T, l log.Log) {
	topic := topicName(t, "t")
	create(t, l, topic, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := l.Fetch(ctx, topic, 0, 0, log.FetchOptions{MaxWait: time.Minute})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Fetch returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Fetch ignored cancellation")
	}
	if err := l.Produce(ctx, topic, []log.Record{{Value: []byte("x"), Partition: 0}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Produce with cancelled ctx: %v", err)
	}
	if _, err := l.DescribeTopic(ctx, topic); !errors.Is(err, context.Canceled) {
		t.Fatalf("DescribeTopic with cancelled ctx: %v", err)
	}
}

func testUnknown(t *testing.T, l log.Log) {
	ctx := ctxFor(t)
	missing := topicName(t, "missing")
	if err := l.Produce(ctx, missing, []log.Record{{Value: []byte("x"), Partition: -1}}); !errors.Is(err, log.ErrUnknownTopic) {
		t.Errorf("Produce to unknown topic: %v", err)
	}
	if _, err := l.Fetch(ctx, missing, 0, 0, log.FetchOptions{}); !errors.Is(err, log.ErrUnknownTopic) {
		t.Errorf("Fetch from unknown topic: %v", err)
	}
	topic := topicName(t, "t")
	create(t, l, topic, 2)
	if _, err := l.Fetch(ctx, topic, 2, 0, log.FetchOptions{}); !errors.Is(err, log.ErrUnknownPartition) {
		t.Errorf("Fetch from partition 2 of 2: %v", err)
	}
	if _, err := l.OffsetForTime(ctx, topic, 5, time.Now()); !errors.Is(err, log.ErrUnknownPartition) {
		t.Errorf("OffsetForTime on partition 5 of 2: %v", err)
	}
}

func containsAll(names []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, n := range names {
			found = found || n == w
		}
		if !found {
			return false
		}
	}
	return true
}

func isSorted(s []string) bool {
	for i := 1; i < len(s); i++ {
		if s[i-1] > s[i] {
			return false
		}
	}
	return true
}

func sameOffsets(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}
