package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/outbox"
	"github.com/cdcd-dev/cdcd/source"
)

// The outbox relay (config outbox:, package outbox) sits between the
// source and the table mirror's intake: reader -> relay -> intake ->
// emitter. Its events never reach the intake; the outbox table's changes
// do only when the table is also mirrored.

// TopicOutboxDead receives outbox events the relay cannot route.
const TopicOutboxDead = "_cdcd_dead.outbox"

// outboxRelay is the daemon's relay and what watches it.
type outboxRelay struct {
	relay   *outbox.Relay
	cfg     *config.Outbox
	size    *outboxSize // nil without an outbox table
	latency prometheus.Histogram
	// targetLatency: per webhook target, commit until accepted.
	targetLatency *prometheus.HistogramVec
}

// outboxTable is the outbox table as the source names its changes
// ("schema.table", unquoted), or "".
func outboxTable(cfg *config.Config) string {
	o := cfg.Outbox
	if o == nil || o.Table == "" {
		return ""
	}
	return rawNames([]string{o.Table})[0]
}

// readerTables are the tables the source captures: the mirrored ones and
// the outbox table.
func readerTables(cfg *config.Config, tables []string) []string {
	t := outboxTable(cfg)
	if t == "" || slices.Contains(rawNames(tables), t) {
		return tables
	}
	return append(slices.Clone(tables), cfg.Outbox.Table)
}

// readerMessages are the logical message prefixes the source delivers.
func readerMessages(cfg *config.Config) []string {
	if o := cfg.Outbox; o != nil && o.MessagePrefix != "" {
		return []string{o.MessagePrefix}
	}
	return nil
}

// newOutboxRelay builds the relay in front of next (nil without an
// outbox block).
func (d *Daemon) newOutboxRelay(ctx context.Context, next source.Emitter) (*outboxRelay, error) {
	o := d.cfg.Outbox
	if o == nil {
		return nil, nil
	}
	if err := ensureTopic(ctx, d.lg, TopicOutboxDead, log.TopicConfig{Partitions: 1, Cleanup: log.CleanupDelete}); err != nil {
		return nil, err
	}
	var targets []outbox.Target
	for _, t := range o.Targets {
		switch {
		case t.Log != nil:
			targets = append(targets, outbox.NewLogTarget(d.lg, log.TopicConfig{Partitions: int32(d.cfg.Log.Partitions),
				Retention: d.cfg.Log.Retention, Cleanup: log.CleanupDelete}))
		case t.Webhook != nil:
			// MySQL's reader keeps its checkpoint by transaction, with no
			// way to hold it back: its webhooks deliver before Emit returns.
			w, err := newWebhookTarget(t.Webhook, d, d.cfg.Source.MySQL != nil)
			if err != nil {
				return nil, err
			}
			targets = append(targets, w)
		}
	}
	route := outbox.Route{Table: outboxTable(d.cfg), MessagePrefix: o.MessagePrefix, Topic: o.Topic,
		Columns: outbox.Columns{ID: o.Columns.ID, AggregateType: o.Columns.AggregateType, AggregateID: o.Columns.AggregateID,
			Type: o.Columns.Type, Payload: o.Columns.Payload, Timestamp: o.Columns.Timestamp}}
	if o.Payload == config.PayloadExpanded {
		route.Payload = outbox.PayloadExpanded
	}
	for _, h := range o.Headers {
		col, name, _ := strings.Cut(h, ":")
		route.Headers = append(route.Headers, outbox.Header{Column: col, Name: name})
	}
	mirrored := route.Table != "" && slices.Contains(rawNames(d.cfg.Source.TableNames()), route.Table)
	r, err := outbox.New(outbox.Config{Route: route, Mirrored: mirrored, Log: d.lg, DeadLetterTopic: TopicOutboxDead}, next, targets, d.logger)
	if err != nil {
		return nil, err
	}
	or := &outboxRelay{relay: r, cfg: o, latency: newOutboxLatency(), targetLatency: newOutboxTargetLatency()}
	r.Stats().Latency = func(d time.Duration) { or.latency.Observe(d.Seconds()) }
	for _, t := range targets {
		h := or.targetLatency.WithLabelValues(t.Name())
		t.Stats().Latency = func(d time.Duration) { h.Observe(d.Seconds()) }
	}
	if route.Table != "" {
		or.size = newOutboxSize(d.cfg, route.Table)
	}
	return or, nil
}

// newWebhookTarget builds a webhook target from its config.
func newWebhookTarget(w *config.OutboxWebhook, d *Daemon, wait bool) (*outbox.Webhook, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = w.Concurrency
	if w.CAFile != "" {
		pem, err := os.ReadFile(w.CAFile)
		if err != nil {
			return nil, fmt.Errorf("outbox webhook %s: read ca_file: %w", w.Name, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("outbox webhook %s: ca_file %s holds no PEM certificate", w.Name, w.CAFile)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return outbox.NewWebhook(outbox.WebhookConfig{Name: w.Name, URL: w.URL, Secret: w.Secret, Timeout: w.Timeout,
		Concurrency: w.Concurrency, BackoffMin: w.BackoffMin, BackoffMax: w.BackoffMax, GiveUpAfter: w.GiveUpAfter,
		DeadLetterTopic: w.DeadLetterTopic, Wait: wait, Client: &http.Client{Transport: transport}}, d.lg, d.state, d.logger)
}

// runSource runs the reader into the relay, and the relay's queued
// deliveries (webhooks) beside it; without a relay, into the intake. A
// failure of the relay's deliveries stops the reader.
func (d *Daemon) runSource(ctx context.Context) error {
	if d.outbox == nil {
		return d.reader.Run(ctx, d.intake)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	relayDone := make(chan error, 1)
	go func() {
		err := d.outbox.relay.Run(ctx)
		if err != nil {
			cancel(err)
		}
		relayDone <- err
	}()
	err := d.reader.Run(ctx, d.outbox.relay)
	cancel(nil)
	if rerr := <-relayDone; rerr != nil {
		return rerr
	}
	return err
}

// OutboxStatus is the relay in /status.
type OutboxStatus struct {
	Table         string `json:"table,omitempty"`
	MessagePrefix string `json:"message_prefix,omitempty"`
	// Events every target has, and events sent to TopicOutboxDead as
	// unroutable, since start.
	Events    int64 `json:"events"`
	Malformed int64 `json:"malformed"`
	// LagSeconds: how long the oldest event handed to the targets has
	// waited since its commit (0 when none waits).
	LagSeconds float64 `json:"lag_seconds"`
	// TableBytes and TableRows: the outbox table's size from the last
	// poll (-1 before one, or without a table).
	TableBytes int64                `json:"table_bytes"`
	TableRows  int64                `json:"table_rows"`
	Targets    []OutboxTargetStatus `json:"targets"`
}

// OutboxTargetStatus is one target of the relay.
type OutboxTargetStatus struct {
	Name         string `json:"name"`
	Delivered    int64  `json:"delivered"`
	Duplicates   int64  `json:"duplicates"`
	Failures     int64  `json:"failures"`
	DeadLettered int64  `json:"dead_lettered"`
	// Queued: events a webhook has queued and not delivered yet.
	Queued int64 `json:"queued"`
	// FailingSeconds: how long an event has been failing (0 when none).
	FailingSeconds float64 `json:"failing_seconds"`
	LastError      string  `json:"last_error,omitempty"`
}

// outboxStatus reports the relay (nil without one).
func (d *Daemon) outboxStatus() *OutboxStatus {
	o := d.outbox
	if o == nil {
		return nil
	}
	now := time.Now()
	st := o.relay.Stats()
	s := &OutboxStatus{Table: o.cfg.Table, MessagePrefix: o.cfg.MessagePrefix, Events: st.Events.Load(), Malformed: st.Malformed.Load(),
		LagSeconds: o.relay.Lag(now).Seconds(), TableBytes: -1, TableRows: -1}
	if o.size != nil {
		s.TableBytes, s.TableRows = o.size.last()
	}
	for _, t := range o.relay.Targets() {
		ts := t.Stats()
		ots := OutboxTargetStatus{Name: t.Name(), Delivered: ts.Delivered.Load(), Duplicates: ts.Duplicates.Load(),
			Failures: ts.Failures.Load(), DeadLettered: ts.DeadLettered.Load(), Queued: ts.Queued.Load(), FailingSeconds: failingFor(ts, now).Seconds()}
		if e := ts.LastError.Load(); e != nil && ots.FailingSeconds > 0 {
			ots.LastError = *e
		}
		s.Targets = append(s.Targets, ots)
	}
	return s
}

func failingFor(ts *outbox.TargetStats, now time.Time) time.Duration {
	if ms := ts.FailingSince.Load(); ms > 0 {
		return now.Sub(time.UnixMilli(ms))
	}
	return 0
}

// The relay's alerts.
const (
	// AlertOutboxLag fires while the oldest event handed to the targets
	// has waited longer than outbox.alerts.lag since its commit.
	AlertOutboxLag = "CdcdOutboxLag"
	// AlertOutboxTableSize fires while the outbox table is larger than
	// outbox.alerts.table_bytes.
	AlertOutboxTableSize = "CdcdOutboxTableSize"
)

// outboxInputs is what the relay's rules look at.
type outboxInputs struct {
	cfg        config.OutboxAlerts
	table      string
	lag        time.Duration
	failing    []string // "name: last error (failing for ...)" of each failing target
	tableBytes int64    // -1: unknown
}

// outboxInputs polls the outbox table's size and gathers the relay's
// state for the rules (nil without a relay).
func (d *Daemon) outboxInputs(ctx context.Context) *outboxInputs {
	o := d.outbox
	if o == nil {
		return nil
	}
	now := time.Now()
	in := &outboxInputs{cfg: o.cfg.Alerts, table: o.cfg.Table, lag: o.relay.Lag(now), tableBytes: -1}
	if o.size != nil {
		o.size.poll(ctx, d)
		in.tableBytes, _ = o.size.last()
	}
	for _, t := range o.relay.Targets() {
		ts := t.Stats()
		if f := failingFor(ts, now); f > 0 {
			e := "failing"
			if p := ts.LastError.Load(); p != nil {
				e = *p
			}
			in.failing = append(in.failing, fmt.Sprintf("target %s failing for %s: %s", t.Name(), f.Round(time.Second), e))
		}
	}
	return in
}

// evaluateOutbox returns the relay's alerts.
func evaluateOutbox(in *outboxInputs) []Alert {
	if in == nil {
		return nil
	}
	var out []Alert
	if sev := level(in.lag, in.cfg.Lag.Warning, in.cfg.Lag.Critical); sev != "" {
		summary := fmt.Sprintf("the outbox relay is %s behind: its oldest event waiting for the targets committed that long ago", in.lag.Round(time.Second))
		if len(in.failing) > 0 {
			summary += "; " + strings.Join(in.failing, "; ")
		}
		out = append(out, Alert{Name: AlertOutboxLag, Severity: sev, Subject: "outbox", Summary: summary, Value: in.lag.Seconds(),
			Action: "make the failing target's receiver answer (its URL, certificate, capacity); the source waits for every target, so the " +
				"mirrored tables and the slot wait too; an event failing for give_up_after goes to the target's dead-letter topic"})
	}
	if in.tableBytes >= 0 {
		if sev := level(in.tableBytes, int64(in.cfg.TableBytes.Warning), int64(in.cfg.TableBytes.Critical)); sev != "" {
			out = append(out, Alert{Name: AlertOutboxTableSize, Severity: sev, Subject: in.table, Value: float64(in.tableBytes),
				Summary: fmt.Sprintf("the outbox table %s takes %s", in.table, humanBytes(in.tableBytes)),
				Action: "delete relayed rows (cdcd relays inserts; deletes are ignored), or have services write with outbox.Writer{Delete: true} " +
					"or message_prefix so the table stays empty; VACUUM returns the space"})
		}
	}
	return out
}

// outboxSize polls the outbox table's size on the source database.
type outboxSize struct {
	cfg   *config.Config
	table string // schema.table / database.table, unquoted

	mu          sync.Mutex
	bytes, rows int64
}

func newOutboxSize(cfg *config.Config, table string) *outboxSize {
	return &outboxSize{cfg: cfg, table: table, bytes: -1, rows: -1}
}

func (s *outboxSize) last() (bytes, rows int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes, s.rows
}

// poll reads the table's size; a failure keeps the last value and is
// logged at debug (the slot poller reports an unreachable server).
func (s *outboxSize) poll(ctx context.Context, d *Daemon) {
	ns, name := splitTable(s.table)
	bytes, rows, err := tableSize(ctx, s.cfg, ns, name)
	if err != nil {
		d.logger.Debug("outbox table size not read", "table", s.table, "err", err)
		return
	}
	s.mu.Lock()
	s.bytes, s.rows = bytes, rows
	s.mu.Unlock()
}

var errNoOutboxTable = errors.New("daemon: the outbox table does not exist")
