package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/log/kafka"
	"github.com/cdcd-dev/cdcd/log/kafka/kafkatest"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
)

// emitterOn is the daemon's emitter over lg, which holds the internal
// topics and p.public.<table>.
func emitterOn(tb testing.TB, lg log.Log, table string, partitions int32) *emitter {
	tb.Helper()
	ctx := tb.Context()
	for _, topic := range []string{TopicSchemas, TopicState} {
		if err := ensureTopic(ctx, lg, topic, log.TopicConfig{Partitions: 1}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := ensureTopic(ctx, lg, "p.public."+table, log.TopicConfig{Partitions: partitions}); err != nil {
		tb.Fatal(err)
	}
	st, err := openStateStore(ctx, lg)
	if err != nil {
		tb.Fatal(err)
	}
	reg, err := schema.OpenRegistry(ctx, schemaStore{lg})
	if err != nil {
		tb.Fatal(err)
	}
	return &emitter{lg: lg, reg: reg, state: st, pipeline: "p", db: "db", connector: "postgresql",
		topicOf: func(ns, t string) string { return "p." + ns + "." + t }, partitions: partitions, logger: slog.New(slog.DiscardHandler),
		codecs: map[*schema.Table]*tableCodec{}, last: map[string][]source.Position{}, paused: map[string]*pauseState{},
		free: make(chan *batchRecords, 2), pipe: source.Pipeline{Depth: 4}}
}

func openKafka(tb testing.TB, brokers []string, txnID string) *kafka.Log {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lg, err := kafka.Open(ctx, kafka.Options{Brokers: brokers, TransactionalID: txnID}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { lg.Close() })
	return lg
}

// TestEmitterResumesOnKafka: a source restarted on the Kafka log resumes
// exactly after the last committed transaction. The crashed instance left
// an aborted transaction and one it never ended (with changes the log must
// not count as stored); the database re-sends from an older confirmed
// position; every change lands once.
func TestEmitterResumesOnKafka(t *testing.T) {
	brokers, _ := kafkatest.Brokers(t)
	ctx := t.Context()
	const topic, parts = "p.public.t", 4
	tbl := &schema.Table{Namespace: "public", Name: "t", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64}, {Name: "body", Kind: schema.String, Nullable: true}}, Key: []int{0}}
	changes := func(from, to int) []source.Change {
		var out []source.Change
		for i := from; i < to; i++ {
			id := int64(i % 40)
			out = append(out, source.Change{Table: tbl, Op: source.OpUpdate, Before: []any{id, nil}, After: []any{id, fmt.Sprint("v", i)},
				Pos: pgpos.New(1000, uint32(i)), LSN: 1000, TxID: 7, CommitTime: time.Now()})
		}
		return out
	}
	lg1 := openKafka(t, brokers, "cdcd-p")
	e1 := emitterOn(t, lg1, "t", parts)
	for _, b := range [][2]int{{0, 60}, {60, 100}} {
		if err := e1.Emit(ctx, changes(b[0], b[1])); err != nil {
			t.Fatal(err)
		}
	}
	lg1.Close()
	// What the crashed instance left: an aborted transaction of changes
	// 100-129 and an open one of 130-149, records as the emitter writes
	// them (taken from a throwaway emitter's encoding).
	crashed, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("cdcd-p"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer crashed.Close()
	for _, b := range [][2]int{{100, 130}, {130, 150}} {
		if err := crashed.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		eb := &batchRecords{byTopic: map[string]*topicRecords{}}
		tc, err := e1.codec(ctx, tbl)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range changes(b[0], b[1]) {
			recs, err := e1.records(eb, tc, &c)
			if err != nil {
				t.Fatal(err)
			}
			r := recs[0]
			kr := &kgo.Record{Topic: topic, Partition: r.Partition, Key: r.Key, Value: r.Value}
			for _, h := range r.Headers {
				kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
			}
			crashed.Produce(ctx, kr, nil)
		}
		if err := crashed.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if b[0] == 100 {
			if err := crashed.EndTransaction(ctx, kgo.TryAbort); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The restart: opening fences the crashed producer (aborting its open
	// transaction); the database re-sends from change 50.
	lg2 := openKafka(t, brokers, "cdcd-p")
	e2 := emitterOn(t, lg2, "t", parts)
	for _, b := range [][2]int{{50, 120}, {120, 200}} {
		if err := e2.Emit(ctx, changes(b[0], b[1])); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[uint32]int{}
	info, err := lg2.DescribeTopic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range info.Partitions {
		prev := -1
		for off := p.Start; off < p.End; {
			recs, err := lg2.Fetch(ctx, topic, p.Partition, off, log.FetchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				break
			}
			for _, r := range recs {
				_, idx, err := pgpos.Parse(source.Position(r.Header(HeaderPosition)))
				if err != nil {
					t.Fatal(err)
				}
				if int(idx) <= prev {
					t.Fatalf("partition %d: change %d after %d", p.Partition, idx, prev)
				}
				prev = int(idx)
				seen[idx]++
			}
			off = recs[len(recs)-1].Offset + 1
		}
	}
	for i := uint32(0); i < 200; i++ {
		if seen[i] != 1 {
			t.Fatalf("change %d stored %d times, want once (all: %d changes)", i, seen[i], len(seen))
		}
	}
	if len(seen) != 200 {
		t.Fatalf("%d changes stored, want 200", len(seen))
	}
}
