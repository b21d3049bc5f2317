package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/source/postgres"
)

// monitor polls the replication slot, follows each table's consumer lag,
// commit progress and pause state, and evaluates the alert rules, every
// alerts.interval. It never fails the daemon: what it cannot read it
// reports (SlotStatus.Up false, a logged warning).
type monitor struct {
	d      *Daemon
	slot   slotWatch
	alerts *alertEngine
	hook   *webhook // nil without alerts.webhook

	// poked asks for a check now (a table paused).
	poked chan struct{}

	mu       sync.Mutex
	tables   map[string]*tableWatch // topic ->
	slotSeen bool
}

// slotWatch is what the monitor needs of the source's replication slot:
// a postgres.SlotMonitor, or noSlot for a source without one (MySQL).
type slotWatch interface {
	Poll(ctx context.Context, loading bool)
	Status() SlotStatus
	Estimate(table string) int64
	Close()
}

// noSlot is the slotWatch of a source without a replication slot: it polls
// nothing and reports no slot and no estimates.
type noSlot struct{}

func (noSlot) Poll(context.Context, bool) {}
func (noSlot) Status() SlotStatus         { return SlotStatus{MaxWALKeep: -1} }
func (noSlot) Estimate(string) int64      { return 0 }
func (noSlot) Close()                     {}

// poke makes the monitor check at once, without waiting for its interval.
func (m *monitor) poke() {
	select {
	case m.poked <- struct{}{}:
	default:
	}
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
	m := &monitor{d: d, tables: map[string]*tableWatch{}, poked: make(chan struct{}, 1)}
	if pg := d.cfg.Source.Postgres; pg != nil {
		m.slot = postgres.NewSlotMonitor(pg.DSN, pg.Slot, rawNames(pg.Tables), d.logger.With("component", "monitor"))
	} else {
		m.slot = noSlot{}
	}
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
	defer m.slot.Close()
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
		case <-m.poked:
		}
	}
}

// check runs one round: poll, follow the tables, evaluate the rules.
func (m *monitor) check(ctx context.Context) {
	cfg := m.d.cfg
	cctx, cancel := context.WithTimeout(ctx, max(cfg.Alerts.Interval, 5*time.Second))
	defer cancel()
	loading := m.d.loading()
	m.slot.Poll(cctx, loading)
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	in := ruleInputs{slot: m.slot.Status(), loading: loading, slotName: slotName(cfg), commitInt: cfg.Sink.Iceberg.CommitInterval,
		binlog: m.d.binlogStatus()}
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
		m.mu.Unlock()
		p := m.d.tablePause(ts.Topic)
		m.mu.Lock()
		if !p.Paused {
			w.pausedSince = time.Time{}
		} else if w.pausedSince = p.Since; p.Since.IsZero() {
			w.pausedSince = now
		}
		ti := tableInputs{name: ts.Table, lagSeconds: w.lagSeconds, lagRecords: w.lagRecords, paused: p.Paused,
			pausedReason: p.Reason, pausedFix: p.Fix, stalledFor: w.stalledFor}
		if f := ts.Failing.Load(); f != nil {
			ti.commitError = *f
		}
		if p.Paused {
			ti.pausedFor = now.Sub(w.pausedSince)
		}
		m.mu.Unlock()
		in.tables = append(in.tables, ti)
	}
	in.log = m.logInputs(stats)
	in.outbox = m.d.outboxInputs(cctx)
	m.alerts.update(now, append(evaluate(cfg.Alerts, in), m.d.reconcileAlerts()...))
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

// tablePause is why a table is paused, as the status, the metrics and
// the alerts show it.
type tablePause struct {
	Paused bool
	Since  time.Time
	// Kind is the emitter's pause kind (schema, value, table) or sink.
	Kind, Reason, Fix string
}

// sinkFix is what resolves a table the sink paused.
const sinkFix = "read the table's error in the daemon's log (catalog or storage unreachable, permissions, a type change Iceberg " +
	"cannot apply); the sink retries the table on its own from the offsets its last snapshot holds, and its changes wait in the log meanwhile"

// tablePause reports whether topic's table is paused — held by the emitter,
// or paused by the sink — since when, why and what resolves it.
func (d *Daemon) tablePause(topic string) tablePause {
	if ps := d.emitter.pauseOf(topic); ps != nil {
		return tablePause{Paused: true, Since: ps.Since, Kind: ps.kind(), Reason: ps.Reason, Fix: ps.Fix}
	}
	return d.monitor.sinkPause(topic)
}

// pausedState reports whether a table is paused, since when and why.
func (d *Daemon) pausedState(topic string) (bool, time.Time, string) {
	p := d.tablePause(topic)
	return p.Paused, p.Since, p.Reason
}

// sinkPause is the sink's pause of topic's table (the sink keeps it
// until the table commits again or has nothing left to commit).
func (m *monitor) sinkPause(topic string) tablePause {
	for _, t := range m.d.sink.Stats() {
		if t.Topic != topic {
			continue
		}
		why := t.Paused.Load()
		if why == nil {
			return tablePause{}
		}
		fix := sinkFix
		if f := t.PausedFix.Load(); f != nil && *f != "" {
			fix = *f
		}
		return tablePause{Paused: true, Since: time.UnixMilli(t.PausedAt.Load()), Kind: "sink", Reason: *why, Fix: fix}
	}
	return tablePause{}
}

// group is the sink's consumer group, whose offsets give the lag.
func (d *Daemon) group() string { return "cdcd-sink-" + d.cfg.Pipeline }

// loading reports whether the initial load runs.
func (d *Daemon) loading() bool {
	st := d.reader.Stats()
	return !st.Streaming.Load() && (st.SnapshotRows.Load() > 0 || d.intake.loading.Load())
}
