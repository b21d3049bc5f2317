package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/sink/iceberg"
)

// adminServer serves /metrics, /healthz, /readyz and /status.
type adminServer struct {
	d   *Daemon
	ln  net.Listener
	srv *http.Server
}

func (d *Daemon) adminServer(addr string) (*adminServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("daemon: admin listener on %s: %w (set admin.listen to a free host:port, or \"off\")", addr, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), &collector{d: d})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	d.maintenanceRoutes(mux)
	// Everything else is the Confluent-compatible schema registry API.
	mux.Handle("/", schema.NewHandler(d.reg))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(d.Status())
	})
	a := &adminServer{d: d, ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	d.logger.Info("admin listening", "addr", ln.Addr().String())
	return a, nil
}

func (a *adminServer) serve(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- a.srv.Serve(a.ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("daemon: admin server: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = a.srv.Shutdown(sctx)
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}

// Status is the JSON of /status.
type Status struct {
	Pipeline string        `json:"pipeline"`
	Uptime   string        `json:"uptime"`
	Source   SourceStatus  `json:"source"`
	Tables   []TableStatus `json:"tables"`
	// Paused lists tables whose changes are held after a schema change the
	// registry refused.
	Paused []PausedTable `json:"paused,omitempty"`
}

// SourceStatus describes the reader.
type SourceStatus struct {
	Slot         string `json:"slot"`
	Events       int64  `json:"events"`
	SnapshotRows int64  `json:"snapshot_rows"`
	FlushedLSN   string `json:"flushed_lsn"`
	Flushed      uint64 `json:"flushed"`
	ReceivedLSN  string `json:"received_lsn"`
}

// TableStatus describes one table.
type TableStatus struct {
	Table      string `json:"table"`
	Topic      string `json:"topic"`
	Rows       int64  `json:"rows"`
	Commits    int64  `json:"commits"`
	LastCommit string `json:"last_commit,omitempty"`
	SnapshotID int64  `json:"snapshot_id,omitempty"`
	// Lag is how many records of the topic the table has not committed
	// yet; -1 while the table's position is not known.
	Lag int64 `json:"lag"`
	// State is "running", or "paused: <why>" when the sink could not write
	// the table (retried on its own).
	State string `json:"state"`
}

func formatLSN(v uint64) string { return fmt.Sprintf("%X/%X", v>>32, uint32(v)) }

// Status reports the pipeline's state.
func (d *Daemon) Status() Status {
	ss := d.reader.Stats()
	st := Status{
		Pipeline: d.cfg.Pipeline,
		Uptime:   time.Since(d.started).Round(time.Second).String(),
		Source: SourceStatus{
			Slot: d.cfg.Source.Postgres.Slot, Events: ss.Events.Load(), SnapshotRows: ss.SnapshotRows.Load(),
			FlushedLSN: formatLSN(ss.Flushed.Load()), Flushed: ss.Flushed.Load(), ReceivedLSN: formatLSN(ss.Received.Load()),
		},
	}
	for _, t := range d.sink.Stats() {
		ts := TableStatus{Table: t.Table, Topic: t.Topic, Rows: t.Rows.Load(), Commits: t.Commits.Load(), SnapshotID: t.SnapshotID.Load(),
			Lag: d.lag(t), State: "running"}
		if why := t.Paused.Load(); why != nil {
			ts.State = "paused: " + *why
		}
		if ms := t.LastCommit.Load(); ms > 0 {
			ts.LastCommit = time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
		}
		st.Tables = append(st.Tables, ts)
	}
	st.Paused = d.emitter.Paused()
	return st
}

// lag is the number of records of t's topic not yet committed to t.
func (d *Daemon) lag(t *iceberg.TableStats) int64 {
	committed := t.Committed.Load()
	if committed == nil {
		return -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := d.lg.DescribeTopic(ctx, t.Topic)
	if err != nil {
		return -1
	}
	var lag int64
	for _, p := range info.Partitions {
		if int(p.Partition) < len(*committed) {
			lag += p.End - (*committed)[p.Partition]
		}
	}
	return lag
}

// collector adapts the components' stats to Prometheus at scrape time.
type collector struct{ d *Daemon }

var _ prometheus.Collector = (*collector)(nil)

var (
	descSourceEvents  = prometheus.NewDesc("cdcd_source_events_total", "Changes the source made durable in the log.", nil, nil)
	descSnapshotRows  = prometheus.NewDesc("cdcd_source_snapshot_rows_total", "Rows the initial load made durable in the log.", nil, nil)
	descFlushedLSN    = prometheus.NewDesc("cdcd_source_flushed_lsn", "LSN last confirmed to PostgreSQL as flushed.", nil, nil)
	descReceivedLSN   = prometheus.NewDesc("cdcd_source_received_lsn", "Newest WAL position received.", nil, nil)
	descSinkRows      = prometheus.NewDesc("cdcd_sink_rows_total", "Rows committed to the Iceberg table.", []string{"table"}, nil)
	descSinkCommits   = prometheus.NewDesc("cdcd_sink_commits_total", "Commits to the Iceberg table.", []string{"table"}, nil)
	descSinkLastTime  = prometheus.NewDesc("cdcd_sink_last_commit_timestamp_seconds", "Time of the last commit.", []string{"table"}, nil)
	descSinkCommitDur = prometheus.NewDesc("cdcd_sink_last_commit_duration_seconds", "Duration of the last commit.", []string{"table"}, nil)
	descTopicEnd      = prometheus.NewDesc("cdcd_log_end_offset", "Next offset of each partition.", []string{"topic", "partition"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSourceEvents, descSnapshotRows, descFlushedLSN, descReceivedLSN,
		descSinkRows, descSinkCommits, descSinkLastTime, descSinkCommitDur, descTopicEnd} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ss := c.d.reader.Stats()
	ch <- prometheus.MustNewConstMetric(descSourceEvents, prometheus.CounterValue, float64(ss.Events.Load()))
	ch <- prometheus.MustNewConstMetric(descSnapshotRows, prometheus.CounterValue, float64(ss.SnapshotRows.Load()))
	ch <- prometheus.MustNewConstMetric(descFlushedLSN, prometheus.GaugeValue, float64(ss.Flushed.Load()))
	ch <- prometheus.MustNewConstMetric(descReceivedLSN, prometheus.GaugeValue, float64(ss.Received.Load()))
	for _, t := range c.d.sink.Stats() {
		ch <- prometheus.MustNewConstMetric(descSinkRows, prometheus.CounterValue, float64(t.Rows.Load()), t.Table)
		ch <- prometheus.MustNewConstMetric(descSinkCommits, prometheus.CounterValue, float64(t.Commits.Load()), t.Table)
		ch <- prometheus.MustNewConstMetric(descSinkLastTime, prometheus.GaugeValue, float64(t.LastCommit.Load())/1000, t.Table)
		ch <- prometheus.MustNewConstMetric(descSinkCommitDur, prometheus.GaugeValue, time.Duration(t.LastCommitDur.Load()).Seconds(), t.Table)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, topic := range c.d.topics {
		info, err := c.d.lg.DescribeTopic(ctx, topic)
		if err != nil {
			continue
		}
		for _, p := range info.Partitions {
			ch <- prometheus.MustNewConstMetric(descTopicEnd, prometheus.GaugeValue, float64(p.End), topic, fmt.Sprint(p.Partition))
		}
	}
}
