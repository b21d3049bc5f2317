package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcd-dev/cdcd/log"
)

var decompressor = kgo.DefaultDecompressor()

// maxAttempts bounds the retries of one call through leader moves and
// broker errors (with backoff up to 1s: about 20s).
const maxAttempts = 25

// Fetch returns committed records of one partition from offset on. Offsets
// without a readable record (transaction markers, aborted records) are
// stepped over, so the first record returned may be after offset.
func (l *Log) Fetch(ctx context.Context, topic string, partition int32, offset int64, opts log.FetchOptions) ([]log.Record, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, fmt.Errorf("%w: %s/%d: offset %d", log.ErrOffsetOutOfRange, topic, partition, offset)
	}
	maxBytes := opts.MaxBytes
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	deadline := time.Now().Add(opts.MaxWait)
	for attempt := 0; ; {
		recs, next, err := l.fetchOnce(ctx, topic, partition, offset, maxBytes, max(0, time.Until(deadline)), attempt > 0)
		switch {
		case err != nil && retryable(err) && attempt < maxAttempts:
			attempt++
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return nil, err
			}
			continue
		case err != nil:
			return nil, err
		case len(recs) > 0:
			return trim(recs, maxBytes), nil
		case next > offset: // only markers or aborted records: read on
			offset, attempt = next, 0
			continue
		}
		return []log.Record{}, nil
	}
}

// trim keeps the records whose sizes add up to at most maxBytes (at least
// one): Kafka returns whole batches, the contract a cap.
func trim(recs []log.Record, maxBytes int) []log.Record {
	size := 0
	for i := range recs {
		size += len(recs[i].Key) + len(recs[i].Value)
		for _, h := range recs[i].Headers {
			size += len(h.Key) + len(h.Value)
		}
		if i > 0 && size > maxBytes {
			return recs[:i]
		}
	}
	return recs
}

// fetchOnce sends one Fetch request to the partition's leader; next is
// where the following fetch starts.
func (l *Log) fetchOnce(ctx context.Context, topic string, partition int32, offset int64, maxBytes int, wait time.Duration, refresh bool) (_ []log.Record, next int64, _ error) {
	tm, err := l.meta.get(ctx, topic, refresh)
	if err != nil {
		return nil, 0, err
	}
	leader, err := tm.partition(topic, partition)
	if err != nil {
		return nil, 0, err
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(wait.Milliseconds())
	req.MinBytes = 1
	// Far above the partition's cap, so the partition's cap is what stops
	// the broker: kfake leaves out the aborted transactions of a partition
	// cut by the request's cap, and their records would pass as committed.
	req.MaxBytes = int32(min(maxBytes+64<<20, 1<<30))
	req.IsolationLevel = 1 // read_committed
	req.SessionEpoch = -1  // no fetch session
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, tm.id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, int32(maxBytes)
	rp.CurrentLeaderEpoch, rp.LogStartOffset, rp.LastFetchedEpoch = -1, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, l.cl.Broker(int(leader)))
	if err != nil {
		return nil, 0, fmt.Errorf("kafka: fetch %s/%d at %d: %w", topic, partition, offset, l.ctxErr(ctx, err))
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, 0, fmt.Errorf("kafka: fetch %s/%d at %d: %w", topic, partition, offset, err)
	}
	part := findPartition(resp, topic, tm.id, partition)
	if part == nil {
		return nil, 0, fmt.Errorf("kafka: fetch %s/%d at %d: no answer for the partition: %w", topic, partition, offset, kerr.UnknownTopicOrPartition)
	}
	switch err := kerr.ErrorForCode(part.ErrorCode); {
	case errors.Is(err, kerr.OffsetOutOfRange):
		return nil, 0, l.outOfRange(ctx, topic, partition, offset, len(tm.leaders))
	case err != nil:
		return nil, 0, fmt.Errorf("kafka: fetch %s/%d at %d: %w", topic, partition, offset, err)
	}
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		Offset: offset, IsolationLevel: kgo.ReadCommitted(), Topic: topic, Partition: partition,
	}, part, decompressor, nil)
	if fp.Err != nil && len(fp.Records) == 0 {
		return nil, 0, fmt.Errorf("%w: %s/%d at %d: %v", log.ErrCorrupt, topic, partition, offset, fp.Err)
	}
	out := make([]log.Record, len(fp.Records))
	for i, r := range fp.Records {
		out[i] = fromKgo(r)
	}
	return out, next, nil
}

func findPartition(resp *kmsg.FetchResponse, topic string, id [16]byte, p int32) *kmsg.FetchResponseTopicPartition {
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic != topic && (t.TopicID != id || id == [16]byte{}) {
			continue
		}
		for j := range t.Partitions {
			if t.Partitions[j].Partition == p {
				return &t.Partitions[j]
			}
		}
	}
	return nil
}

// outOfRange tells a fetch below the log start offset (the records are
// gone: a *log.DataLossError that is also ErrOffsetOutOfRange) from one
// past the end.
func (l *Log) outOfRange(ctx context.Context, topic string, partition int32, offset int64, n int) error {
	starts, err := l.listOffsets(ctx, topic, int32(n), -2, 0)
	if err != nil {
		return err
	}
	if start := starts[partition]; offset < start {
		return &lostError{log.DataLossError{Topic: topic, Partition: partition, From: offset, To: start,
			Reason: fmt.Sprintf("Kafka removed them before they were read (retention or DeleteRecords; the log now starts at %d)", start)}}
	}
	return fmt.Errorf("%w: %s/%d: offset %d", log.ErrOffsetOutOfRange, topic, partition, offset)
}

// lostError is a *log.DataLossError that also matches
// log.ErrOffsetOutOfRange, which is what the contract says a fetch below
// the start offset returns.
type lostError struct{ log.DataLossError }

func (e *lostError) Error() string { return e.DataLossError.Error() }

func (e *lostError) Unwrap() []error { return []error{&e.DataLossError, log.ErrOffsetOutOfRange} }

// fromKgo converts a fetched record.
func fromKgo(r *kgo.Record) log.Record {
	out := log.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Partition: r.Partition, Offset: r.Offset}
	if len(r.Headers) > 0 {
		out.Headers = make([]log.Header, len(r.Headers))
		for i, h := range r.Headers {
			out.Headers[i] = log.Header{Key: h.Key, Value: h.Value}
		}
	}
	return out
}

// OffsetForTime returns the first offset whose timestamp is at or after ts,
// or the end offset.
func (l *Log) OffsetForTime(ctx context.Context, topic string, partition int32, ts time.Time) (int64, error) {
	if err := l.check(ctx); err != nil {
		return 0, err
	}
	tm, err := l.meta.get(ctx, topic, false)
	if err != nil {
		return 0, err
	}
	if _, err := tm.partition(topic, partition); err != nil {
		return 0, err
	}
	n := int32(len(tm.leaders))
	offs, err := l.listOffsets(ctx, topic, n, max(0, ts.UnixMilli()), 0)
	if err != nil {
		return 0, err
	}
	if offs[partition] >= 0 {
		return offs[partition], nil
	}
	ends, err := l.listOffsets(ctx, topic, n, -1, 1)
	if err != nil {
		return 0, err
	}
	return ends[partition], nil
}

// LastRecord returns the newest record a reader gets from partition p (see
// log.LastReader): it reads back from the end in growing steps past
// transaction markers and aborted transactions.
func (l *Log) LastRecord(ctx context.Context, topic string, p log.PartitionInfo) (log.Record, bool, error) {
	for span := int64(4); ; span *= 8 {
		from := max(p.Start, p.End-span)
		var last *log.Record
		for off := from; off < p.End; {
			recs, err := l.Fetch(ctx, topic, p.Partition, off, log.FetchOptions{})
			if err != nil {
				return log.Record{}, false, err
			}
			if len(recs) == 0 {
				break
			}
			for i := range recs {
				if recs[i].Offset < p.End {
					last = &recs[i]
				}
			}
			off = recs[len(recs)-1].Offset + 1
		}
		if last != nil {
			return *last, true, nil
		}
		if from == p.Start {
			return log.Record{}, false, nil
		}
	}
}
