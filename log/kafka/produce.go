package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcd-dev/cdcd/log"
)

// Produce appends recs to topic and returns once they are acknowledged by
// all in-sync replicas (and, transactional, once their transaction
// committed), with Partition, Timestamp and Offset filled in.
func (l *Log) Produce(ctx context.Context, topic string, recs []log.Record) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	if l.txn != nil {
		krs, err := l.prepare(ctx, topic, recs, true)
		if err != nil {
			return err
		}
		wait, err := l.txn.enqueue(ctx, topic, krs)
		if err == nil {
			err = wait(ctx)
		}
		if err != nil {
			return err
		}
		for i := range recs {
			recs[i].Offset = krs[i].Offset
		}
		return nil
	}
	krs, err := l.prepare(ctx, topic, recs, false)
	if err != nil {
		return err
	}
	if err := l.cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		return produceError(ctx, topic, err)
	}
	for i := range recs {
		recs[i].Offset = krs[i].Offset
	}
	return nil
}

// StartProduce hands recs (copied) to the producer and returns a wait for
// their acknowledgement (see log.AsyncProducer).
func (l *Log) StartProduce(ctx context.Context, topic string, recs []log.Record) (func(context.Context) error, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	krs, err := l.prepare(ctx, topic, recs, true)
	if err != nil {
		return nil, err
	}
	if l.txn != nil {
		return l.txn.enqueue(ctx, topic, krs)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	wg.Add(len(krs))
	for _, k := range krs {
		l.cl.Produce(ctx, k, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				first = cmpOr(first, err)
				mu.Unlock()
			}
			wg.Done()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return func(wctx context.Context) error {
		select {
		case <-done:
		case <-wctx.Done():
			return wctx.Err()
		}
		if first != nil {
			return produceError(ctx, topic, first)
		}
		return nil
	}, nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// prepare places recs (partition by key where it is negative; the current
// time where the timestamp is zero, both written back) and converts them;
// with copyBytes the kgo records own copies of keys, values and headers.
func (l *Log) prepare(ctx context.Context, topic string, recs []log.Record, copyBytes bool) ([]*kgo.Record, error) {
	if reserved(topic) {
		return nil, fmt.Errorf("%w: %q is Kafka's own", log.ErrReservedTopic, topic)
	}
	tm, err := l.meta.get(ctx, topic, false)
	if err != nil {
		return nil, err
	}
	n := int32(len(tm.leaders))
	now := time.UnixMilli(time.Now().UnixMilli())
	var arena []byte
	if copyBytes {
		arena = make([]byte, 0, recordBytes(recs))
	}
	keep := func(b []byte) []byte {
		if !copyBytes || b == nil {
			return b
		}
		start := len(arena)
		arena = append(arena, b...)
		return arena[start:len(arena):len(arena)]
	}
	slab := make([]kgo.Record, len(recs))
	krs := make([]*kgo.Record, len(recs))
	for i := range recs {
		r := &recs[i]
		switch {
		case r.Partition < 0:
			r.Partition = log.PartitionFor(r.Key, n)
		case r.Partition >= n:
			return nil, fmt.Errorf("%w: %s has %d partitions, not %d", log.ErrUnknownPartition, topic, n, r.Partition)
		}
		if r.Timestamp.IsZero() {
			r.Timestamp = now
		}
		k := &slab[i]
		k.Topic, k.Partition, k.Timestamp = topic, r.Partition, r.Timestamp
		k.Key, k.Value = keep(r.Key), keep(r.Value)
		if len(r.Headers) > 0 {
			k.Headers = make([]kgo.RecordHeader, len(r.Headers))
			for j, h := range r.Headers {
				k.Headers[j] = kgo.RecordHeader{Key: h.Key, Value: keep(h.Value)}
			}
		}
		krs[i] = k
	}
	return krs, nil
}

// recordBytes is the size of recs' keys, values and header values.
func recordBytes(recs []log.Record) int {
	n := 0
	for i := range recs {
		n += len(recs[i].Key) + len(recs[i].Value)
		for _, h := range recs[i].Headers {
			n += len(h.Value)
		}
	}
	return n
}

// produceError maps a producer's error onto the contract's sentinels.
func produceError(ctx context.Context, topic string, err error) error {
	switch {
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return ctx.Err()
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return fmt.Errorf("%w: %s: %v", log.ErrUnknownTopic, topic, err)
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return fmt.Errorf("%w: %s: %v", log.ErrRecordTooLarge, topic, err)
	}
	return fmt.Errorf("kafka: produce to %s: %w", topic, err)
}
