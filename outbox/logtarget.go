package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// LogTarget appends events to topics of the log (the embedded log, or
// Kafka through log/kafka): the topic the route names, keyed by the
// aggregate id and placed by Kafka's default partitioner on the key, so
// one aggregate's events stay in one partition, in source order.
//
// Exactly once: each record carries its source position (header
// cdcd.pos), and an event at or before the newest position already in
// its partition is dropped — what the source re-sends after a restart.
type LogTarget struct {
	lg    log.Log
	topic log.TopicConfig
	stats TargetStats

	// parts and last are per topic: its partition count, and the newest
	// position stored in each partition.
	parts map[string]int32
	last  map[string][]source.Position
}

var _ Target = (*LogTarget)(nil)

// NewLogTarget returns a target appending to lg; topics it creates get cfg.
func NewLogTarget(lg log.Log, cfg log.TopicConfig) *LogTarget {
	return &LogTarget{lg: lg, topic: cfg, parts: map[string]int32{}, last: map[string][]source.Position{}}
}

// Name is "log".
func (t *LogTarget) Name() string { return "log" }

// Stats returns the target's counters.
func (t *LogTarget) Stats() *TargetStats { return &t.stats }

// Deliver appends msgs, returning once they are durable.
func (t *LogTarget) Deliver(ctx context.Context, msgs []Message) error {
	var order []*topicBatch
	byTopic := map[string]*topicBatch{}
	for i := range msgs {
		m := &msgs[i]
		tb := byTopic[m.Topic]
		if tb == nil {
			n, err := t.open(ctx, m.Topic)
			if err != nil {
				return err
			}
			tb = &topicBatch{topic: m.Topic, newest: make([]source.Position, n)}
			byTopic[m.Topic] = tb
			order = append(order, tb)
		}
		p := log.PartitionFor(m.Key, int32(len(tb.newest)))
		if last := t.last[m.Topic][p]; last != nil && m.Pos.Compare(last) <= 0 || tb.newest[p] != nil && m.Pos.Compare(tb.newest[p]) <= 0 {
			t.stats.Duplicates.Add(1)
			continue
		}
		tb.newest[p] = m.Pos
		tb.recs = append(tb.recs, log.Record{Key: m.Key, Value: m.Value, Headers: m.Headers, Timestamp: m.Time, Partition: p})
	}
	t.stats.InFlight.Store(int64(len(msgs)))
	defer t.stats.InFlight.Store(0)
	if err := t.produce(ctx, order); err != nil {
		msg := err.Error()
		t.stats.LastError.Store(&msg)
		return err
	}
	for _, tb := range order {
		t.stats.Delivered.Add(int64(len(tb.recs)))
		for p, pos := range tb.newest {
			if pos != nil {
				t.last[tb.topic][p] = pos
			}
		}
	}
	return nil
}

// topicBatch is one Deliver's records of a topic.
type topicBatch struct {
	topic  string
	recs   []log.Record
	newest []source.Position // per partition, the newest position in recs
}

// produce appends each topic's records: all handed to the log before
// waiting, where it can, so one sync covers every topic.
func (t *LogTarget) produce(ctx context.Context, order []*topicBatch) error {
	ap, async := t.lg.(log.AsyncProducer)
	var waits []func(context.Context) error
	for _, tb := range order {
		if len(tb.recs) == 0 {
			continue
		}
		if !async {
			if err := t.lg.Produce(ctx, tb.topic, tb.recs); err != nil {
				return fmt.Errorf("append to %s: %w", tb.topic, err)
			}
			continue
		}
		wait, err := ap.StartProduce(ctx, tb.topic, tb.recs)
		if err != nil {
			return fmt.Errorf("append to %s: %w", tb.topic, err)
		}
		waits = append(waits, wait)
	}
	for _, w := range waits {
		if err := w(ctx); err != nil {
			return fmt.Errorf("append: %w", err)
		}
	}
	return nil
}

// open returns topic's partition count, creating the topic on first use
// and reading the newest position stored in each partition.
func (t *LogTarget) open(ctx context.Context, topic string) (int32, error) {
	if n, ok := t.parts[topic]; ok {
		return n, nil
	}
	if err := t.lg.CreateTopic(ctx, topic, t.topic); err != nil && !errors.Is(err, log.ErrTopicExists) {
		return 0, fmt.Errorf("create topic %s: %w", topic, err)
	}
	info, err := t.lg.DescribeTopic(ctx, topic)
	if err != nil {
		return 0, err
	}
	last := make([]source.Position, len(info.Partitions))
	for _, p := range info.Partitions {
		rec, ok, err := log.ReadLast(ctx, t.lg, topic, p)
		if err != nil {
			return 0, fmt.Errorf("read the last record of %s/%d: %w", topic, p.Partition, err)
		}
		if ok {
			last[p.Partition] = source.Position(rec.Header(schema.HeaderPosition))
		}
	}
	t.parts[topic], t.last[topic] = int32(len(info.Partitions)), last
	return int32(len(info.Partitions)), nil
}
