package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/reconcile"
)

// Reconciles run by the daemon: every reconcile.interval (the tables of
// reconcile.tables, repaired when reconcile.repair) and on POST
// /cdcd/reconcile; one at a time, in the background. The last report of
// each table feeds the metrics (cdcd_reconcile_*), GET /cdcd/reconcile and
// the CdcdReconcileDiffers alert.

// reconciles is the daemon's reconcile state.
type reconciles struct {
	once sync.Once
	reqs chan ReconcileRequest // to reconcileLoop; holds one

	mu      sync.Mutex
	running bool                              // queued or running
	last    map[string]*reconcile.TableReport // by Iceberg table
	lastAt  map[string]time.Time
	// runs counts finished runs by result: equal, differs, failed.
	runs map[string]int64
	err  string // the last run's failure
}

func (r *reconciles) requests() chan ReconcileRequest {
	r.once.Do(func() { r.reqs = make(chan ReconcileRequest, 1) })
	return r.reqs
}

// ReconcileRequest is the body of POST /cdcd/reconcile.
type ReconcileRequest struct {
	// Tables to compare (source or Iceberg names); all when empty.
	Tables []string `json:"tables,omitempty"`
	// Repair re-snapshots the keys found different, then compares them
	// again (cdcd reconcile --repair).
	Repair bool `json:"repair,omitempty"`
}

// ReconcileState is GET /cdcd/reconcile: the last report of each table.
type ReconcileState struct {
	Running bool                     `json:"running"`
	Error   string                   `json:"error,omitempty"`
	Tables  []*reconcile.TableReport `json:"tables"`
}

var errReconcileRunning = errors.New("a reconcile is running already")

// AlertReconcileDiffers fires while a table's last reconcile found its
// mirror different from the source (after a repair, if one ran).
const AlertReconcileDiffers = "CdcdReconcileDiffers"

// startReconcile queues a reconcile for reconcileLoop; it refuses while
// one is queued or runs.
func (d *Daemon) startReconcile(req ReconcileRequest) error {
	r := &d.recon
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		return errReconcileRunning
	}
	r.running = true
	r.requests() <- req
	return nil
}

// runReconcile compares the tables now and records the reports.
func (d *Daemon) runReconcile(ctx context.Context, req ReconcileRequest) {
	logger := d.logger.With("component", "reconcile")
	// This daemon runs: a MySQL reader not connected yet is connecting.
	opts := ReconcileOptions{Tables: req.Tables, Running: func(context.Context) bool { return true }}
	if req.Repair {
		opts.Repair = engineSnapshots{d}
	}
	reps, err := reconcileTables(ctx, d.cfg, opts, d.cat, daemonChanges{d}, logger)
	r := &d.recon
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running = false
	if r.last == nil {
		r.last, r.lastAt, r.runs = map[string]*reconcile.TableReport{}, map[string]time.Time{}, map[string]int64{}
	}
	now := time.Now()
	for _, rep := range reps {
		r.last[rep.Iceberg], r.lastAt[rep.Iceberg] = rep, now
	}
	r.err = ""
	switch {
	case err != nil:
		r.err = err.Error()
		r.runs["failed"]++
		logger.Error("reconcile failed", "err", err)
	case reconcileEqual(reps):
		r.runs["equal"]++
	default:
		r.runs["differs"]++
	}
	if d.monitor != nil {
		d.monitor.poke()
	}
}

func reconcileEqual(reps []*reconcile.TableReport) bool {
	for _, r := range reps {
		if !r.EqualNow() {
			return false
		}
	}
	return true
}

// reconcileLoop runs the reconciles: queued by POST /cdcd/reconcile, and
// every reconcile.interval.
func (d *Daemon) reconcileLoop(ctx context.Context) error {
	rc := d.cfg.Reconcile
	var tick <-chan time.Time
	if rc.Interval > 0 {
		t := time.NewTicker(rc.Interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case req := <-d.recon.requests():
			d.runReconcile(ctx, req)
		case <-tick:
			if err := d.startReconcile(ReconcileRequest{Tables: rc.Tables, Repair: rc.Repair}); err != nil {
				d.logger.Info("scheduled reconcile skipped: one is running", "component", "reconcile")
			}
		}
	}
}

// reconcileRoutes serves reconciles:
//
//	POST /cdcd/reconcile   start one (ReconcileRequest); 202, 409 while one runs
//	GET  /cdcd/reconcile   the last report of each table (ReconcileState)
func (d *Daemon) reconcileRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /cdcd/reconcile", func(w http.ResponseWriter, r *http.Request) {
		var req ReconcileRequest
		if r.ContentLength != 0 {
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
				http.Error(w, `the body must be JSON: {"tables": [...], "repair": true}: `+err.Error(), http.StatusBadRequest)
				return
			}
		}
		for _, t := range req.Tables {
			if _, err := d.sourceTable(t); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		if err := d.startReconcile(req); err != nil {
			http.Error(w, err.Error()+": GET /cdcd/reconcile shows when it is done", http.StatusConflict)
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"started": true, "tables": req.Tables, "repair": req.Repair})
	})
	mux.HandleFunc("GET /cdcd/reconcile", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, d.reconcileState())
	})
}

// reconcileState copies the last reports.
func (d *Daemon) reconcileState() ReconcileState {
	r := &d.recon
	r.mu.Lock()
	defer r.mu.Unlock()
	st := ReconcileState{Running: r.running, Error: r.err, Tables: []*reconcile.TableReport{}}
	for _, rep := range r.last {
		st.Tables = append(st.Tables, rep)
	}
	return st
}

// reconcileAlerts are the alerts the last reports call for: a table whose
// mirror differs from its source (after a repair, if one ran).
func (d *Daemon) reconcileAlerts() []Alert {
	r := &d.recon
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Alert
	for name, rep := range r.last {
		if rep.Error != "" || rep.EqualNow() {
			continue
		}
		n := rep.MissingCount + rep.ExtraCount + rep.DifferCount + rep.DuplicateCount
		if rp := rep.Repaired; rp != nil && rp.After != nil {
			n = rp.After.MissingCount + rp.After.ExtraCount + rp.After.DifferCount + rp.After.DuplicateCount
		}
		out = append(out, Alert{Name: AlertReconcileDiffers, Severity: SeverityCritical, Subject: name,
			Summary: fmt.Sprintf("table %s differs from its source %s in %d keys (missing %d, extra %d, differing %d) at the reconcile of %s",
				name, rep.Table, n, rep.MissingCount, rep.ExtraCount, rep.DifferCount, r.lastAt[name].UTC().Format(time.RFC3339)),
			Action: fmt.Sprintf("GET /cdcd/reconcile (or cdcd reconcile -c FILE %s) lists the keys; cdcd reconcile -c FILE --repair %s re-reads them from the source", rep.Table, rep.Table),
			Value:  float64(n)})
	}
	return out
}

// daemonChanges is the daemon's own log and registry, for its reconciles.
type daemonChanges struct{ d *Daemon }

func (c daemonChanges) Describe(ctx context.Context, topic string) (log.TopicInfo, error) {
	return c.d.lg.DescribeTopic(ctx, topic)
}

func (c daemonChanges) Fetch(ctx context.Context, topic string, p int32, off int64, opts log.FetchOptions) ([]log.Record, error) {
	return c.d.lg.Fetch(ctx, topic, p, off, opts)
}

func (c daemonChanges) SchemaByID(id uint32) (string, error) { return c.d.reg.SchemaByID(id) }

// reconcileCollector exports the last report of each table.
type reconcileCollector struct{ d *Daemon }

var _ prometheus.Collector = reconcileCollector{}

var (
	descRecRunning  = desc("cdcd_reconcile_running", "1 while a reconcile runs in the daemon.")
	descRecRuns     = desc("cdcd_reconcile_runs_total", "Reconciles the daemon finished, by result (equal, differs, failed).", "result")
	descRecEqual    = desc("cdcd_reconcile_equal", "1 when the table's last reconcile found its mirror equal to the source (after a repair, if one ran), else 0.", "table")
	descRecRows     = desc("cdcd_reconcile_rows", "Rows the table's last reconcile compared.", "table")
	descRecKeys     = desc("cdcd_reconcile_keys", "Keys the table's last reconcile found different, by kind (missing, extra, differing, duplicate) or left unchecked.", "table", "kind")
	descRecDuration = desc("cdcd_reconcile_duration_seconds", "How long the table's last reconcile took.", "table")
	descRecRate     = desc("cdcd_reconcile_rows_per_second", "Rows per second of the table's last reconcile.", "table")
	descRecCPU      = desc("cdcd_reconcile_source_cpu_microseconds_per_row", "The source's CPU time per row compared in the table's last reconcile (0: unknown).", "table")
	descRecLast     = desc("cdcd_reconcile_last_run_timestamp_seconds", "When the table's last reconcile finished (Unix time).", "table")
)

func (c reconcileCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRecRunning, descRecRuns, descRecEqual, descRecRows, descRecKeys, descRecDuration, descRecRate, descRecCPU, descRecLast} {
		ch <- d
	}
}

func (c reconcileCollector) Collect(ch chan<- prometheus.Metric) {
	r := &c.d.recon
	r.mu.Lock()
	defer r.mu.Unlock()
	gauge(ch, descRecRunning, b2f(r.running))
	for _, res := range []string{"equal", "differs", "failed"} {
		counter(ch, descRecRuns, float64(r.runs[res]), res)
	}
	for name, rep := range r.last {
		if rep.Error != "" {
			continue
		}
		gauge(ch, descRecEqual, b2f(rep.EqualNow()), name)
		gauge(ch, descRecRows, float64(rep.Rows), name)
		for kind, n := range map[string]int64{"missing": int64(rep.MissingCount), "extra": int64(rep.ExtraCount),
			"differing": int64(rep.DifferCount), "duplicate": int64(rep.DuplicateCount), "unchecked": rep.Unchecked} {
			gauge(ch, descRecKeys, float64(n), name, kind)
		}
		gauge(ch, descRecDuration, rep.Duration.Seconds(), name)
		gauge(ch, descRecRate, rep.RowsPerSecond, name)
		gauge(ch, descRecCPU, rep.SourceCPUMicrosPerRow, name)
		gauge(ch, descRecLast, float64(r.lastAt[name].Unix()), name)
	}
}
