package kafka

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/log/kafka/kafkatest"
	"github.com/cdcd-dev/cdcd/log/logtest"
)

// testBrokers: see kafkatest.Brokers.
func testBrokers(t *testing.T, opts ...kfake.Opt) ([]string, *kfake.Cluster) {
	t.Helper()
	return kafkatest.Brokers(t, opts...)
}

func openLog(t *testing.T, opts Options) *Log {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := Open(ctx, opts, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestContract runs the log contract suite, unchanged, on Kafka.
func TestContract(t *testing.T) {
	brokers, _ := testBrokers(t)
	logtest.Run(t, func(t *testing.T) log.Log { return openLog(t, Options{Brokers: brokers}) })
}

// TestPlacementAsKafka: a key lands where Kafka's own partitioner (kgo's
// murmur2, Kafka-compatible) puts it, and a plain Kafka consumer reads
// back the very bytes, headers and timestamps cdcd wrote.
func TestPlacementAsKafka(t *testing.T) {
	brokers, _ := testBrokers(t)
	l := openLog(t, Options{Brokers: brokers})
	ctx := ctxT(t)
	const parts = 7
	mine, theirs := newTopic(t, l, "mine", parts), newTopic(t, l, "theirs", parts)
	var recs []log.Record
	for i := 0; i < 300; i++ {
		recs = append(recs, log.Record{Key: fmt.Appendf(nil, "\x00\x00\x00\x00\x07key-%d", i), Value: fmt.Appendf(nil, "v%d", i),
			Headers: []log.Header{{Key: "cdcd.pos", Value: []byte{byte(i)}}, {Key: "empty", Value: []byte{}}}, Partition: -1})
	}
	if err := l.Produce(ctx, mine, recs); err != nil {
		t.Fatal(err)
	}
	kcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{mine: allFrom(parts)}), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	for i := range recs {
		r := &kgo.Record{Topic: theirs, Key: recs[i].Key, Value: recs[i].Value}
		if err := kcl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if r.Partition != recs[i].Partition {
			t.Fatalf("key %q: Kafka's partitioner chose %d, cdcd %d", recs[i].Key, r.Partition, recs[i].Partition)
		}
	}
	seen := 0
	for seen < len(recs) {
		fs := kcl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var want *log.Record
			for i := range recs {
				if string(recs[i].Key) == string(r.Key) {
					want = &recs[i]
				}
			}
			if want == nil || string(r.Value) != string(want.Value) || r.Partition != want.Partition || r.Offset != want.Offset ||
				!r.Timestamp.Equal(want.Timestamp) || len(r.Headers) != 2 || r.Headers[0].Key != "cdcd.pos" ||
				string(r.Headers[0].Value) != string(want.Headers[0].Value) || r.Headers[1].Value == nil {
				t.Fatalf("consumer read %+v, cdcd wrote %+v", r, want)
			}
			seen++
		})
	}
}

func allFrom(n int32) map[int32]kgo.Offset {
	m := map[int32]kgo.Offset{}
	for p := int32(0); p < n; p++ {
		m[p] = kgo.NewOffset().AtStart()
	}
	return m
}

// TestLostOffsets: records Kafka removed before they were read (here by
// DeleteRecords) are a *log.DataLossError naming the range, which is also
// ErrOffsetOutOfRange; the topic ID is Kafka's.
func TestLostOffsets(t *testing.T) {
	brokers, _ := testBrokers(t)
	l := openLog(t, Options{Brokers: brokers})
	ctx := ctxT(t)
	topic := newTopic(t, l, "lossy", 2)
	if err := l.Produce(ctx, topic, posRecords(1, 0, 10)); err != nil {
		t.Fatal(err)
	}
	var os kadm.Offsets
	os.AddOffset(topic, 1, 6, -1)
	if resp, err := l.adm.DeleteRecords(ctx, os); err != nil || resp.Error() != nil {
		t.Fatalf("DeleteRecords: %v %v", err, resp.Error())
	}
	_, err := l.Fetch(ctx, topic, 1, 2, log.FetchOptions{})
	var lost *log.DataLossError
	if !errors.As(err, &lost) || lost.From != 2 || lost.To != 6 || lost.Partition != 1 || lost.Topic != topic {
		t.Fatalf("Fetch below the start: %v; want a DataLossError for [2, 6)", err)
	}
	if !errors.Is(err, log.ErrDataLost) || !errors.Is(err, log.ErrOffsetOutOfRange) {
		t.Fatalf("%v: want ErrDataLost and ErrOffsetOutOfRange", err)
	}
	if recs, err := l.Fetch(ctx, topic, 1, 6, log.FetchOptions{}); err != nil || len(recs) != 4 {
		t.Fatalf("Fetch at the new start = %d records, %v", len(recs), err)
	}
	info, err := l.DescribeTopic(ctx, topic)
	if err != nil || info.Partitions[1].Start != 6 || info.Partitions[1].End != 10 {
		t.Fatalf("DescribeTopic = %+v, %v", info, err)
	}
	tds, err := l.adm.ListTopics(ctx, topic)
	id := tds[topic].ID
	if err != nil || info.ID != base64.RawURLEncoding.EncodeToString(id[:]) {
		t.Fatalf("ID %q, Kafka's topic ID %v (%v)", info.ID, tds[topic].ID, err)
	}
}
