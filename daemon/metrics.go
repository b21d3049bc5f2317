package daemon

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcd-dev/cdcd/sink/iceberg"
)

// The Prometheus adapter: core packages expose stats structs (source
// Stats, sink TableStats, log Stats and lags), and this file turns them
// into metrics at scrape time (collector), plus histograms of each commit
// fed by the sampler. Every name is listed in README.md "Metrics".

// collector adapts the components' stats to Prometheus at scrape time.
type collector struct{ d *Daemon }

var _ prometheus.Collector = (*collector)(nil)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descBuildInfo  = desc("cdcd_build_info", "cdcd's version and pipeline; always 1.", "version", "pipeline")
	descReady      = desc("cdcd_ready", "1 while the source streams or loads and no stop has begun (/readyz).")
	descState      = desc("cdcd_state", "The daemon's lifecycle state: 1 for the current one.", "state")
	descSrcEvents  = desc("cdcd_source_events_total", "Changes the source streamed into the log.")
	descSrcSnap    = desc("cdcd_source_snapshot_rows_total", "Rows the initial load put into the log.")
	descSrcFlushed = desc("cdcd_source_flushed_lsn_bytes", "WAL position (LSN, a byte offset in the WAL) last confirmed to PostgreSQL as flushed (durable in the log).")
	descSrcRecv    = desc("cdcd_source_received_lsn_bytes", "Newest WAL position (LSN, a byte offset in the WAL) received from PostgreSQL.")
	descSrcStream  = desc("cdcd_source_streaming", "1 once the initial load is done and the slot streams.")

	descTblIn       = desc("cdcd_table_events_in_total", "Changes of the table appended to the log since start.", "table")
	descTblSnap     = desc("cdcd_table_snapshot_rows_total", "Rows of the table the initial load appended since start.", "table")
	descTblSnapEst  = desc("cdcd_table_snapshot_rows_estimated", "Rows of the table PostgreSQL estimates (pg_class.reltuples), read during the initial load.", "table")
	descTblOut      = desc("cdcd_table_events_out_total", "Rows committed to the Iceberg table since start.", "table")
	descTblCommits  = desc("cdcd_table_commits_total", "Commits to the Iceberg table since start.", "table")
	descTblLast     = desc("cdcd_table_last_commit_timestamp_seconds", "Time of the table's last commit (0 before the first).", "table")
	descTblPaused   = desc("cdcd_table_paused", "1 while the table is paused (e.g. a refused schema change).", "table")
	descTblPausedS  = desc("cdcd_table_paused_seconds", "How long the table has been paused; 0 when it is not.", "table")
	descTblStall    = desc("cdcd_table_commit_stall_seconds", "How long changes have waited for the table without a successful commit; 0 when none wait.", "table")
	descPartEnd     = desc("cdcd_log_end_offset", "Next offset of each partition of the table's topic.", "table", "topic", "partition")
	descPartBytes   = desc("cdcd_log_bytes", "Bytes of each partition's segments on disk.", "table", "topic", "partition")
	descLogFailing  = desc("cdcd_log_write_failing_seconds", "How long writes to the log have failed (a full disk, an I/O error); 0 while they succeed.")
	descPartLost    = desc("cdcd_log_lost_offsets", "Offsets of the partition the log lost to damage that the table has not passed (re-snapshot the table).", "table", "topic", "partition")
	descPartExpires = desc("cdcd_log_uncommitted_expires_seconds", "Seconds until the log's retention may remove the oldest record of the partition the table has not committed (negative: at the next cleanup); absent when the table has committed everything or no age retention applies.", "table", "topic", "partition")
	descLagRecords  = desc("cdcd_consumer_lag_records", "Records of the partition the table has not committed.", "table", "topic", "partition")
	descLagSeconds  = desc("cdcd_consumer_lag_seconds", "Age of the oldest record of the partition the table has not committed; 0 when caught up.", "table", "topic", "partition")
	descSlotUp      = desc("cdcd_slot_up", "1 when the last poll of pg_replication_slots succeeded.", "slot")
	descSlotExists  = desc("cdcd_slot_exists", "1 when the replication slot exists.", "slot")
	descSlotActive  = desc("cdcd_slot_active", "1 when a walsender holds the slot.", "slot")
	descSlotLag     = desc("cdcd_slot_lag_bytes", "pg_current_wal_lsn() - confirmed_flush_lsn.", "slot")
	descSlotLagSec  = desc("cdcd_slot_lag_seconds", "Age of the oldest WAL the slot has not confirmed (a lower bound, at the poll interval's resolution).", "slot")
	descSlotRetain  = desc("cdcd_slot_retained_wal_bytes", "pg_current_wal_lsn() - restart_lsn: WAL the slot keeps on the server.", "slot")
	descSlotConf    = desc("cdcd_slot_confirmed_flush_lsn_bytes", "The slot's confirmed_flush_lsn (a byte offset in the WAL).", "slot")
	descSlotSafe    = desc("cdcd_slot_safe_wal_size_bytes", "The slot's safe_wal_size; absent when max_slot_wal_keep_size is -1 or the slot is lost.", "slot")
	descSlotMaxKeep = desc("cdcd_slot_max_wal_keep_bytes", "The server's max_slot_wal_keep_size; absent when unlimited (-1).", "slot")
	descSlotStatus  = desc("cdcd_slot_wal_status", "The slot's wal_status: 1 for the current one.", "slot", "status")
	descAlert       = desc("cdcd_alert_firing", "1 for each alert firing, by name, severity and subject (slot or table).", "alert", "severity", "subject")
	descHookSent    = desc("cdcd_alert_webhook_sent_total", "Alert events the webhook accepted.")
	descHookFailed  = desc("cdcd_alert_webhook_failed_total", "Alert events the webhook did not accept after every retry, or dropped.")
)

var walStatuses = []string{"reserved", "extended", "unreserved", "lost"}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBuildInfo, descReady, descState, descSrcEvents, descSrcSnap, descSrcFlushed, descSrcRecv,
		descSrcStream, descTblIn, descTblSnap, descTblSnapEst, descTblOut, descTblCommits, descTblLast, descTblPaused, descTblPausedS,
		descTblStall, descPartEnd, descPartBytes, descPartLost, descLogFailing, descLagRecords, descLagSeconds, descSlotUp, descSlotExists, descSlotActive,
		descSlotLag, descSlotLagSec, descSlotRetain, descSlotConf, descSlotSafe, descSlotMaxKeep, descSlotStatus, descAlert,
		descHookSent, descHookFailed, descBinlogLag, descBinlogLagSec, descBinlogRetention} {
		ch <- d
	}
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	state := d.lifecycleState()
	gauge(ch, descBuildInfo, 1, Version, d.cfg.Pipeline)
	gauge(ch, descReady, b2f(ready(state)))
	gauge(ch, descLogFailing, d.logFailingFor().Seconds())
	for _, s := range []string{StateStarting, StateLoading, StateStreaming, StateStopping, StateStopped} {
		gauge(ch, descState, b2f(s == state), s)
	}
	ss := d.reader.Stats()
	counter(ch, descSrcEvents, float64(ss.Events.Load()))
	counter(ch, descSrcSnap, float64(ss.SnapshotRows.Load()))
	gauge(ch, descSrcFlushed, float64(ss.Flushed.Load()))
	gauge(ch, descSrcRecv, float64(ss.Received.Load()))
	gauge(ch, descSrcStream, b2f(ss.Streaming.Load()))
	c.collectTables(ch)
	c.collectSlot(ch)
	c.collectBinlog(ch)
	for _, a := range d.monitor.alerts.firing() {
		gauge(ch, descAlert, 1, a.Name, a.Severity, a.Subject)
	}
	if h := d.monitor.hook; h != nil {
		counter(ch, descHookSent, float64(h.Sent.Load()))
		counter(ch, descHookFailed, float64(h.Failed.Load()+h.Dropped.Load()))
	}
}

func (c *collector) collectTables(ch chan<- prometheus.Metric) {
	d := c.d
	sources := d.sourceTables()
	byTopic := map[string]string{}
	statsOf := map[string]*iceberg.TableStats{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, t := range d.sink.Stats() {
		name, src := t.Table, sources[t.Topic]
		byTopic[t.Topic], statsOf[t.Topic] = name, t
		if in := d.intake.tables[src]; in != nil {
			counter(ch, descTblIn, float64(in.Events.Load()), name)
			counter(ch, descTblSnap, float64(in.SnapshotRows.Load()), name)
		}
		if n := d.monitor.slot.Estimate(src); n > 0 {
			gauge(ch, descTblSnapEst, float64(n), name)
		}
		counter(ch, descTblOut, float64(t.Rows.Load()), name)
		counter(ch, descTblCommits, float64(t.Commits.Load()), name)
		gauge(ch, descTblLast, float64(t.LastCommit.Load())/1000, name)
		paused, since, _ := d.pausedState(t.Topic)
		gauge(ch, descTblPaused, b2f(paused), name)
		pausedFor := 0.0
		if paused && !since.IsZero() {
			pausedFor = time.Since(since).Seconds()
		}
		gauge(ch, descTblPausedS, pausedFor, name)
		gauge(ch, descTblStall, d.monitor.watch(t.Topic).stalledFor.Seconds(), name)
		lags, err := d.lg.TopicLag(ctx, d.group(), t.Topic)
		if err != nil {
			continue
		}
		for _, p := range lags {
			part := strconv.Itoa(int(p.Partition))
			gauge(ch, descLagRecords, float64(p.Records), name, t.Topic, part)
			gauge(ch, descLagSeconds, p.Seconds, name, t.Topic, part)
		}
	}
	for _, p := range d.lg.Stats().Partitions {
		name, ok := byTopic[p.Topic]
		if !ok {
			continue // internal topics
		}
		part := strconv.Itoa(int(p.Partition))
		gauge(ch, descPartEnd, float64(p.End), name, p.Topic, part)
		gauge(ch, descPartBytes, float64(p.Bytes), name, p.Topic, part)
		gauge(ch, descPartLost, float64(d.lostUnread(p)), name, p.Topic, part)
		if ts := statsOf[p.Topic]; ts != nil {
			if at, _, ok := d.uncommittedExpiry(p, ts); ok {
				gauge(ch, descPartExpires, time.Until(at).Seconds(), name, p.Topic, part)
			}
		}
	}
}

func (c *collector) collectSlot(ch chan<- prometheus.Metric) {
	s := c.d.monitor.slot.Status()
	gauge(ch, descSlotUp, b2f(s.Up), s.Name)
	if !s.Up {
		return
	}
	gauge(ch, descSlotExists, b2f(s.Exists), s.Name)
	if !s.Exists {
		return
	}
	gauge(ch, descSlotActive, b2f(s.Active), s.Name)
	gauge(ch, descSlotLag, float64(s.LagBytes), s.Name)
	gauge(ch, descSlotLagSec, s.LagSeconds, s.Name)
	gauge(ch, descSlotRetain, float64(s.RetainedBytes), s.Name)
	gauge(ch, descSlotConf, float64(s.ConfirmedFlush), s.Name)
	if s.SafeWALSize != nil {
		gauge(ch, descSlotSafe, float64(*s.SafeWALSize), s.Name)
	}
	if s.MaxWALKeep >= 0 {
		gauge(ch, descSlotMaxKeep, float64(s.MaxWALKeep), s.Name)
	}
	for _, ws := range walStatuses {
		gauge(ch, descSlotStatus, b2f(ws == s.WALStatus), s.Name, ws)
	}
}

// sampler feeds the commit histograms. The sink calls committed after
// every commit that lands, which observes its duration; each snapshot's
// summary says what the commit added: every sampleInterval the sampler
// looks for tables whose commit count moved and reads the new snapshots'
// summaries (added files, bytes and records) from the catalog.
type sampler struct {
	d        *Daemon
	duration *prometheus.HistogramVec
	files    *prometheus.HistogramVec
	bytes    *prometheus.HistogramVec
	records  *prometheus.HistogramVec

	mu   sync.Mutex
	seen map[string]*sampled // topic ->
}

type sampled struct {
	commits  int64
	snapshot int64 // newest snapshot observed; 0 before the first look
	init     bool
}

const sampleInterval = time.Second

// maxSnapshotWalk bounds how far back one look follows a table's history.
const maxSnapshotWalk = 64

func newSampler(d *Daemon) *sampler {
	h := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, []string{"table"})
	}
	return &sampler{
		d:        d,
		duration: h("cdcd_commit_duration_seconds", "Duration of each commit to the table that landed (retries included).", prometheus.ExponentialBuckets(0.025, 2, 14)),
		files:    h("cdcd_commit_files", "Files (data and delete files) each commit added to the table.", prometheus.ExponentialBuckets(1, 2, 12)),
		bytes:    h("cdcd_commit_bytes", "Bytes of the files each commit added to the table.", prometheus.ExponentialBuckets(1024, 4, 14)),
		records:  h("cdcd_commit_records", "Records each commit added to the table (data rows and deletes).", prometheus.ExponentialBuckets(1, 4, 14)),
		seen:     map[string]*sampled{},
	}
}

// committed observes one landed commit of ts that took took (the sink's
// OnCommit hook).
func (d *Daemon) committed(ts *iceberg.TableStats, took time.Duration) {
	if s := d.sampler; s != nil {
		s.duration.WithLabelValues(ts.Table).Observe(took.Seconds())
	}
}

func (s *sampler) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.duration, s.files, s.bytes, s.records}
}

// run samples every sampleInterval until ctx ends.
func (s *sampler) run(ctx context.Context) error {
	t := time.NewTicker(sampleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			for _, ts := range s.d.sink.Stats() {
				s.sample(ctx, ts)
			}
		}
	}
}

func (s *sampler) sample(ctx context.Context, ts *iceberg.TableStats) {
	s.mu.Lock()
	st := s.seen[ts.Topic]
	if st == nil {
		st = &sampled{}
		s.seen[ts.Topic] = st
	}
	s.mu.Unlock()
	n := ts.Commits.Load()
	if st.init && n == st.commits {
		return
	}
	ident, ok := s.d.idents[ts.Topic]
	if !ok {
		return
	}
	// The table as the sink's last commit left it: every commit of this
	// process (the snapshots since the last look) is in its history, and
	// reading it costs no catalog round trip nor a parse of its metadata
	// (every snapshot the table keeps, each second).
	tbl := ts.Current.Load()
	var err error
	if tbl == nil {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		tbl, err = s.d.cat.LoadTable(lctx, ident)
	}
	if err != nil {
		if !st.init {
			st.init, st.commits = true, n // no table yet
		}
		return
	}
	snap := tbl.CurrentSnapshot()
	if !st.init {
		// The first look: what is already there is history, not a commit.
		st.init, st.commits = true, n
		if snap != nil {
			st.snapshot = snap.SnapshotID
		}
		return
	}
	st.commits = n
	newest := int64(0)
	meta := tbl.Metadata()
	for i := 0; snap != nil && snap.SnapshotID != st.snapshot && i < maxSnapshotWalk; i++ {
		if newest == 0 {
			newest = snap.SnapshotID
		}
		s.observe(ts.Table, snap)
		if snap.ParentSnapshotID == nil {
			break
		}
		snap = meta.SnapshotByID(*snap.ParentSnapshotID)
	}
	if newest != 0 {
		st.snapshot = newest
	}
}

// observe records one data commit's summary (maintenance commits, which
// carry no commit id, are skipped).
func (s *sampler) observe(tableName string, snap *table.Snapshot) {
	if snap.Summary == nil {
		return
	}
	p := snap.Summary.Properties
	if _, ok := p[iceberg.PropCommitID]; !ok {
		return
	}
	num := func(k string) float64 {
		v, _ := strconv.ParseInt(p[k], 10, 64)
		return float64(v)
	}
	s.files.WithLabelValues(tableName).Observe(num("added-data-files") + num("added-delete-files"))
	s.bytes.WithLabelValues(tableName).Observe(num("added-files-size"))
	s.records.WithLabelValues(tableName).Observe(num("added-records") + num("added-position-deletes"))
}
