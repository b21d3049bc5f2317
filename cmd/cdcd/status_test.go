package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
)

func sampleStatus(now time.Time) daemon.Status {
	safe := int64(1900 << 20)
	return daemon.Status{
		Pipeline: "shop", Version: "0.1.0-dev", State: daemon.StateLoading, Ready: true, Uptime: "2m5s",
		Source: daemon.SourceStatus{SnapshotRows: 1207, LoadRowsPerSecond: 412345, LoadETASeconds: 95,
			Waiting: "creating the replication slot waits for 1 transaction(s): pid 42"},
		Slot: daemon.SlotStatus{Name: "cdcd_shop", Up: true, Exists: true, Active: true, WALStatus: "reserved",
			LagBytes: 3 << 20, LagSeconds: 4, ConfirmedFlushLSN: "0/3A5F2C8", SafeWALSize: &safe, MaxWALKeep: 2 << 30},
		Tables: []daemon.TableStatus{
			{Table: "cdc.customers", State: daemon.StateLoading, Rows: 1200, EventsIn: 1250, Lag: 50, LagSeconds: 2,
				Snapshot: daemon.SnapshotStatus{Rows: 1200, Estimated: 2400, Percent: 50, Committed: 600, CommittedPercent: 25,
					CommitRowsPerSecond: 300, CommitETASeconds: 6},
				LastCommit: now.Add(-3 * time.Second).Format(time.RFC3339Nano)},
			{Table: "cdc.orders", State: daemon.StateLoading, Lag: -1, Snapshot: daemon.SnapshotStatus{Rows: 7, Percent: -1, CommittedPercent: -1}},
		},
		Alerts: []daemon.Alert{{Name: daemon.AlertConsumerLag, Severity: daemon.SeverityWarning, Subject: "cdc.customers",
			Summary: "table cdc.customers is 6m0s behind the log", Action: "check the commits", Since: now.Add(-time.Minute)}},
	}
}

func TestRenderStatus(t *testing.T) {
	now := time.Now()
	var b bytes.Buffer
	renderStatus(&b, sampleStatus(now), now)
	out := b.String()
	for _, want := range []string{
		"cdcd 0.1.0-dev  pipeline shop  loading (ready)  up 2m5s",
		"slot cdcd_shop  active  wal_status reserved  lag 3.0 MiB (4s)  confirmed_flush_lsn 0/3A5F2C8  safe_wal_size 1.9 GiB of 2.0 GiB",
		"initial load: 1,207 rows read, 412,345 rows/s, about 1m35s left",
		"waiting: creating the replication slot waits for 1 transaction(s): pid 42",
		"cdc.customers  loading  [#####...............]  25% in iceberg, read 50%, 300 rows/s, about 6s left  1,200",
		"50 (2s)",
		"3s ago",
		"cdc.orders     loading  0 rows in iceberg, read 7 rows",
		"never",
		"ALERTS (1 firing)",
		"WARNING   CdcdConsumerLag  cdc.customers  since 1m0s ago",
		"what to do: check the commits",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestStatusCommand(t *testing.T) {
	now := time.Now()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/status" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(sampleStatus(now))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"status", "--admin", addr}, nil, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "pipeline shop") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
	// -c takes admin.listen from the config; --json prints the document.
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cdcd.yaml")
	os.WriteFile(cfg, []byte("pipeline: shop\nsource: {postgres: {dsn: \"postgres://u:${PGPASSWORD}@h/db\", tables: [t]}}\nsink: {iceberg: {}}\nadmin: {listen: \""+addr+"\"}\n"), 0o644)
	stdout.Reset()
	if code := run(context.Background(), []string{"status", "-c", cfg, "--json"}, nil, &stdout, &stderr); code != exitOK {
		t.Fatalf("-c: exit %d: %s", code, stderr.String())
	}
	var st daemon.Status
	if err := json.Unmarshal(stdout.Bytes(), &st); err != nil || st.Pipeline != "shop" {
		t.Errorf("--json: %v %q", err, stdout.String())
	}
	// Nothing listening: exit 1 with the address; bad usage: exit 2.
	srv.Close()
	stderr.Reset()
	if code := run(context.Background(), []string{"status", "--admin", addr}, nil, &stdout, &stderr); code != exitFailure || !strings.Contains(stderr.String(), "cannot reach the daemon at http://"+addr) {
		t.Errorf("unreachable: exit %d, %s", code, stderr.String())
	}
	if code := run(context.Background(), []string{"status", "extra"}, nil, &stdout, &stderr); code != exitUsage {
		t.Errorf("an extra argument: exit %d", code)
	}
}

// TestRenderStatusNeverNoAlertsWhilePaused: a paused table (before its
// alert fires) or a table whose commits do not land is shown with its
// reason and fix, and the output never says "no alerts".
func TestRenderStatusNeverNoAlertsWhilePaused(t *testing.T) {
	now := time.Now()
	st := sampleStatus(now)
	st.Alerts = nil
	st.Tables[0].Paused, st.Tables[0].State = true, "paused"
	st.Paused = []daemon.PausedTable{{Table: "cdc.customers", Kind: "value", Since: now.Add(-2 * time.Second), Held: 3,
		Reason: "table public.customers: the change at position 00 cannot be written", Key: `{"id":2}`, Column: "price", Value: "NaN",
		Resolve: "cdcd table skip -c FILE public.customers"}}
	var b bytes.Buffer
	renderStatus(&b, st, now)
	out := b.String()
	for _, want := range []string{"PAUSED (1)", "cdc.customers  value pause", "3 held", `key {"id":2}  column price  value NaN`,
		"what to do: cdcd table skip -c FILE public.customers", "none firing yet"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "no alerts") {
		t.Errorf("says no alerts while a table is paused:\n%s", out)
	}

	st.Paused = nil
	st.Tables[0].Paused = false
	st.Tables[1].CommitsStalled, st.Tables[1].CommitStallSeconds, st.Tables[1].Lag = true, 150, 12
	b.Reset()
	renderStatus(&b, st, now)
	out = b.String()
	if !strings.Contains(out, "COMMITS NOT LANDING  cdc.orders: 12 changes have waited 2m30s") || strings.Contains(out, "no alerts") {
		t.Errorf("stalled commits:\n%s", out)
	}
	st.Tables[1].CommitError = "iceberg: commit to cdc.orders: catalog unreachable"
	b.Reset()
	renderStatus(&b, st, now)
	out = b.String()
	if !strings.Contains(out, "COMMITS FAILING  cdc.orders: iceberg: commit to cdc.orders: catalog unreachable") || strings.Contains(out, "no alerts") {
		t.Errorf("failing commits:\n%s", out)
	}
}
