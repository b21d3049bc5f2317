package iceberg

import (
	"context"
	"fmt"
)

// A source that has read a backlog and caught up with its database says
// so (Sink.CaughtUp), once what it read is durable in the log. A table
// whose fetcher kept up with the log while the source read the backlog
// (the source, not the sink, was behind) built no backlog in the log, so
// the loop's own rule (caughtUp: a whole buffer of full batches, then the
// end) does not fire, and what it holds at the end waited out the commit
// interval: a restarted pipeline's mirror caught up up to commit_interval
// after its source did, and cdcd bench's streaming phase ended with that
// wait whenever the sink kept up. Now the loop takes the topic's ends at
// the notice and commits what it holds as soon as it has read that far.
// A notice comes once a backlog, so a steady stream keeps its interval.

// noteCaughtUp takes the ends of the table's topic's partitions: what
// the source had handed over when it caught up.
func (w *tableWriter) noteCaughtUp(ctx context.Context) error {
	info, err := w.s.lg.DescribeTopic(ctx, w.cfg.Topic)
	if err != nil {
		return fmt.Errorf("iceberg: topic %s: %w", w.cfg.Topic, err)
	}
	if len(info.Partitions) != len(w.next) {
		return nil // the topic changed shape: the loop will restart
	}
	w.flushAt = make([]int64, len(info.Partitions))
	for _, p := range info.Partitions {
		if int(p.Partition) >= len(w.flushAt) {
			w.flushAt = nil
			return nil
		}
		w.flushAt[p.Partition] = p.End
	}
	return nil
}

// commitIfCaughtUp commits the buffer once the loop has read up to the
// ends noted at a source's catch-up (noteCaughtUp); the commit counts as
// one forced by a backlog, as the loop's own catch-up commit does.
func (w *tableWriter) commitIfCaughtUp(ctx context.Context) error {
	if w.flushAt == nil {
		return nil
	}
	for p, end := range w.flushAt {
		if w.next[p] < end {
			return nil
		}
	}
	w.flushAt = nil
	if len(w.buf) == 0 {
		return nil
	}
	w.catchingUp = true
	err := w.commit(ctx)
	w.catchingUp = false
	return err
}
