package log

import (
	"context"
	"errors"
	"sort"
	"time"
)

// PartitionStats describes one partition for metrics.
type PartitionStats struct {
	Topic     string
	Partition int32
	// Start is the first offset held; End the offset after the last durable
	// record.
	Start, End int64
	// Bytes is the size of the partition's segments on disk.
	Bytes int64
	// Segments is the number of segment files.
	Segments int
	// LastAppend is the wall time of the last durable append since Open
	// (zero if none).
	LastAppend time.Time
	// Counters since Open: records, batches and bytes appended, and fsyncs
	// of segment data.
	AppendedRecords, AppendedBatches, AppendedBytes, Syncs uint64
	// Lost are the offset ranges the partition lost to damage, sorted.
	Lost []LostRange
	// WriteError is the last failed write or sync while writes fail (a
	// *WriteError; nil once one succeeds); appends wait meanwhile.
	// WriteFailingSince is when the failing began; WriteFailures counts
	// failed attempts since Open.
	WriteError        error
	WriteFailingSince time.Time
	WriteFailures     uint64
}

// Stats is a snapshot of every partition of the log, for the wiring
// package's metrics adapter.
type Stats struct {
	// Partitions are sorted by topic, then partition.
	Partitions []PartitionStats
}

// Stats returns a snapshot of every partition's offsets, size and append
// counters. It does no I/O.
func (l *Embedded) Stats() Stats {
	l.mu.RLock()
	topics := make([]*topic, 0, len(l.topics))
	for _, t := range l.topics {
		topics = append(topics, t)
	}
	l.mu.RUnlock()
	sort.Slice(topics, func(i, j int) bool { return topics[i].name < topics[j].name })
	var st Stats
	for _, t := range topics {
		for _, p := range t.parts {
			st.Partitions = append(st.Partitions, p.snapshot())
		}
	}
	return st
}

func (p *partition) snapshot() PartitionStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	start, end := p.boundsLocked()
	ps := PartitionStats{
		Topic: p.topic, Partition: p.id, Start: start, End: end, Segments: len(p.segs),
		LastAppend: p.lastAppend, AppendedRecords: p.stats.records, AppendedBatches: p.stats.batches,
		AppendedBytes: p.stats.bytes, Syncs: p.stats.syncs, Lost: p.lost, WriteFailures: p.failures,
	}
	if p.failing != nil {
		ps.WriteError, ps.WriteFailingSince = p.failing, p.failSince
	}
	for _, s := range p.segs {
		ps.Bytes += s.size
	}
	return ps
}

// PartitionLag is how far a consumer group is behind in one partition.
type PartitionLag struct {
	Topic     string
	Partition int32
	// Committed is the group's next offset to read; -1 if it has committed
	// nothing for this partition (lag is then counted from Start).
	Committed int64
	Start     int64
	End       int64
	// Records is the number of offsets between the group's position and
	// End (compacted topics may hold fewer records than that).
	Records int64
	// Seconds is now minus the timestamp of the first record the group has
	// not consumed; 0 when it is caught up.
	Seconds float64
}

// GroupLag returns the lag of a group in every partition of every topic it
// has committed offsets for, sorted by topic and partition. Lag in seconds
// reads one record per lagging partition.
func (l *Embedded) GroupLag(ctx context.Context, group string) ([]PartitionLag, error) {
	var out []PartitionLag
	for _, name := range l.GroupTopics(group) {
		lags, err := l.TopicLag(ctx, group, name)
		if err != nil {
			return nil, err
		}
		out = append(out, lags...)
	}
	return out, nil
}

// TopicLag returns a group's lag in every partition of one topic.
func (l *Embedded) TopicLag(ctx context.Context, group, topicName string) ([]PartitionLag, error) {
	t, err := l.lookup(topicName)
	if err != nil {
		return nil, err
	}
	committed, err := l.CommittedOffsets(ctx, group, topicName)
	if err != nil {
		return nil, err
	}
	now := l.opts.now()
	out := make([]PartitionLag, 0, len(t.parts))
	for _, p := range t.parts {
		lag := PartitionLag{Topic: topicName, Partition: p.id, Committed: -1}
		p.mu.Lock()
		lag.Start, lag.End = p.boundsLocked()
		p.mu.Unlock()
		pos := lag.Start
		if c, ok := committed[p.id]; ok {
			lag.Committed = c
			pos = max(c, lag.Start)
		}
		lag.Records = max(lag.End-pos, 0)
		if lag.Records > 0 {
			recs, err := p.fetch(ctx, pos, FetchOptions{MaxBytes: 1})
			if err != nil && !errors.Is(err, ErrDataLost) { // lost: no age to tell
				return nil, err
			}
			if len(recs) > 0 {
				lag.Seconds = max(now.Sub(recs[0].Timestamp).Seconds(), 0)
			}
		}
		out = append(out, lag)
	}
	return out, nil
}
