package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcd-dev/cdcd/sink/iceberg"
)

// A load's progress all the way into Iceberg. The source's progress (rows
// read) ends when the last chunk is in the log, long before the sink has
// committed it: a table of millions of rows can say "read 100%" while
// Iceberg holds a tenth of them. So each table's load is also followed on
// the sink's side: the snapshot reads (op r) it committed (the sink's
// TableStats.SnapshotRows) against the rows the load read (the intake's
// count) or, while it still reads, against what it is expected to read.
// The rate of those commits is measured over the last rateWindow by a
// sampler that also writes an INFO line every progressLogEvery while a
// load's rows wait, and one when the last of them is committed.

const (
	progressSampleEvery = time.Second
	progressLogEvery    = 10 * time.Second
	rateWindow          = 30 * time.Second
)

// loadView is one table's load as far as Iceberg, since start.
type loadView struct {
	// read: rows snapshot reads put into the log; committed: of them, rows
	// committed to the table; total: rows the load will have read (-1
	// unknown; exact once readDone).
	read, committed, total int64
	// readDone: no load reads the table any more; done: and every row it
	// read is committed.
	readDone, done bool
	// percent of total committed (100 once done, -1 unknown); rate in rows
	// per second over the last rateWindow; eta at it (0 when unknown).
	percent float64
	rate    float64
	eta     time.Duration
}

// active reports whether a load's rows are on their way into the table.
func (v loadView) active() bool { return !v.done && (v.read > 0 || v.committed > 0) }

// loadView computes t's load progress; lag gives the records of its topic
// the table has not committed (-1 unknown), asked only when the counts
// cannot tell whether the load is all committed (the log may be Kafka).
func (d *Daemon) loadView(t *iceberg.TableStats, src string, lag func() int64) loadView {
	v := loadView{committed: t.SnapshotRows.Load(), total: -1}
	if c := d.intake.tables[src]; c != nil {
		v.read = c.SnapshotRows.Load()
	}
	streaming := d.reader.Stats().Streaming.Load() || !d.runsSource()
	inc, incRuns := d.incrementalStatus(src)
	switch {
	case incRuns && inc.Estimated > 0:
		// The rows this process read plus those the run has left.
		v.total = v.read + max(inc.Estimated-inc.Rows, 0)
	case incRuns:
	case streaming:
		v.readDone, v.total = true, v.read
	default:
		if est := d.monitor.slot.Estimate(src); est > 0 {
			v.total = max(v.read, est)
		}
	}
	v.done = loadDone(v.readDone, v.read, v.committed, lag)
	v.rate = d.progress.rate(t.Topic)
	switch {
	case v.done:
		v.percent = 100
	case v.total > 0:
		v.percent = min(99.9, 100*float64(v.committed)/float64(v.total))
	default:
		v.percent = -1
	}
	if !v.done && v.rate > 0 && v.total > v.committed {
		v.eta = time.Duration(float64(v.total-v.committed) / v.rate * float64(time.Second))
	}
	return v
}

// loadDone reports whether a table's load is all committed: no load reads
// it, and every row read is committed. With no load rows at all there is
// nothing to wait for; rows committed that were not read here (a sink
// process, a load read before a restart) leave it to the topic's lag.
func loadDone(readDone bool, read, committed int64, lag func() int64) bool {
	switch {
	case !readDone:
		return false
	case read == 0 && committed == 0, read > 0 && committed >= read:
		return true
	}
	return lag() == 0
}

// applyLoad shows v in a table's snapshot status.
func applyLoad(s *SnapshotStatus, v loadView) {
	s.Committed, s.CommittedPercent, s.AllCommitted = v.committed, v.percent, v.done
	if v.active() {
		s.CommitRowsPerSecond = float64(int64(v.rate + 0.5))
		s.CommitETASeconds = v.eta.Round(time.Second).Seconds()
	}
}

// loadProgress samples every table's committed load rows.
type loadProgress struct {
	mu     sync.Mutex
	tables map[string]*loadTrack // topic ->
}

type loadTrack struct {
	samples []progressSample // oldest first, within rateWindow
	// began is when the table's load was first seen on its way (zero while
	// none is); logged when the last progress line was written.
	began, logged time.Time
	// doneRows are the committed load rows when the last load was said to
	// be all committed.
	doneRows int64
}

type progressSample struct {
	at        time.Time
	committed int64
}

func newLoadProgress() *loadProgress { return &loadProgress{tables: map[string]*loadTrack{}} }

func (p *loadProgress) trackLocked(topic string) *loadTrack {
	tr := p.tables[topic]
	if tr == nil {
		tr = &loadTrack{}
		p.tables[topic] = tr
	}
	return tr
}

// sample records topic's committed load rows at now.
func (p *loadProgress) sample(topic string, now time.Time, committed int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tr := p.trackLocked(topic)
	tr.samples = append(tr.samples, progressSample{now, committed})
	cut := 0
	for cut < len(tr.samples)-2 && now.Sub(tr.samples[cut].at) > rateWindow {
		cut++
	}
	tr.samples = tr.samples[cut:]
}

// rate is topic's committed load rows per second over the samples kept.
func (p *loadProgress) rate(topic string) float64 {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	tr := p.tables[topic]
	if tr == nil || len(tr.samples) < 2 {
		return 0
	}
	first, last := tr.samples[0], tr.samples[len(tr.samples)-1]
	el := last.at.Sub(first.at).Seconds()
	if el <= 0 || last.committed < first.committed {
		return 0
	}
	return float64(last.committed-first.committed) / el
}

// runProgress samples every table's load each progressSampleEvery and logs
// its progress until ctx ends.
func (d *Daemon) runProgress(ctx context.Context) error {
	tick := time.NewTicker(progressSampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			d.sampleProgress(now)
		}
	}
}

// sampleProgress samples each table once and writes the log lines due.
func (d *Daemon) sampleProgress(now time.Time) {
	sources := d.sourceTables()
	for _, t := range d.sink.Stats() {
		d.progress.sample(t.Topic, now, t.SnapshotRows.Load())
		v := d.loadView(t, sources[t.Topic], func() int64 { return d.lag(t) })
		d.progress.mu.Lock()
		tr := d.progress.trackLocked(t.Topic)
		began, logged := tr.began, tr.logged
		// A load read and committed between two samples is never seen on
		// its way: its end is said all the same.
		finished := v.done && v.committed > tr.doneRows
		if finished {
			tr.doneRows = v.committed
		}
		switch {
		case v.active() && began.IsZero():
			tr.began, tr.logged = now, now
		case v.active() && now.Sub(logged) >= progressLogEvery:
			tr.logged = now
		case !v.active():
			tr.began = time.Time{}
		}
		d.progress.mu.Unlock()
		switch {
		case v.active() && !began.IsZero() && now.Sub(logged) >= progressLogEvery:
			d.logger.Info("load progress into iceberg", "table", t.Table, "committed", v.committed, "read", v.read,
				"expected", v.total, "percent", float64(int64(v.percent*10))/10, "rows_per_second", int64(v.rate),
				"eta", v.eta.Round(time.Second), "reading", !v.readDone)
		case finished:
			attrs := []any{"table", t.Table, "rows", v.committed}
			if !began.IsZero() {
				attrs = append(attrs, "took", now.Sub(began).Round(time.Second))
			}
			d.logger.Info("load committed to iceberg", attrs...)
		}
	}
}

// loadCollector exports each table's load progress into Iceberg.
type loadCollector struct{ d *Daemon }

var _ prometheus.Collector = loadCollector{}

var (
	descLoadCommitted = desc("cdcd_table_snapshot_rows_committed_total", "Rows snapshot reads (initial load, incremental snapshots) committed to the Iceberg table since start.", "table")
	descLoadRatio     = desc("cdcd_table_snapshot_committed_ratio", "Share of the rows the table's load read (or is expected to read, while it reads) that is committed to Iceberg; 1 once all is; absent when unknown.", "table")
	descLoadRate      = desc("cdcd_table_snapshot_commit_rows_per_second", "Rows per second the table's load committed to Iceberg over the last 30 s; 0 when no load runs.", "table")
	descLoadETA       = desc("cdcd_table_snapshot_commit_eta_seconds", "Seconds until the table's load is committed to Iceberg at that rate; 0 when unknown or done.", "table")
)

func (c loadCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLoadCommitted, descLoadRatio, descLoadRate, descLoadETA} {
		ch <- d
	}
}

func (c loadCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	sources := d.sourceTables()
	for _, t := range d.sink.Stats() {
		if !d.showsTable(t.Topic) {
			continue
		}
		var s SnapshotStatus
		applyLoad(&s, d.loadView(t, sources[t.Topic], func() int64 { return d.lag(t) }))
		counter(ch, descLoadCommitted, float64(s.Committed), t.Table)
		if s.CommittedPercent >= 0 {
			gauge(ch, descLoadRatio, s.CommittedPercent/100, t.Table)
		}
		gauge(ch, descLoadRate, s.CommitRowsPerSecond, t.Table)
		gauge(ch, descLoadETA, s.CommitETASeconds, t.Table)
	}
}
