package kafka

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/cdcd-dev/cdcd/log"
)

// The operator's view the daemon asks every log for: where it writes,
// per-partition counters, a group's lag.

// Dir names where the log lives: its brokers.
func (l *Log) Dir() string { return "kafka://" + strings.Join(l.opts.Brokers, ",") }

// Stats is empty: sizes, write failures and lost ranges are the brokers'
// (their own metrics say them); it does no I/O.
func (l *Log) Stats() log.Stats { return log.Stats{} }

// TopicLag returns a group's lag in every partition of topic, as the
// embedded log's TopicLag: records between the group's committed offset
// (or the start) and the last stable offset, and the age of the first one.
func (l *Log) TopicLag(ctx context.Context, group, topic string) ([]log.PartitionLag, error) {
	info, err := l.DescribeTopic(ctx, topic)
	if err != nil {
		return nil, err
	}
	committed, err := l.CommittedOffsets(ctx, group, topic)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]log.PartitionLag, 0, len(info.Partitions))
	for _, p := range info.Partitions {
		lag := log.PartitionLag{Topic: topic, Partition: p.Partition, Committed: -1, Start: p.Start, End: p.End}
		pos := p.Start
		if c, ok := committed[p.Partition]; ok {
			lag.Committed, pos = c, max(c, p.Start)
		}
		lag.Records = max(p.End-pos, 0)
		if lag.Records > 0 {
			recs, err := l.Fetch(ctx, topic, p.Partition, pos, log.FetchOptions{MaxBytes: 1})
			if err != nil && !errors.Is(err, log.ErrDataLost) {
				return nil, err
			}
			if len(recs) > 0 {
				lag.Seconds = max(now.Sub(recs[0].Timestamp).Seconds(), 0)
			} else {
				lag.Records = 0 // only markers past the group's offset
			}
		}
		out = append(out, lag)
	}
	return out, nil
}
