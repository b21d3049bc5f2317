package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/source/postgres"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Incremental snapshots on the daemon's surface: the admin API behind
// `cdcd snapshot`, their progress in /status and the metrics.

// incrementalConfig is the reader's incremental snapshot configuration.
func incrementalConfig(pg *config.Postgres) postgres.IncrementalConfig {
	return postgres.IncrementalConfig{
		Load: pg.Snapshot == config.SnapshotIncremental, LoadResets: true,
		ChunkRows: pg.Incremental.ChunkRows, MaxRowsPerSecond: pg.Incremental.MaxRowsPerSecond,
		SignalTable: pg.Incremental.SignalTable,
	}
}

// SnapshotRequest is the body of POST /cdcd/snapshot.
type SnapshotRequest struct {
	// Tables: source names ("schema.table", a bare name is in public), or
	// the Iceberg tables' names.
	Tables []string `json:"tables"`
	// Where limits the rows read (an SQL condition); not with Replace.
	Where string `json:"where,omitempty"`
	// Replace begins with a reset marker: the sink empties the table,
	// which the snapshot fills again (the repair of a mirror that cannot
	// be trusted). It also lifts a pause of the table.
	Replace bool `json:"replace,omitempty"`
}

// snapshotter is the optional ability of a source to run incremental
// snapshots (the PostgreSQL reader has it).
type snapshotter interface{ Snapshots() *snapshot.Engine }

// snapshots returns the source's incremental snapshot engine; nil when it
// has none.
func (d *Daemon) snapshots() *snapshot.Engine {
	if s, ok := d.reader.(snapshotter); ok {
		return s.Snapshots()
	}
	return nil
}

// snapshotRoutes serves incremental snapshots:
//
//	GET  /cdcd/snapshots          progress of queued, running and finished snapshots
//	POST /cdcd/snapshot           queue snapshots (SnapshotRequest); 202 once saved
//	POST /cdcd/snapshot/stop      stop ({"tables": [...]}, or all)
//	POST /cdcd/snapshot/pause     hold every snapshot after its current chunk
//	POST /cdcd/snapshot/resume
func (d *Daemon) snapshotRoutes(mux *http.ServeMux) {
	eng := d.snapshots()
	if eng == nil {
		return
	}
	mux.HandleFunc("GET /cdcd/snapshots", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, eng.Progress())
	})
	mux.HandleFunc("POST /cdcd/snapshot", func(w http.ResponseWriter, r *http.Request) {
		var req SnapshotRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
			http.Error(w, "the body must be JSON: {\"tables\": [...], \"where\": \"...\", \"replace\": true}: "+err.Error(), http.StatusBadRequest)
			return
		}
		reqs, err := d.snapshotRequests(req)
		if err == nil {
			err = eng.Submit(r.Context(), reqs...)
		}
		if errors.Is(err, snapshot.ErrBadRequest) || errors.Is(err, errNotCaptured) {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, http.StatusAccepted, reqs)
	})
	mux.HandleFunc("POST /cdcd/snapshot/stop", func(w http.ResponseWriter, r *http.Request) {
		var req SnapshotRequest
		if r.ContentLength != 0 {
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
				http.Error(w, "the body must be JSON: {\"tables\": [...]}: "+err.Error(), http.StatusBadRequest)
				return
			}
		}
		var tables []string
		for _, t := range req.Tables {
			src, err := d.sourceTable(t)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			tables = append(tables, src)
		}
		stopped, err := eng.Stop(r.Context(), tables...)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"stopped": stopped})
	})
	for verb, fn := range map[string]func(*http.Request) error{
		"pause":  func(r *http.Request) error { return eng.Pause(r.Context()) },
		"resume": func(r *http.Request) error { return eng.Resume(r.Context()) },
	} {
		mux.HandleFunc("POST /cdcd/snapshot/"+verb, func(w http.ResponseWriter, r *http.Request) {
			if err := fn(r); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			writeJSON(w, http.StatusOK, map[string]string{"snapshots": verb + "d"})
		})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

var errNotCaptured = errors.New("not a table of this pipeline")

// snapshotRequests turns a SnapshotRequest into the engine's requests.
func (d *Daemon) snapshotRequests(req SnapshotRequest) ([]snapshot.Request, error) {
	if len(req.Tables) == 0 {
		return nil, fmt.Errorf("%w: name at least one table", snapshot.ErrBadRequest)
	}
	var out []snapshot.Request
	for _, t := range req.Tables {
		src, err := d.sourceTable(t)
		if err != nil {
			return nil, err
		}
		out = append(out, snapshot.Request{Table: src, Where: req.Where, Replace: req.Replace, Origin: "api"})
	}
	return out, nil
}

// sourceTable resolves a table name as an operator may write it: the
// source's "schema.table" (or a bare name in public), the Iceberg table's
// "namespace.table", or the topic.
func (d *Daemon) sourceTable(name string) (string, error) {
	ice := d.cfg.Sink.Iceberg
	for _, src := range d.cfg.Source.TableNames() {
		ns, tbl := splitTable(src)
		ins, itbl := ice.TableIdent(src)
		if slices.Contains([]string{src, ns + "." + tbl, ins + "." + itbl, d.topicOf(ns, tbl)}, name) ||
			ns == "public" && name == tbl {
			return ns + "." + tbl, nil
		}
	}
	return "", fmt.Errorf("%w: %s (tables: %s)", errNotCaptured, name, strings.Join(d.cfg.Source.TableNames(), ", "))
}

// incrementalStatus is a table's incremental snapshot in /status, when
// one is queued or running.
func (d *Daemon) incrementalStatus(src string) (snapshot.Progress, bool) {
	eng := d.snapshots()
	if eng == nil {
		return snapshot.Progress{}, false
	}
	for _, p := range eng.Progress() {
		if p.Table == src && p.Finished.IsZero() {
			return p, true
		}
	}
	return snapshot.Progress{}, false
}

// applyIncremental shows a queued or running incremental snapshot of a
// table as its snapshot progress.
func (d *Daemon) applyIncremental(src string, ts *TableStatus) {
	p, ok := d.incrementalStatus(src)
	if !ok {
		return
	}
	ts.Snapshot = SnapshotStatus{Rows: p.Rows, Estimated: p.Estimated, Percent: p.Percent, Incremental: p.State,
		RowsPerSecond: math.Round(p.RowsPerSecond), ETASeconds: p.ETA.Round(time.Second).Seconds()}
}

// snapshotCollector exports incremental snapshots' progress.
type snapshotCollector struct{ d *Daemon }

var _ prometheus.Collector = snapshotCollector{}

var (
	descIncRows    = desc("cdcd_table_incremental_snapshot_rows", "Rows the table's current incremental snapshot has read (all runs of it).", "table")
	descIncEst     = desc("cdcd_table_incremental_snapshot_rows_estimated", "Rows PostgreSQL estimated when the table's incremental snapshot started.", "table")
	descIncRunning = desc("cdcd_table_incremental_snapshot_running", "1 while the table's incremental snapshot runs, 0 while it waits in the queue or is paused.", "table")
	descIncRate    = desc("cdcd_table_incremental_snapshot_rows_per_second", "Rows per second the table's incremental snapshot read since it started in this process.", "table")
	descIncETA     = desc("cdcd_table_incremental_snapshot_eta_seconds", "Seconds the table's incremental snapshot needs at its rate to read the rows estimated; 0 when unknown.", "table")
)

func (c snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIncRows, descIncEst, descIncRunning, descIncRate, descIncETA} {
		ch <- d
	}
}

func (c snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	eng := c.d.snapshots()
	if eng == nil {
		return
	}
	ice := c.d.cfg.Sink.Iceberg
	for _, p := range eng.Progress() {
		if !p.Finished.IsZero() {
			continue
		}
		ns, tbl := ice.TableIdent(p.Table)
		name := ns + "." + tbl
		gauge(ch, descIncRows, float64(p.Rows), name)
		gauge(ch, descIncEst, float64(p.Estimated), name)
		gauge(ch, descIncRunning, b2f(p.State == "running"), name)
		gauge(ch, descIncRate, p.RowsPerSecond, name)
		gauge(ch, descIncETA, p.ETA.Seconds(), name)
	}
}
