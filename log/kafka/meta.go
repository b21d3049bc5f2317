package kafka

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcd-dev/cdcd/log"
)

// topicMeta is what the log knows of one topic: its ID and each
// partition's leader.
type topicMeta struct {
	id      [16]byte
	leaders []int32
	at      time.Time
	config  atomic.Pointer[log.TopicConfig] // read once, on demand
}

// idString is the topic ID as Kafka prints it (URL-safe base64, no padding).
func (t *topicMeta) idString() string {
	return base64.RawURLEncoding.EncodeToString(t.id[:])
}

// metaCache holds topics' metadata, refreshed when it is older than
// metaMaxAge or when a request finds it stale.
type metaCache struct {
	l      *Log
	mu     sync.Mutex
	topics map[string]*topicMeta
}

const metaMaxAge = 30 * time.Second

func (m *metaCache) forget(topic string) {
	m.mu.Lock()
	delete(m.topics, topic)
	m.mu.Unlock()
}

// get returns topic's metadata, from the cache unless refresh is set;
// log.ErrUnknownTopic if the cluster does not have it. A topic whose
// partitions have no leader yet (just created, or electing) is asked for
// again until ctx ends.
func (m *metaCache) get(ctx context.Context, topic string, refresh bool) (*topicMeta, error) {
	m.mu.Lock()
	tm := m.topics[topic]
	m.mu.Unlock()
	if tm != nil && !refresh && time.Since(tm.at) < metaMaxAge {
		return tm, nil
	}
	for attempt := 0; ; attempt++ {
		fresh, err := m.load(ctx, topic)
		if err == nil {
			if tm != nil && tm.id == fresh.id {
				fresh.config.Store(tm.config.Load())
			}
			m.mu.Lock()
			if m.topics == nil {
				m.topics = map[string]*topicMeta{}
			}
			m.topics[topic] = fresh
			m.mu.Unlock()
			return fresh, nil
		}
		if !retryable(err) || attempt >= 20 {
			return nil, err
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

// load asks the cluster for topic's metadata.
func (m *metaCache) load(ctx context.Context, topic string) (*topicMeta, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = &topic
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, m.l.cl)
	if err != nil {
		return nil, fmt.Errorf("kafka: metadata of %s: %w", topic, m.l.ctxErr(ctx, err))
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				return nil, fmt.Errorf("%w: %s", log.ErrUnknownTopic, topic)
			}
			return nil, fmt.Errorf("kafka: metadata of %s: %w", topic, err)
		}
		tm := &topicMeta{id: t.TopicID, leaders: make([]int32, len(t.Partitions)), at: time.Now()}
		for _, p := range t.Partitions {
			if p.Partition < 0 || int(p.Partition) >= len(tm.leaders) {
				return nil, fmt.Errorf("kafka: metadata of %s: partition %d of %d", topic, p.Partition, len(tm.leaders))
			}
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil && p.Leader < 0 {
				return nil, fmt.Errorf("kafka: %s/%d has no leader: %w", topic, p.Partition, err)
			}
			tm.leaders[p.Partition] = p.Leader
		}
		return tm, nil
	}
	return nil, fmt.Errorf("%w: %s", log.ErrUnknownTopic, topic)
}

// partition returns p's leader, or log.ErrUnknownPartition.
func (t *topicMeta) partition(topic string, p int32) (int32, error) {
	if p < 0 || int(p) >= len(t.leaders) {
		return 0, fmt.Errorf("%w: %s has %d partitions, not %d", log.ErrUnknownPartition, topic, len(t.leaders), p)
	}
	return t.leaders[p], nil
}

// listOffsets asks the leaders of a topic's n partitions for the offsets
// at ts (-2: start, -1: end; isolation 1 gives the last stable offset).
func (l *Log) listOffsets(ctx context.Context, topic string, n int32, ts int64, isolation int8) ([]int64, error) {
	out := make([]int64, n)
	for attempt := 0; ; attempt++ {
		err := l.listOffsetsOnce(ctx, topic, out, ts, isolation)
		if err == nil {
			return out, nil
		}
		if !retryable(err) || attempt >= 20 {
			return nil, err
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return nil, err
		}
		if _, err := l.meta.get(ctx, topic, true); err != nil {
			return nil, err
		}
	}
}

func (l *Log) listOffsetsOnce(ctx context.Context, topic string, out []int64, ts int64, isolation int8) error {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range out {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = int32(p)
		rp.Timestamp = ts
		rp.CurrentLeaderEpoch = -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	seen := 0
	for _, shard := range l.cl.RequestSharded(ctx, req) {
		if shard.Err != nil {
			return fmt.Errorf("kafka: list offsets of %s: %w", topic, l.ctxErr(ctx, shard.Err))
		}
		for _, t := range shard.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					if errors.Is(err, kerr.UnknownTopicOrPartition) {
						l.meta.forget(topic)
					}
					return fmt.Errorf("kafka: list offsets of %s/%d: %w", topic, p.Partition, err)
				}
				if p.Partition >= 0 && int(p.Partition) < len(out) {
					out[p.Partition] = p.Offset
					seen++
				}
			}
		}
	}
	if seen != len(out) {
		return fmt.Errorf("kafka: list offsets of %s: %d of %d partitions answered: %w", topic, seen, len(out), kerr.UnknownTopicOrPartition)
	}
	return nil
}

// retryable: errors a request may meet while the cluster moves leaders,
// starts or is briefly overloaded; asking again (after fresh metadata)
// succeeds.
func retryable(err error) bool {
	for _, final := range []error{log.ErrUnknownTopic, log.ErrUnknownPartition, log.ErrOffsetOutOfRange,
		log.ErrClosed, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, final) {
			return false
		}
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable || errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID) ||
			errors.Is(err, kerr.NotLeaderForPartition) || errors.Is(err, kerr.FencedLeaderEpoch) ||
			errors.Is(err, kerr.UnknownLeaderEpoch) || errors.Is(err, kerr.LeaderNotAvailable)
	}
	return true // transport errors: the broker went away or timed out
}

func backoff(attempt int) time.Duration {
	return min(20*time.Millisecond<<min(attempt, 6), time.Second)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
