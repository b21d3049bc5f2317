package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// CommitOffsets stores group's next offsets to read in topic (Kafka's
// group offsets, committed outside any group generation).
func (l *Log) CommitOffsets(ctx context.Context, group, topic string, offsets map[int32]int64) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	var os kadm.Offsets
	for p, off := range offsets {
		os.AddOffset(topic, p, off, -1)
	}
	resp, err := l.adm.CommitOffsets(ctx, group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka: commit offsets of group %s on %s: %w", group, topic, l.ctxErr(ctx, err))
	}
	return nil
}

// CommittedOffsets returns group's committed offsets in topic.
func (l *Log) CommittedOffsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	resp, err := l.adm.FetchOffsets(ctx, group)
	if err == nil {
		err = resp.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]int64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: committed offsets of group %s: %w", group, l.ctxErr(ctx, err))
	}
	out := map[int32]int64{}
	for p, o := range resp[topic] {
		if o.At >= 0 {
			out[p] = o.At
		}
	}
	return out, nil
}
