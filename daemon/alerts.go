package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cdcd-dev/cdcd/config"
)

// Alert names, the same as in examples/prometheus-rules.yml.
const (
	AlertSlotLagBytes      = "CdcdSlotLagBytes"
	AlertSlotLagTime       = "CdcdSlotLagTime"
	AlertSlotSafeWALLow    = "CdcdSlotSafeWALLow"
	AlertSlotWALUnreserved = "CdcdSlotWALUnreserved"
	AlertSlotLost          = "CdcdSlotLost"
	AlertConsumerLag       = "CdcdConsumerLag"
	AlertTablePaused       = "CdcdTablePaused"
	AlertCommitsFailing    = "CdcdCommitsFailing"
)

// Severities, as the severity label; warning is logged at WARN, critical
// at ERROR.
const (
	SeverityWarning  = "warning"
	SeverityCritical = "critical"
)

// Alert is one firing alert.
type Alert struct {
	Name     string `json:"name"`
	Severity string `json:"severity"`
	// Subject is the slot or the table ("cdc.orders") it is about.
	Subject string `json:"subject"`
	// Summary says what happened; Action what to do.
	Summary string  `json:"summary"`
	Action  string  `json:"action"`
	Value   float64 `json:"value"`
	// Since is when it started firing (at any severity).
	Since    time.Time `json:"since"`
	lastSent time.Time
}

func (a *Alert) key() string { return a.Name + "\x00" + a.Subject }

// alertEngine turns evaluated conditions into fire, re-alert and resolve
// events, each logged, counted and handed to the webhook.
type alertEngine struct {
	realert time.Duration
	logger  *slog.Logger
	notify  func(a Alert, resolved bool, now time.Time) // webhook; nil when none

	mu     sync.Mutex
	active map[string]*Alert
}

func newAlertEngine(realert time.Duration, logger *slog.Logger, notify func(Alert, bool, time.Time)) *alertEngine {
	return &alertEngine{realert: realert, logger: logger.With("component", "alerts"), notify: notify, active: map[string]*Alert{}}
}

// firing returns the active alerts, most severe first.
func (e *alertEngine) firing() []Alert {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Alert, 0, len(e.active))
	for _, a := range e.active {
		out = append(out, *a)
	}
	slices.SortFunc(out, func(a, b Alert) int {
		if a.Severity != b.Severity {
			return strings.Compare(a.Severity, b.Severity) // critical < warning
		}
		return strings.Compare(a.key(), b.key())
	})
	return out
}

// update takes the conditions true now: new ones fire, changed severities
// fire again, those gone resolve, and long-firing ones are re-announced.
func (e *alertEngine) update(now time.Time, conds []Alert) {
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := make(map[string]bool, len(conds))
	for _, c := range conds {
		k := c.key()
		seen[k] = true
		a, ok := e.active[k]
		switch {
		case !ok:
			c.Since, c.lastSent = now, now
			e.active[k] = &c
			e.announce(c, "alert firing", now, false)
		case a.Severity != c.Severity:
			since := a.Since
			*a = c
			a.Since, a.lastSent = since, now
			e.announce(*a, "alert severity changed", now, false)
		default:
			a.Summary, a.Action, a.Value = c.Summary, c.Action, c.Value
			if now.Sub(a.lastSent) >= e.realert {
				a.lastSent = now
				e.announce(*a, "alert still firing", now, false)
			}
		}
	}
	for k, a := range e.active {
		if !seen[k] {
			delete(e.active, k)
			e.announce(*a, "alert resolved", now, true)
		}
	}
}

// announce logs an event and hands it to the webhook.
func (e *alertEngine) announce(a Alert, msg string, now time.Time, resolved bool) {
	level := slog.LevelWarn
	switch {
	case resolved:
		level = slog.LevelInfo
	case a.Severity == SeverityCritical:
		level = slog.LevelError
	}
	attrs := []any{"alert", a.Name, "severity", a.Severity, "subject", a.Subject, "summary", a.Summary}
	if resolved {
		attrs = append(attrs, "fired_for", now.Sub(a.Since).Round(time.Second))
	} else {
		attrs = append(attrs, "what_to_do", a.Action)
	}
	e.logger.Log(context.Background(), level, msg, attrs...)
	if e.notify != nil {
		e.notify(a, resolved, now)
	}
}

// ruleInputs is what the rules look at, gathered by the monitor.
type ruleInputs struct {
	slot      SlotStatus
	slotSeen  bool // the slot existed at some poll since start
	loading   bool // the initial load runs: consumer lag is not judged
	tables    []tableInputs
	slotName  string
	commitInt time.Duration
	log       logInputs
	binlog    *BinlogStatus // the MySQL reader's; nil for PostgreSQL
	outbox    *outboxInputs // the outbox relay's; nil without one
}

type tableInputs struct {
	name         string  // Iceberg table, e.g. cdc.orders
	lagSeconds   float64 // consumer lag
	lagRecords   int64
	paused       bool
	pausedFor    time.Duration
	pausedReason string
	pausedFix    string
	stalledFor   time.Duration // changes waiting without a successful commit
	commitError  string        // the sink's last error while its commits fail
}

// level returns the severity v reaches against warn/crit ("" for none);
// a zero level is off.
func level[T int64 | time.Duration | float64](v, warn, crit T) string {
	switch {
	case crit > 0 && v >= crit:
		return SeverityCritical
	case warn > 0 && v >= warn:
		return SeverityWarning
	}
	return ""
}

// pausedAlert is the alert of a table paused for pausedFor. A paused
// table is never silent: a warning at once, critical once it has been
// paused for table_paused.critical.
func pausedAlert(cfg config.Alerts, table, reason, fix string, pausedFor time.Duration) Alert {
	if reason == "" {
		reason = "paused"
	}
	if fix == "" {
		fix = "resolve the cause named in the reason; the table resumes where it stopped, and its changes wait in the log meanwhile"
	}
	sev := level(pausedFor, cfg.TablePaused.Warning, cfg.TablePaused.Critical)
	if sev == "" {
		sev = SeverityWarning
	}
	return Alert{Name: AlertTablePaused, Severity: sev, Subject: table,
		Summary: fmt.Sprintf("table %s has been paused for %s: %s", table, pausedFor.Round(time.Second), reason), Action: fix, Value: pausedFor.Seconds()}
}

// evaluate returns the alerts the inputs call for under cfg.
func evaluate(cfg config.Alerts, in ruleInputs) []Alert {
	var out []Alert
	add := func(name, sev, subject, summary, action string, value float64) {
		if sev != "" {
			out = append(out, Alert{Name: name, Severity: sev, Subject: subject, Summary: summary, Action: action, Value: value})
		}
	}
	s := in.slot
	const slotAction = "find what holds the pipeline back (cdcd status, the daemon's log: a failing sink, a paused table, a stopped daemon); " +
		"the slot makes PostgreSQL keep WAL until cdcd confirms it"
	switch {
	case s.Up && s.Exists && s.WALStatus == "lost":
		add(AlertSlotLost, SeverityCritical, in.slotName, fmt.Sprintf("replication slot %s was invalidated (wal_status lost): PostgreSQL removed WAL it still needed, so changes were lost", in.slotName),
			"drop the slot and start the pipeline over with a fresh snapshot (remove data_dir); raise max_slot_wal_keep_size so it does not happen again", 1)
	case s.Up && !s.Exists && in.slotSeen:
		add(AlertSlotLost, SeverityCritical, in.slotName, fmt.Sprintf("replication slot %s is gone (dropped, or a failover to a server without it)", in.slotName),
			"changes since the last confirmed position may be lost: start the pipeline over with a fresh snapshot (remove data_dir)", 1)
	case s.Up && s.Exists:
		if s.WALStatus == "unreserved" {
			add(AlertSlotWALUnreserved, SeverityCritical, in.slotName,
				fmt.Sprintf("replication slot %s is unreserved: it lags %s, beyond max_slot_wal_keep_size, and the next checkpoint invalidates it", in.slotName, config.ByteSize(s.LagBytes)),
				"act now: "+slotAction+"; or raise max_slot_wal_keep_size (a reload, no restart) to keep the WAL", 1)
		}
		add(AlertSlotLagBytes, level(s.LagBytes, int64(cfg.SlotLagBytes.Warning), int64(cfg.SlotLagBytes.Critical)), in.slotName,
			fmt.Sprintf("replication slot %s lags %s of WAL behind the server", in.slotName, humanBytes(s.LagBytes)), slotAction, float64(s.LagBytes))
		lag := time.Duration(s.LagSeconds * float64(time.Second))
		add(AlertSlotLagTime, level(lag, cfg.SlotLagTime.Warning, cfg.SlotLagTime.Critical), in.slotName,
			fmt.Sprintf("replication slot %s has not confirmed WAL written %s ago", in.slotName, lag.Round(time.Second)), slotAction, s.LagSeconds)
		if pct, ok := s.SafeWALPercent(); ok && s.WALStatus != "unreserved" {
			// Below a level: compare the shortfall.
			sev := ""
			switch {
			case cfg.SafeWALPercent.Critical > 0 && pct < float64(cfg.SafeWALPercent.Critical):
				sev = SeverityCritical
			case cfg.SafeWALPercent.Warning > 0 && pct < float64(cfg.SafeWALPercent.Warning):
				sev = SeverityWarning
			}
			add(AlertSlotSafeWALLow, sev, in.slotName,
				fmt.Sprintf("replication slot %s can fall only %s further behind (safe_wal_size, %.0f%% of max_slot_wal_keep_size %s) before PostgreSQL invalidates it",
					in.slotName, humanBytes(*s.SafeWALSize), pct, humanBytes(s.MaxWALKeep)),
				slotAction+"; or raise max_slot_wal_keep_size", pct)
		}
	}
	for _, t := range in.tables {
		if !in.loading && t.lagRecords > 0 {
			lag := time.Duration(t.lagSeconds * float64(time.Second))
			add(AlertConsumerLag, level(lag, cfg.ConsumerLag.Warning, cfg.ConsumerLag.Critical), t.name,
				fmt.Sprintf("table %s is %s behind the log (%d changes not committed yet)", t.name, lag.Round(time.Second), t.lagRecords),
				"check the table's commits in the daemon's log (errors, slow commits); a steady lag may need a shorter sink.iceberg.commit_interval or faster storage", t.lagSeconds)
		}
		if t.paused {
			out = append(out, pausedAlert(cfg, t.name, t.pausedReason, t.pausedFix, t.pausedFor))
		}
		sev, summary := level(t.stalledFor, cfg.CommitStall.Warning, cfg.CommitStall.Critical),
			fmt.Sprintf("table %s has made no successful commit for %s while %d changes wait", t.name, t.stalledFor.Round(time.Second), t.lagRecords)
		if t.commitError != "" {
			// The sink says its commits fail: at once, not after a stall.
			if sev == "" {
				sev = SeverityWarning
			}
			summary += ": " + t.commitError
		}
		add(AlertCommitsFailing, sev, t.name, summary,
			"read the daemon's log for the table's commit errors (catalog or storage unreachable, permissions, conflicts)", t.stalledFor.Seconds())
	}
	out = append(out, evaluateBinlog(in.binlog)...)
	out = append(out, evaluateOutbox(in.outbox)...)
	return append(out, evaluateLog(in.log)...)
}

// humanBytes writes a size with a binary unit and one decimal.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), 0
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	for f /= unit; (f >= unit || f <= -unit) && i < len(units)-1; i++ {
		f /= unit
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}
