package daemon

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cdcd-dev/cdcd/sink/iceberg"
	"github.com/cdcd-dev/cdcd/source/postgres"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// SlotStatus is the replication slot as the monitor last saw it (the
// /status document's "slot"; postgres.SlotMonitor fills it).
type SlotStatus = postgres.SlotStatus

// Status is the JSON of /status, which `cdcd status` renders.
type Status struct {
	Pipeline string `json:"pipeline"`
	Version  string `json:"version"`
	// Role is the process's role (config role): all, source or sink. A
	// sink process lists only the tables it runs now.
	Role string `json:"role,omitempty"`
	// State is one of the State* constants; Ready mirrors /readyz.
	State  string        `json:"state"`
	Ready  bool          `json:"ready"`
	Uptime string        `json:"uptime"`
	Source SourceStatus  `json:"source"`
	Slot   SlotStatus    `json:"slot"`
	Tables []TableStatus `json:"tables"`
	// Alerts are the firing alerts, most severe first.
	Alerts []Alert `json:"alerts"`
	// Paused details every paused table — held by the emitter (a refused
	// schema, a faulty value, a table the source lost track of) or paused
	// by the sink: why, what is held, and how to resolve it.
	Paused []PausedTable `json:"paused,omitempty"`
	// Snapshots are the incremental snapshots queued, running and finished
	// since start (daemon/snapshot.go).
	Snapshots []snapshot.Progress `json:"snapshots,omitempty"`
	// Outbox is the outbox relay (daemon/outbox.go); nil without one.
	Outbox *OutboxStatus `json:"outbox,omitempty"`
}

// SourceStatus describes the reader.
type SourceStatus struct {
	Slot         string `json:"slot"`
	Streaming    bool   `json:"streaming"`
	Events       int64  `json:"events"`
	SnapshotRows int64  `json:"snapshot_rows"`
	// LoadRowsPerSecond and LoadETASeconds describe a running initial load
	// (all tables): rows per second since this run's load started, and the
	// time left at that rate (0 when unknown or done).
	LoadRowsPerSecond float64 `json:"load_rows_per_second,omitempty"`
	LoadETASeconds    float64 `json:"load_eta_seconds,omitempty"`
	FlushedLSN        string  `json:"flushed_lsn"`
	Flushed           uint64  `json:"flushed"`
	ReceivedLSN       string  `json:"received_lsn"`
	// Waiting says what the source waits for while a step takes long
	// (creating the slot waits for running transactions to end).
	Waiting string `json:"waiting,omitempty"`
	// Binlog is the MySQL / MariaDB reader's position; nil for PostgreSQL.
	Binlog *BinlogStatus `json:"binlog,omitempty"`
}

// TableStatus describes one table.
type TableStatus struct {
	// Table is the Iceberg table; Source the captured table.
	Table  string `json:"table"`
	Source string `json:"source"`
	Topic  string `json:"topic"`
	// State is loading, streaming, paused or stopping (starting before the
	// source is ready).
	State string `json:"state"`
	// EventsIn are changes appended to the log since start; Rows are rows
	// committed to the table since start.
	EventsIn int64 `json:"events_in"`
	Rows     int64 `json:"rows"`
	Commits  int64 `json:"commits"`
	// Snapshot is the initial load's progress for this table.
	Snapshot   SnapshotStatus `json:"snapshot"`
	LastCommit string         `json:"last_commit,omitempty"`
	SnapshotID int64          `json:"snapshot_id,omitempty"`
	// Lag is how many records of the topic the table has not committed
	// yet; -1 while the table's position is not known. LagSeconds is the
	// age of the oldest of them (from the last monitor check).
	Lag        int64   `json:"lag"`
	LagSeconds float64 `json:"lag_seconds"`
	// Paused, with why, since when and what resolves it (see
	// Daemon.tablePause).
	Paused       bool      `json:"paused"`
	PausedReason string    `json:"paused_reason,omitempty"`
	PausedSince  time.Time `json:"paused_since,omitzero"`
	PausedFix    string    `json:"paused_fix,omitempty"`
	// CommitStallSeconds is how long changes have waited without a
	// successful commit (0 when none wait); CommitsStalled is set once that
	// is past a few commit intervals (at least a minute): its commits fail
	// or hang.
	CommitStallSeconds float64 `json:"commit_stall_seconds"`
	CommitsStalled     bool    `json:"commits_stalled,omitempty"`
	// CommitError is the sink's last error while the table's commits fail
	// (they are retried).
	CommitError string `json:"commit_error,omitempty"`
}

// SnapshotStatus is one table's initial-load progress, or its incremental
// snapshot's while one is queued or runs.
type SnapshotStatus struct {
	// Rows loaded since start; Estimated from pg_class.reltuples (0 when
	// unknown); Percent is 100 once the load is over, -1 when unknown.
	Rows      int64   `json:"rows"`
	Estimated int64   `json:"estimated"`
	Percent   float64 `json:"percent"`
	Done      bool    `json:"done"`
	// Incremental: the rate and the time left at it (0 when unknown) of
	// the table's incremental snapshot, and its state (queued, running,
	// paused).
	Incremental   string  `json:"incremental,omitempty"`
	RowsPerSecond float64 `json:"rows_per_second,omitempty"`
	ETASeconds    float64 `json:"eta_seconds,omitempty"`
	// The load's progress into the Iceberg table (daemon/progress.go):
	// Committed are the rows loads committed to it since start,
	// CommittedPercent their share of the rows the load read (of the rows
	// it is expected to read while it reads; 100 once AllCommitted, -1
	// unknown), CommitRowsPerSecond their rate over the last half minute
	// and CommitETASeconds the time left at it (0 when unknown or done).
	Committed           int64   `json:"committed"`
	CommittedPercent    float64 `json:"committed_percent"`
	AllCommitted        bool    `json:"all_committed"`
	CommitRowsPerSecond float64 `json:"commit_rows_per_second,omitempty"`
	CommitETASeconds    float64 `json:"commit_eta_seconds,omitempty"`
}

func formatLSN(v uint64) string { return fmt.Sprintf("%X/%X", v>>32, uint32(v)) }

// state returns the lifecycle state, with starting refined by the source.
func (d *Daemon) lifecycleState() string {
	s, _ := d.life.Load().(string)
	if s != StateStarting {
		return s
	}
	switch {
	case d.reader.Stats().Streaming.Load(), !d.runsSource():
		return StateStreaming
	case d.loading():
		return StateLoading
	}
	return StateStarting
}

// ready reports whether /readyz answers 200: the source streams or loads,
// and no stop has begun.
func ready(state string) bool { return state == StateStreaming || state == StateLoading }

// Status reports the pipeline's state.
func (d *Daemon) Status() Status {
	ss := d.reader.Stats()
	state := d.lifecycleState()
	load := ss.SnapshotProgress()
	st := Status{
		Pipeline: d.cfg.Pipeline, Version: Version, Role: d.cfg.Role, State: state, Ready: ready(state),
		Uptime: time.Since(d.started).Round(time.Second).String(),
		Source: SourceStatus{
			Slot: slotName(d.cfg), Streaming: ss.Streaming.Load(), Events: ss.Events.Load(), SnapshotRows: ss.SnapshotRows.Load(),
			FlushedLSN: formatLSN(ss.Flushed.Load()), Flushed: ss.Flushed.Load(), ReceivedLSN: formatLSN(ss.Received.Load()),
		},
		Slot:   d.monitor.slot.Status(),
		Alerts: d.monitor.alerts.firing(),
	}
	if w := ss.Waiting.Load(); w != nil {
		st.Source.Waiting = *w
	}
	st.Source.Binlog = d.binlogStatus()
	st.Outbox = d.outboxStatus()
	if !st.Source.Streaming && load.RowsPerSecond > 0 {
		st.Source.LoadRowsPerSecond = math.Round(load.RowsPerSecond)
		st.Source.LoadETASeconds = load.ETA.Round(time.Second).Seconds()
	}
	sources := d.sourceTables()
	for _, t := range d.sink.Stats() {
		if !d.showsTable(t.Topic) {
			continue
		}
		w := d.monitor.watch(t.Topic)
		src := sources[t.Topic]
		ts := TableStatus{Table: t.Table, Source: src, Topic: t.Topic, Rows: t.Rows.Load(), Commits: t.Commits.Load(),
			SnapshotID: t.SnapshotID.Load(), Lag: d.lag(t), LagSeconds: w.lagSeconds, CommitStallSeconds: w.stalledFor.Seconds()}
		ts.CommitsStalled = w.stalledFor >= max(4*d.cfg.Sink.Iceberg.CommitInterval, time.Minute)
		if f := t.Failing.Load(); f != nil {
			ts.CommitError = *f
		}
		if c := d.intake.tables[src]; c != nil {
			ts.EventsIn = c.Events.Load()
			ts.Snapshot.Rows = c.SnapshotRows.Load()
		}
		ts.Snapshot.Estimated = d.monitor.slot.Estimate(src)
		ts.Snapshot.Done = ss.Streaming.Load()
		switch {
		case ts.Snapshot.Done:
			ts.Snapshot.Percent = 100
		case ts.Snapshot.Estimated > 0:
			ts.Snapshot.Percent = min(99.9, 100*float64(ts.Snapshot.Rows)/float64(ts.Snapshot.Estimated))
		default:
			ts.Snapshot.Percent = -1
		}
		d.applyIncremental(src, &ts)
		applyLoad(&ts.Snapshot, d.loadView(t, src, func() int64 { return ts.Lag }))
		if ms := t.LastCommit.Load(); ms > 0 {
			ts.LastCommit = time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
		}
		p := d.tablePause(t.Topic)
		ts.Paused, ts.PausedSince, ts.PausedReason, ts.PausedFix = p.Paused, p.Since, p.Reason, p.Fix
		ts.State = state
		if ts.Paused {
			ts.State = "paused"
		}
		if p.Kind == "sink" {
			st.Paused = append(st.Paused, PausedTable{Table: t.Table, Topic: t.Topic, Since: p.Since, Kind: p.Kind, Reason: p.Reason,
				Held: max(ts.Lag, 0), Resolve: p.Fix})
		}
		st.Tables = append(st.Tables, ts)
	}
	for _, p := range d.emitter.Paused() {
		if id, ok := d.idents[p.Topic]; ok {
			p.Table = strings.Join(id, ".")
		}
		st.Paused = append(st.Paused, p)
	}
	d.alertPausedTables(&st)
	if eng := d.snapshots(); eng != nil {
		st.Snapshots = eng.Progress()
	}
	return st
}

// alertPausedTables adds the alert of every paused table the monitor has
// not evaluated yet (it checks every alerts.interval: a table paused since
// its last check showed as paused with no alert), and asks the monitor to
// check now, so the alert fires (and its webhook goes out) at once. Status
// never shows a paused table without its alert.
func (d *Daemon) alertPausedTables(st *Status) {
	missing := false
	for _, ts := range st.Tables {
		if !ts.Paused || slices.ContainsFunc(st.Alerts, func(a Alert) bool { return a.Name == AlertTablePaused && a.Subject == ts.Table }) {
			continue
		}
		since := ts.PausedSince
		if since.IsZero() {
			since = time.Now()
		}
		a := pausedAlert(d.cfg.Alerts, ts.Table, ts.PausedReason, ts.PausedFix, time.Since(since))
		a.Since = since
		st.Alerts = append(st.Alerts, a)
		missing = true
	}
	if missing {
		d.monitor.poke()
	}
}

// sourceTables maps each topic to its "schema.table" (unquoted, as the
// source names it).
func (d *Daemon) sourceTables() map[string]string {
	out := make(map[string]string, len(d.topics))
	for _, name := range d.cfg.Source.TableNames() {
		ns, tbl := splitTable(name)
		out[d.topicOf(ns, tbl)] = ns + "." + tbl
	}
	return out
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
			lag += d.recordsAfter(ctx, t.Topic, p, (*committed)[p.Partition])
		}
	}
	return lag
}
