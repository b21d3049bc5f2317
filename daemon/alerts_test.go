package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/config"
)

func defaultAlerts(t *testing.T) config.Alerts {
	t.Helper()
	c := &config.Config{Pipeline: "p", Source: config.Source{Postgres: &config.Postgres{DSN: "postgres://x/y", Tables: []string{"t"}}}}
	c.ApplyDefaults()
	return c.Alerts
}

func names(as []Alert) string {
	var out []string
	for _, a := range as {
		out = append(out, a.Name+"/"+a.Severity+"/"+a.Subject)
	}
	return strings.Join(out, " ")
}

// TestRules: each rule fires at its levels and stays quiet below them.
func TestRules(t *testing.T) {
	cfg := defaultAlerts(t)
	safe := func(n int64) *int64 { return &n }
	healthy := SlotStatus{Name: "s", Up: true, Exists: true, WALStatus: "reserved", LagBytes: 1 << 20, LagSeconds: 2, SafeWALSize: safe(900 << 20), MaxWALKeep: 1 << 30}
	cases := []struct {
		name string
		in   ruleInputs
		want string
	}{
		{"healthy", ruleInputs{slot: healthy}, ""},
		{"lag bytes warning", ruleInputs{slot: with(healthy, func(s *SlotStatus) { s.LagBytes = 2 << 30 })}, "CdcdSlotLagBytes/warning/s"},
		{"lag bytes critical", ruleInputs{slot: with(healthy, func(s *SlotStatus) { s.LagBytes = 11 << 30 })}, "CdcdSlotLagBytes/critical/s"},
		{"lag time", ruleInputs{slot: with(healthy, func(s *SlotStatus) { s.LagSeconds = 400 })}, "CdcdSlotLagTime/warning/s"},
		{"safe wal 40%", ruleInputs{slot: with(healthy, func(s *SlotStatus) { s.SafeWALSize = safe(400 << 20) })}, "CdcdSlotSafeWALLow/warning/s"},
		{"safe wal 10%", ruleInputs{slot: with(healthy, func(s *SlotStatus) { s.SafeWALSize = safe(100 << 20) })}, "CdcdSlotSafeWALLow/critical/s"},
		{"no keep size", ruleInputs{slot: with(healthy, func(s *SlotStatus) { s.SafeWALSize, s.MaxWALKeep = nil, -1 })}, ""},
		{"unreserved", ruleInputs{slot: with(healthy, func(s *SlotStatus) { s.WALStatus = "unreserved" })}, "CdcdSlotWALUnreserved/critical/s"},
		{"lost", ruleInputs{slot: with(healthy, func(s *SlotStatus) { s.WALStatus = "lost"; s.LagBytes = 20 << 30 })}, "CdcdSlotLost/critical/s"},
		{"gone after seen", ruleInputs{slotSeen: true, slot: SlotStatus{Up: true}}, "CdcdSlotLost/critical/s"},
		{"not created yet", ruleInputs{slot: SlotStatus{Up: true}}, ""},
		{"poll failing", ruleInputs{slotSeen: true, slot: SlotStatus{}}, ""},
		{"consumer lag", ruleInputs{slot: healthy, tables: []tableInputs{{name: "cdc.t", lagSeconds: 301, lagRecords: 5}}}, "CdcdConsumerLag/warning/cdc.t"},
		{"consumer lag while loading", ruleInputs{slot: healthy, loading: true, tables: []tableInputs{{name: "cdc.t", lagSeconds: 3000, lagRecords: 5}}}, ""},
		{"paused", ruleInputs{slot: healthy, tables: []tableInputs{{name: "cdc.t", paused: true, pausedFor: time.Hour}}}, "CdcdTablePaused/critical/cdc.t"},
		// A pause fires at once, before any threshold.
		{"just paused", ruleInputs{slot: healthy, tables: []tableInputs{{name: "cdc.t", paused: true}}}, "CdcdTablePaused/warning/cdc.t"},
		{"stalled", ruleInputs{slot: healthy, tables: []tableInputs{{name: "cdc.t", stalledFor: 6 * time.Minute, lagRecords: 9}}}, "CdcdCommitsFailing/warning/cdc.t"},
		// Commits the sink reports failing alert at once.
		{"commits failing", ruleInputs{slot: healthy, tables: []tableInputs{{name: "cdc.t", stalledFor: time.Second, lagRecords: 9, commitError: "catalog down"}}}, "CdcdCommitsFailing/warning/cdc.t"},
	}
	for _, c := range cases {
		c.in.slotName = "s"
		if got := names(evaluate(cfg, c.in)); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

func with(s SlotStatus, f func(*SlotStatus)) SlotStatus { f(&s); return s }

// TestEngine: fire, re-alert after the interval, escalate, resolve; each
// logged at its level and handed to notify.
func TestEngine(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	var events []string
	e := newAlertEngine(time.Minute, logger, func(a Alert, resolved bool, _ time.Time) {
		events = append(events, a.Name+"/"+a.Severity+"/"+map[bool]string{false: "firing", true: "resolved"}[resolved])
	})
	t0 := time.Unix(1_800_000_000, 0)
	warn := Alert{Name: AlertSlotLagBytes, Severity: SeverityWarning, Subject: "s", Summary: "lags", Action: "look"}
	e.update(t0, []Alert{warn})
	e.update(t0.Add(30*time.Second), []Alert{warn}) // within the re-alert interval: quiet
	e.update(t0.Add(61*time.Second), []Alert{warn}) // re-alert
	crit := warn
	crit.Severity = SeverityCritical
	e.update(t0.Add(62*time.Second), []Alert{crit})
	if f := e.firing(); len(f) != 1 || !f[0].Since.Equal(t0) {
		t.Errorf("firing %+v: one alert, firing since the first time", f)
	}
	e.update(t0.Add(90*time.Second), nil)
	want := "CdcdSlotLagBytes/warning/firing CdcdSlotLagBytes/warning/firing CdcdSlotLagBytes/critical/firing CdcdSlotLagBytes/critical/resolved"
	if got := strings.Join(events, " "); got != want {
		t.Errorf("events:\n got %s\nwant %s", got, want)
	}
	log := buf.String()
	for _, line := range []string{`level=WARN msg="alert firing" component=alerts alert=CdcdSlotLagBytes`, `level=WARN msg="alert still firing"`,
		`level=ERROR msg="alert severity changed"`, `level=INFO msg="alert resolved"`, `what_to_do=look`} {
		if !strings.Contains(log, line) {
			t.Errorf("log lacks %q:\n%s", line, log)
		}
	}
}

// TestWebhookRetries: a receiver that fails twice gets the alert on the
// third try, as Alertmanager's /api/v2/alerts JSON; a resolved alert has
// an endsAt in the past.
func TestWebhookRetries(t *testing.T) {
	var calls atomic.Int32
	var mu sync.Mutex
	var got [][]amAlert
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var as []amAlert
		if err := json.Unmarshal(b, &as); err != nil || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("bad body %s: %v", b, err)
		}
		mu.Lock()
		got = append(got, as)
		mu.Unlock()
	}))
	defer srv.Close()
	w := newWebhook(config.Webhook{URL: srv.URL, Timeout: time.Second, Retries: 3, Backoff: 10 * time.Millisecond}, "shop", "127.0.0.1:8089", time.Minute, slog.New(slog.DiscardHandler))
	now := time.Now()
	a := Alert{Name: AlertConsumerLag, Severity: SeverityWarning, Subject: "cdc.orders", Summary: "behind", Action: "look", Since: now.Add(-time.Minute)}
	w.enqueue(a, false, now)
	w.enqueue(a, true, now)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	go w.run(ctx)
	for w.Sent.Load() < 2 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || calls.Load() != 4 {
		t.Fatalf("%d deliveries in %d calls", len(got), calls.Load())
	}
	f, r := got[0][0], got[1][0]
	if f.Labels["alertname"] != AlertConsumerLag || f.Labels["table"] != "cdc.orders" || f.Labels["severity"] != "warning" ||
		f.Annotations["summary"] != "behind" || f.GeneratorURL != "http://127.0.0.1:8089/status" || !f.EndsAt.After(now) {
		t.Errorf("firing alert %+v", f)
	}
	if r.EndsAt.After(time.Now()) {
		t.Errorf("resolved alert ends at %v, in the future", r.EndsAt)
	}
	// A receiver that never accepts: counted as failed after the retries.
	bad := newWebhook(config.Webhook{URL: srv.URL + "/x", Timeout: time.Second, Retries: 1, Backoff: time.Millisecond}, "shop", "", time.Minute, slog.New(slog.DiscardHandler))
	calls.Store(-100) // fail forever
	bad.deliver(ctx, amAlert{Labels: map[string]string{"alertname": "x"}})
	if bad.Failed.Load() != 1 {
		t.Error("an undeliverable alert is not counted")
	}
}

// TestPausedAlertNamesFix: the paused alert carries the pause's reason
// and its fix.
func TestPausedAlertNamesFix(t *testing.T) {
	got := evaluate(defaultAlerts(t), ruleInputs{slot: SlotStatus{Up: true, Exists: true, WALStatus: "reserved"}, slotName: "s",
		tables: []tableInputs{{name: "cdc.a", paused: true, pausedReason: "a NaN in price", pausedFix: "cdcd table skip -c FILE public.a"}}})
	if len(got) != 1 || !strings.Contains(got[0].Summary, "a NaN in price") || got[0].Action != "cdcd table skip -c FILE public.a" {
		t.Fatalf("alerts: %+v", got)
	}
}
