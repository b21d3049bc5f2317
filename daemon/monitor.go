package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/cdcd-dev/cdcd/log"
)

// monitor polls the replication slot, follows each table's consumer lag,
// commit progress and pause state, and evaluates the alert rules, every
// alerts.interval. It never fails the daemon: what it cannot read it
// reports (SlotStatus.Up false, a logged warning).
type monitor struct {
	d      *Daemon
	slot   *slotPoller
	alerts *alertEngine
	hook   *webhook // nil without alerts.webhook

	mu       sync.Mutex
	tables   map[string]*tableWatch // topic ->
	slotSeen bool
}

// tableWatch is what the monitor knows about one table between checks.
type tableWatch struct {
	lag          []log.PartitionLag
	lagRecords   int64
	lagSeconds   float64
	commits      int64
	waitingSince time.Time // changes waiting since, without a commit; zero if none
	pausedSince  time.Time
	stalledFor   time.Duration
}

func newMonitor(d *Daemon) *monitor {
	m := &monitor{d: d, tables: map[string]*tableWatch{}}
	pg := d.cfg.Source.Postgres
	m.slot = newSlotPoller(pg.DSN, pg.Slot, pg.Tables, d.logger.With("component", "monitor"))
	var notify func(Alert, bool, time.Time)
	if w := d.cfg.Alerts.Webhook; w != nil {
		m.hook = newWebhook(*w, d.cfg.Pipeline, d.cfg.Admin.Listen, d.cfg.Alerts.RealertInterval, d.logger)
		notify = m.hook.enqueue
	}
	m.alerts = newAlertEngine(d.cfg.Alerts.RealertInterval, d.logger, notify)
	for _, topic := range d.topics {
		m.tables[topic] = &tableWatch{}
	}
	return m
}

// run checks at once, then every alerts.interval, until ctx ends.
func (m *monitor) run(ctx context.Context) error {
	defer m.slot.close()
	var wg sync.WaitGroup
	if m.hook != nil {
		wg.Go(func() { _ = m.hook.run(ctx) })
	}
	defer wg.Wait()
	interval := m.d.cfg.Alerts.Interval
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		m.check(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// check runs one round: poll, follow the tables, evaluate the rules.
func (m *monitor) check(ctx context.Context) {
	cfg := m.d.cfg
	cctx, cancel := context.WithTimeout(ctx, max(cfg.Alerts.Interval, 5*time.Second))
	defer cancel()
	loading := m.d.loading()
	m.slot.poll(cctx, loading)
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	in := ruleInputs{slot: m.slot.status(), loading: loading, slotName: cfg.Source.Postgres.Slot, commitInt: cfg.Sink.Iceberg.CommitInterval}
	stats := m.d.sink.Stats()
	m.mu.Lock()
	if in.slot.Up && in.slot.Exists {
		m.slotSeen = true
	}
	in.slotSeen = m.slotSeen
	m.mu.Unlock()
	for _, ts := range stats {
		lag, err := m.d.lg.TopicLag(cctx, m.d.group(), ts.Topic)
		m.mu.Lock()
		w := m.tables[ts.Topic]
		if w == nil {
			w = &tableWatch{}
			m.tables[ts.Topic] = w
		}
		if err == nil {
			w.lag, w.lagRecords, w.lagSeconds = lag, 0, 0
			for _, p := range lag {
				w.lagRecords += p.Records
				w.lagSeconds = max(w.lagSeconds, p.Seconds)
			}
		}
		// Commit progress: the clock runs while changes wait and no
		// commit lands; any commit, or no changes waiting, resets it.
		commits := ts.Commits.Load()
		waiting := m.d.lag(ts) > 0
		switch {
		case !waiting || commits != w.commits:
			w.waitingSince = time.Time{}
			if waiting {
				w.waitingSince = now
			}
		case w.waitingSince.IsZero():
			w.waitingSince = now
		}
		w.commits = commits
		w.stalledFor = 0
		if !w.waitingSince.IsZero() {
			w.stalledFor = now.Sub(w.waitingSince)
		}
		paused, since, reason := m.d.pausedState(ts.Topic)
		if !paused {
			w.pausedSince = time.Time{}
		} else if w.pausedSince = since; since.IsZero() {
			w.pausedSince = now
		}
		ti := tableInputs{name: ts.Table, lagSeconds: w.lagSeconds, lagRecords: w.lagRecords, paused: paused,
			pausedReason: reason, stalledFor: w.stalledFor}
		if paused {
			ti.pausedFor = now.Sub(w.pausedSince)
		}
		m.mu.Unlock()
		in.tables = append(in.tables, ti)
	}
	m.alerts.update(now, evaluate(cfg.Alerts, in))
}

// watch returns a copy of what the monitor knows about a topic's table.
func (m *monitor) watch(topic string) tableWatch {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := m.tables[topic]; w != nil {
		return *w
	}
	return tableWatch{}
}

// pausedState reports whether a table is paused, since when and why.
//
// HOOK: tables pause when the registry refuses a schema change (the
// emitter's pause/resume). The emitter (or the sink) reports it by having
// a method pausedState(topic string) (paused bool, since time.Time, reason
// string); the type assertion below finds it, and /status, the metrics
// and the CdcdTablePaused alert follow. Until then no table is paused.
func (d *Daemon) pausedState(topic string) (bool, time.Time, string) {
	// Held by the emitter (a refused schema), or paused by the sink (a
	// table it cannot write; retried on its own).
	if paused, since, why := d.emitter.pausedState(topic); paused {
		return paused, since, why
	}
	for _, t := range d.sink.Stats() {
		if t.Topic != topic {
			continue
		}
		if why := t.Paused.Load(); why != nil {
			return true, time.UnixMilli(t.PausedAt.Load()), *why
		}
	}
	return false, time.Time{}, ""
}

// group is the sink's consumer group, whose offsets give the lag.
func (d *Daemon) group() string { return "cdcd-sink-" + d.cfg.Pipeline }

// loading reports whether the initial load runs.
func (d *Daemon) loading() bool {
	st := d.reader.Stats()
	return !st.Streaming.Load() && (st.SnapshotRows.Load() > 0 || d.intake.loading.Load())
}
