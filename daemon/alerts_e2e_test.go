package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/pgserver"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// alertSink is an Alertmanager stand-in: it records every alert posted.
type alertSink struct {
	mu     sync.Mutex
	alerts []map[string]any
}

func (a *alertSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var as []map[string]any
	if err := json.Unmarshal(body, &as); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	a.alerts = append(a.alerts, as...)
	a.mu.Unlock()
}

// firing returns the labels of the first alert posted with alertname name
// that had not ended when it was posted, or nil.
func (a *alertSink) firing(name string) map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, al := range a.alerts {
		labels, _ := al["labels"].(map[string]any)
		ends, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(al["endsAt"]))
		if labels["alertname"] == name && ends.After(time.Now()) {
			return labels
		}
	}
	return nil
}

func slotWALStatus(t *testing.T, conn *pgx.Conn, slot string) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(t.Context(), `SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// alertGauge reads cdcd_alert_firing for an alert from the daemon's registry.
func alertGauge(t *testing.T, d *daemon.Daemon, name string) (string, bool) {
	t.Helper()
	mfs, err := d.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cdcd_alert_firing" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := labelMap(m)
			if l["alert"] == name && m.GetGauge().GetValue() == 1 {
				return l["severity"], true
			}
		}
	}
	return "", false
}

func labelMap(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// TestSlotLagAlert holds the pipeline back while WAL grows on a server with
// a tiny max_slot_wal_keep_size: the slot-lag alerts fire — in the log, as
// the cdcd_alert_firing metric and at the webhook — while the slot is
// still valid; a checkpoint then invalidates it and CdcdSlotLost fires.
func TestSlotLagAlert(t *testing.T) {
	t.Parallel()
	srv := pgtest.NewServer(t, pgserver.Options{Settings: map[string]string{
		"max_slot_wal_keep_size": "48MB", // three 16 MB segments
		"max_wal_size":           "1GB",  // no checkpoint forced by WAL volume
		"checkpoint_timeout":     "1h",   // nor by time: the test checkpoints
		"wal_sender_timeout":     "0",    // the held-back walsender is not cut off
	}})
	dsn := pgtest.NewDBOn(t, srv)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), workloadDDL+`CREATE TABLE filler (id bigint PRIMARY KEY, pad text);`); err != nil {
		t.Fatal(err)
	}
	hook := &alertSink{}
	receiver := httptest.NewServer(hook)
	defer receiver.Close()

	dir := t.TempDir()
	slot := pgtest.UniqueName(t, "slot")
	path := writeOperatorConfig(t, dir, dsn, slot, "off", "append", "public.acct, public.kv", fmt.Sprintf(`alerts:
  interval: 200ms
  slot_lag_bytes: {warning: 8MB, critical: 0}
  slot_lag_time: {warning: 1s, critical: 0s}
  safe_wal_percent: {warning: 50, critical: 20}
  webhook: {url: %q, backoff: 50ms}
`, receiver.URL))
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	d, err := daemon.New(t.Context(), cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs)
		}
	}()
	waitFor(t, "streaming", func() bool { return d.SourceStats().Streaming.Load() }, done)

	// Hold the pipeline back: the next append waits, so nothing more is
	// confirmed to the server.
	resume, held := d.PauseIntake()
	m := newModel(41)
	if _, err := m.run(t.Context(), conn, 1, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the source never tried to append the held change")
	}
	const step = 8000 // rows of ~1 KiB: ~9 MB of WAL per statement
	fired := func() bool {
		return hook.firing(daemon.AlertSlotSafeWALLow) != nil && hook.firing(daemon.AlertSlotLagBytes) != nil
	}
	for i := 0; !fired(); i++ {
		if i >= 40 {
			t.Fatalf("no slot alert after %d MB of WAL; wal_status %s", i*9, slotWALStatus(t, conn, slot))
		}
		if _, err := conn.Exec(t.Context(), `INSERT INTO filler SELECT g, repeat(md5(g::text), 30) FROM generate_series($1::bigint, $1::bigint + $2 - 1) g`, i*step, step); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Second)
		for !fired() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The alerts fired while the slot was still valid.
	if ws := slotWALStatus(t, conn, slot); ws == "lost" || ws == "" {
		t.Fatalf("the alerts came only once the slot was invalidated (wal_status %q)", ws)
	} else {
		t.Logf("alerts fired with wal_status %s", ws)
	}
	if l := hook.firing(daemon.AlertSlotLagBytes); l["slot"] != slot || l["severity"] != "warning" || l["pipeline"] != "e2e" {
		t.Errorf("webhook labels %v", l)
	}
	for _, name := range []string{daemon.AlertSlotLagBytes, daemon.AlertSlotSafeWALLow} {
		if _, ok := alertGauge(t, d, name); !ok {
			t.Errorf("cdcd_alert_firing{alert=%q} is not 1", name)
		}
		if !strings.Contains(logs.String(), `msg="alert firing" component=alerts alert=`+name) {
			t.Errorf("no log record for %s", name)
		}
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"alert firing\" component=alerts alert=CdcdSlotLagBytes severity=warning subject="+slot) {
		t.Errorf("the lag alert is not a WARN record naming the slot")
	}

	// Past max_slot_wal_keep_size the slot is unreserved: critical, and
	// still before the invalidation.
	for i := 0; slotWALStatus(t, conn, slot) != "unreserved"; i++ {
		if i >= 40 {
			t.Fatalf("the slot never became unreserved (wal_status %s)", slotWALStatus(t, conn, slot))
		}
		if _, err := conn.Exec(t.Context(), `INSERT INTO filler SELECT g, repeat(md5(g::text), 30) FROM generate_series($1::bigint, $1::bigint + $2 - 1) g`, (100+i)*step, step); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "CdcdSlotWALUnreserved at the webhook", func() bool { return hook.firing(daemon.AlertSlotWALUnreserved) != nil }, done)
	if ws := slotWALStatus(t, conn, slot); ws != "unreserved" {
		t.Fatalf("wal_status %s when CdcdSlotWALUnreserved fired", ws)
	}
	// The next checkpoint invalidates it.
	if _, err := conn.Exec(t.Context(), `CHECKPOINT`); err != nil {
		t.Fatal(err)
	}
	if ws := slotWALStatus(t, conn, slot); ws != "lost" {
		t.Fatalf("after a checkpoint, wal_status is %s", ws)
	}
	waitFor(t, "CdcdSlotLost at the webhook", func() bool { return hook.firing(daemon.AlertSlotLost) != nil }, done)
	if sev, ok := alertGauge(t, d, daemon.AlertSlotLost); !ok || sev != "critical" {
		t.Errorf("cdcd_alert_firing{alert=CdcdSlotLost} = %q %v", sev, ok)
	}
	if !strings.Contains(logs.String(), "level=ERROR msg=\"alert firing\" component=alerts alert=CdcdSlotLost") {
		t.Errorf("the lost slot is not an ERROR record")
	}
	resume()
	cancel()
	select {
	case err := <-done:
		// The source may fail on its invalidated slot; a stop must not hang.
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("daemon stopped with: %v", err)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("the daemon did not stop")
	}
	d.Close()
	_ = os.RemoveAll(filepath.Join(dir, "log"))
}
