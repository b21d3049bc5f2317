package iceberg

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// PropTopicID is the snapshot summary property (frozen) naming the log
// topic incarnation (log.TopicInfo.ID) whose offsets cdcd.offsets holds.
const PropTopicID = "cdcd.topic-id"

// Where a table cannot trust the log, and how it resumes.
//
// A table's offsets mean something only in the log topic they were read
// from. At every load the sink compares the topic id stored with the
// table's offsets with the log's: another id (the log was replaced, the
// topic re-created) pauses the table, and so does a partition whose
// offsets the log lost (log.DataLossError), removed by retention before
// the table read them, or no longer has (the log ends before the table's
// offsets). The sink never reads another log's offsets as its own and
// never passes offsets it did not read.
//
// The way back is a reset marker (schema.HeaderReset): the truncate that
// begins a load or re-snapshot replacing the table's contents, produced
// into every partition. Per partition, the sink skips forward to the first
// reset marker after the point it cannot trust (any marker of a replaced
// log; one after a lost range), saying so in its log; the marker truncates
// the table and the re-snapshot's rows that follow rebuild it.

// untrusted remembers, per table, from which offset each partition's
// records cannot be trusted until a reset marker: a loss found once
// holds until the table resumes, even if the log grows past it meanwhile.
type untrusted struct {
	mu   sync.Mutex
	from map[string]map[int32]int64 // topic -> partition -> first offset a marker must be at
}

func (u *untrusted) get(topic string, p int32) (int64, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	off, ok := u.from[topic][p]
	return off, ok
}

func (u *untrusted) set(topic string, p int32, from int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.from == nil {
		u.from = map[string]map[int32]int64{}
	}
	if u.from[topic] == nil {
		u.from[topic] = map[int32]int64{}
	}
	if old, ok := u.from[topic][p]; !ok || from > old {
		u.from[topic][p] = from
	}
}

func (u *untrusted) clear(topic string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.from, topic)
}

// topicOf is the topic id stored with a snapshot's offsets ("" if none).
func topicOf(snap *table.Snapshot) string {
	if snap == nil || snap.Summary == nil {
		return ""
	}
	return snap.Summary.Properties[PropTopicID]
}

// offsetProps are the summary properties of a commit that records next.
func (w *tableWriter) offsetProps(next []int64) map[string]string {
	props := map[string]string{
		PropPipeline: w.s.cfg.Pipeline,
		PropOffsets:  encodeOffsets(next),
	}
	if w.topicID != "" {
		props[PropTopicID] = w.topicID
	}
	return props
}

// checkTopic compares the topic of the table's offsets (snap, the newest
// snapshot carrying them) with the log's, and the offsets with what each
// partition holds. It leaves w.next where reading starts, or returns a
// *PauseError.
func (w *tableWriter) checkTopic(ctx context.Context, info log.TopicInfo, snap *table.Snapshot) error {
	w.topicID = info.ID
	if snap == nil || info.ID == "" {
		return nil
	}
	name := identString(w.cfg.Ident)
	theirs := snap.Summary.Properties[PropTopicID]
	if theirs != "" && theirs != info.ID {
		at, err := w.resetMarkers(ctx, info, func(p int) int64 { return info.Partitions[p].Start })
		if err != nil {
			return err
		}
		if at == nil {
			return &PauseError{Table: name,
				What: fmt.Sprintf("this table's offsets belong to log topic %s; this log's topic %s is %s (the log was replaced or the topic re-created): its mirror must be rebuilt",
					theirs, w.cfg.Topic, info.ID),
				Fix: resnapshotFix(name) + " (the table resumes at the re-snapshot's reset marker)"}
		}
		w.logger.Warn("this table's offsets belong to another log topic; resuming at the reset markers of a load or re-snapshot, which truncate the table and rebuild it from this log",
			"table_topic_id", theirs, "topic_id", info.ID, "offsets", encodeOffsets(at))
		w.resumeAt(at)
		return nil
	}
	if theirs == "" {
		w.logger.Info("the table's offsets carry no log topic id (written before cdcd stored one): taking them as this log's", "topic_id", info.ID)
	}
	for p, pi := range info.Partitions {
		if w.next[p] > pi.End {
			w.s.untrusted.set(w.cfg.Topic, int32(p), pi.End)
		}
	}
	at, err := w.resumeUntrusted(ctx, info, w.next)
	if err != nil {
		return err
	}
	for p, off := range at {
		w.next[p] = off
		w.resumed = true
	}
	return nil
}

// resumeUntrusted returns where each partition with an untrusted range
// (next: where it would read) resumes, at its reset marker, or pauses the
// table naming the partition.
func (w *tableWriter) resumeUntrusted(ctx context.Context, info log.TopicInfo, next []int64) (map[int32]int64, error) {
	name := identString(w.cfg.Ident)
	at := map[int32]int64{}
	for p, pi := range info.Partitions {
		from, ok := w.s.untrusted.get(w.cfg.Topic, int32(p))
		if !ok {
			continue
		}
		off, id, found, err := w.findReset(ctx, int32(p), max(from, pi.Start))
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, &PauseError{Table: name,
				What: fmt.Sprintf("the table has read %s partition %d up to offset %d, but the log does not hold the records from offset %d on (it ends at %d: restored from an older copy?)",
					w.cfg.Topic, p, next[p], from, pi.End),
				Fix: resnapshotFix(name) + " (the table resumes at the re-snapshot's reset marker)"}
		}
		w.logger.Warn("skipping to a reset marker past records the log does not hold; the marker truncates the table and the re-snapshot rebuilds it",
			"partition", p, "from", next[p], "to", off, "reset", id)
		at[int32(p)] = off
	}
	return at, nil
}

// resumeAt starts every partition at its reset marker.
func (w *tableWriter) resumeAt(at []int64) {
	copy(w.next, at)
	w.resumed = true
}

// skipLoss handles a fetch of offsets the log lost: the partition skips
// to the first reset marker after the lost range, or the table pauses.
func (f *fetcher) skipLoss(ctx context.Context, p int32, lost *log.DataLossError) error {
	w := f.w
	off, id, found, err := w.findReset(ctx, p, lost.To)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("iceberg: fetch %s/%d at %d: %w", w.cfg.Topic, p, f.next[p], lost)
	}
	w.logger.Warn("the log lost offsets of this table's topic; skipping to the reset marker after them: it truncates the table and the re-snapshot rebuilds it",
		"partition", p, "lost_from", lost.From, "lost_to", lost.To, "reason", lost.Reason, "resume_at", off, "reset", id)
	f.next[p], f.resumed = off, true
	return nil
}

// outOfRange handles a fetch below the partition's start (records removed
// before the table read them: a loss) or past its end (the log no longer
// has what the table read).
func (f *fetcher) outOfRange(ctx context.Context, p int32, cause error) error {
	w := f.w
	info, err := w.s.lg.DescribeTopic(ctx, w.cfg.Topic)
	if err != nil {
		return err
	}
	pi := info.Partitions[p]
	if f.next[p] < pi.Start {
		return f.skipLoss(ctx, p, &log.DataLossError{Topic: w.cfg.Topic, Partition: p, From: f.next[p], To: pi.Start,
			Reason: "removed from the log (retention) before the table read them"})
	}
	if f.next[p] > pi.End {
		w.s.untrusted.set(w.cfg.Topic, p, pi.End)
		at, err := w.resumeUntrusted(ctx, info, f.next)
		if err != nil {
			return err
		}
		for q, off := range at {
			f.next[q], f.resumed = off, true
		}
		return nil
	}
	return fmt.Errorf("iceberg: fetch %s/%d at %d: %w", w.cfg.Topic, p, f.next[p], cause)
}

// resetMarkers finds the first reset marker of every partition at or
// after from(p): their offsets, or nil if some partition has none. They
// may belong to different resets: a marker a crash left in some partitions
// only is moot once the fetcher reads a later one (fetcher.fetch).
func (w *tableWriter) resetMarkers(ctx context.Context, info log.TopicInfo, from func(p int) int64) ([]int64, error) {
	at := make([]int64, len(info.Partitions))
	run := ""
	for p := range info.Partitions {
		off, id, found, err := w.findReset(ctx, int32(p), from(p))
		if err != nil || !found {
			return nil, err
		}
		if p > 0 && id != run {
			w.logger.Info("the partitions' first reset markers belong to different resets (one a crash cut short, moot at the later)",
				"partition", p, "reset", id, "partition_0_reset", run)
		}
		at[p] = off
		if p == 0 {
			run = id
		}
	}
	return at, nil
}

// findReset scans partition p from offset from for the first reset marker
// and returns its offset and reset id. Lost ranges on the way are stepped
// over (a marker after them is what the caller wants).
func (w *tableWriter) findReset(ctx context.Context, p int32, from int64) (int64, string, bool, error) {
	for off := from; ; {
		recs, err := w.s.lg.Fetch(ctx, w.cfg.Topic, p, off, log.FetchOptions{MaxBytes: 1 << 20})
		var lost *log.DataLossError
		switch {
		case errors.As(err, &lost):
			off = max(lost.To, off+1)
			continue
		case errors.Is(err, log.ErrOffsetOutOfRange):
			return 0, "", false, nil
		case err != nil:
			return 0, "", false, fmt.Errorf("iceberg: look for a reset marker in %s/%d from %d: %w", w.cfg.Topic, p, off, err)
		case len(recs) == 0:
			return 0, "", false, nil
		}
		for i := range recs {
			if id := recs[i].Header(schema.HeaderReset); id != nil {
				return recs[i].Offset, string(id), true, nil
			}
		}
		off = recs[len(recs)-1].Offset + 1
	}
}
