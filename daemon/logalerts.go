package daemon

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/sink/iceberg"
)

// The log's alerts.
const (
	// AlertLogDataLost fires while a table has not passed offsets its
	// topic lost to damage found in the log (see log.LostRange).
	AlertLogDataLost = "CdcdLogDataLost"
	// AlertLogWriteFailing fires while writes to the log fail (a full
	// disk, an I/O error); appends wait and are retried meanwhile.
	AlertLogWriteFailing = "CdcdLogWriteFailing"
	// AlertLogRetentionNear fires while the log's age retention may soon
	// remove records of a table's topic the table has not committed (a
	// paused or stuck table): warning inside the warning window, critical
	// once they may go at the cleaner's next run.
	AlertLogRetentionNear = "CdcdLogRetentionNear"
)

// logInputs is what the log's rules look at, gathered by the monitor.
type logInputs struct {
	losses   []tableLoss
	failing  logFailing
	expiring []tableExpiry
}

// tableExpiry is the partition of a table's topic whose oldest record the
// table has not committed is the next the log's retention may remove.
type tableExpiry struct {
	topic, table, source string
	partition            int32
	from, end            int64     // uncommitted offsets [from, end)
	at                   time.Time // when retention may remove offset from
	left                 time.Duration
	retention            time.Duration
}

// expiresAt is the log's ExpiresAt (the embedded log's; Kafka's retention
// is the brokers').
type expiresAt interface {
	ExpiresAt(topic string, partition int32, offset int64) (time.Time, bool)
}

// retentionWarning is how long before the log's retention may remove a
// table's uncommitted records CdcdLogRetentionNear fires: a day, or half
// the retention when that is shorter.
func retentionWarning(retention time.Duration) time.Duration {
	return min(24*time.Hour, retention/2)
}

// uncommittedExpiry returns when the log's retention may remove the oldest
// record of partition ps that table ts has not committed, and that
// record's offset.
func (d *Daemon) uncommittedExpiry(ps log.PartitionStats, ts *iceberg.TableStats) (time.Time, int64, bool) {
	exp, ok := d.lg.(expiresAt)
	if !ok {
		return time.Time{}, 0, false
	}
	from := ps.Start
	if c := ts.Committed.Load(); c != nil && int(ps.Partition) < len(*c) {
		from = max(from, (*c)[ps.Partition])
	}
	if from >= ps.End {
		return time.Time{}, 0, false
	}
	at, ok := exp.ExpiresAt(ps.Topic, ps.Partition, from)
	return at, from, ok
}

// logFailing summarises the partitions whose writes fail.
type logFailing struct {
	dir        string // the log's directory
	partitions int    // failing now
	since      time.Time
	failedFor  time.Duration
	err        error // the oldest failing partition's error
}

// tableLoss is a lost range of a table's topic the table has not passed.
type tableLoss struct {
	topic, table, source string // Iceberg table, source table
	partition            int32
	lost                 log.LostRange
}

// logInputs gathers the log's state for the rules: every lost range of a
// table's topic that the table has not committed past.
func (m *monitor) logInputs(tables []*iceberg.TableStats) logInputs {
	var in logInputs
	byTopic := make(map[string]*iceberg.TableStats, len(tables))
	for _, ts := range tables {
		byTopic[ts.Topic] = ts
	}
	in.failing.dir = m.d.lg.Dir()
	for _, ps := range m.d.lg.Stats().Partitions {
		if ps.WriteError != nil {
			f := &in.failing
			f.partitions++
			if f.since.IsZero() || ps.WriteFailingSince.Before(f.since) {
				f.since, f.err = ps.WriteFailingSince, ps.WriteError
			}
		}
		ts := byTopic[ps.Topic]
		if ts == nil {
			continue
		}
		for _, r := range unreadLost(ps, ts) {
			in.losses = append(in.losses, tableLoss{topic: ps.Topic, table: ts.Table, partition: ps.Partition, lost: r,
				source: strings.TrimPrefix(ps.Topic, m.d.cfg.Pipeline+".")})
		}
		retention := m.d.cfg.Log.Retention
		if at, from, ok := m.d.uncommittedExpiry(ps, ts); ok && retention > 0 {
			left := time.Until(at)
			if left >= retentionWarning(retention) {
				continue
			}
			e := tableExpiry{topic: ps.Topic, table: ts.Table, source: strings.TrimPrefix(ps.Topic, m.d.cfg.Pipeline+"."),
				partition: ps.Partition, from: from, end: ps.End, at: at, left: left, retention: retention}
			// One per table: its partition that expires first.
			i := slices.IndexFunc(in.expiring, func(x tableExpiry) bool { return x.table == e.table })
			switch {
			case i < 0:
				in.expiring = append(in.expiring, e)
			case e.at.Before(in.expiring[i].at):
				in.expiring[i] = e
			}
		}
	}
	if !in.failing.since.IsZero() {
		in.failing.failedFor = time.Since(in.failing.since)
	}
	return in
}

// unreadLost returns the lost ranges of a partition the table has not
// committed past (all of them when it has committed nothing there).
func unreadLost(ps log.PartitionStats, ts *iceberg.TableStats) []log.LostRange {
	committed := int64(-1)
	if c := ts.Committed.Load(); c != nil && int(ps.Partition) < len(*c) {
		committed = (*c)[ps.Partition]
	}
	var out []log.LostRange
	for _, r := range ps.Lost {
		if committed < r.To {
			out = append(out, r)
		}
	}
	return out
}

// logFailingFor is how long the log's oldest failing partition has failed
// to write (0 while every write succeeds).
func (d *Daemon) logFailingFor() time.Duration {
	var since time.Time
	for _, ps := range d.lg.Stats().Partitions {
		if ps.WriteError != nil && (since.IsZero() || ps.WriteFailingSince.Before(since)) {
			since = ps.WriteFailingSince
		}
	}
	if since.IsZero() {
		return 0
	}
	return time.Since(since)
}

// lostUnread counts the offsets of a partition lost to damage that its
// table has not passed (cdcd_log_lost_offsets).
func (d *Daemon) lostUnread(ps log.PartitionStats) int64 {
	var n int64
	for _, ts := range d.sink.Stats() {
		if ts.Topic != ps.Topic {
			continue
		}
		for _, r := range unreadLost(ps, ts) {
			n += r.To - r.From
		}
	}
	return n
}

// evaluateLog returns the alerts the log's state calls for.
func evaluateLog(in logInputs) []Alert {
	var out []Alert
	if f := in.failing; f.partitions > 0 {
		out = append(out, Alert{Name: AlertLogWriteFailing, Severity: SeverityCritical, Subject: f.dir,
			Summary: fmt.Sprintf("writes to the log in %s have failed for %s (%d partitions): %v",
				f.dir, f.failedFor.Round(time.Second), f.partitions, errors.Unwrap(f.err)),
			Action: "free space on the disk holding data_dir (or fix the disk): changes wait in the pipeline and " +
				"PostgreSQL keeps their WAL meanwhile; appends are retried and the pipeline resumes by itself",
			Value: f.failedFor.Seconds()})
	}
	for _, e := range in.expiring {
		sev, when := SeverityWarning, fmt.Sprintf("from %s on (in %s)", e.at.UTC().Format(time.RFC3339), e.left.Round(time.Second))
		if e.left <= 0 {
			sev, when = SeverityCritical, fmt.Sprintf("at its next cleanup (they passed it at %s)", e.at.UTC().Format(time.RFC3339))
		}
		out = append(out, Alert{Name: AlertLogRetentionNear, Severity: sev, Subject: e.table,
			Summary: fmt.Sprintf("table %s has not committed offsets [%d, %d) of %s partition %d, and the log's retention (%s) may remove them %s",
				e.table, e.from, e.end, e.topic, e.partition, e.retention, when),
			Action: fmt.Sprintf("resolve what holds the table back before then (cdcd status shows its pause or failing commits, and the fix); "+
				"or raise log.retention and restart cdcd. Once removed, the table pauses and its mirror must be rebuilt: cdcd snapshot -c FILE --replace %s", e.source),
			Value: e.left.Seconds()})
	}
	for _, l := range in.losses {
		out = append(out, Alert{Name: AlertLogDataLost, Severity: SeverityCritical,
			Subject: fmt.Sprintf("%s/%d", l.topic, l.partition),
			Summary: fmt.Sprintf("the log lost offsets [%d, %d) of %s partition %d, which table %s has not read: %s",
				l.lost.From, l.lost.To, l.topic, l.partition, l.table, l.lost.Reason),
			Action: fmt.Sprintf("the table's mirror cannot be trusted past them: re-snapshot it with cdcd snapshot -c FILE --replace %s "+
				"(the table waits until then); the damaged file's copy is in the log's quarantine directory", l.source),
			Value: float64(l.lost.To - l.lost.From)})
	}
	return out
}
