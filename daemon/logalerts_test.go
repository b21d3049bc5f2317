package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/sink/iceberg"
)

// TestLogDataLostAlert: a lost range fires CdcdLogDataLost naming the
// offsets, the table and the re-snapshot, until the table has committed
// past it.
func TestLogDataLostAlert(t *testing.T) {
	ps := log.PartitionStats{Topic: "p.public.orders", Partition: 2,
		Lost: []log.LostRange{{From: 10, To: 20, Reason: "bad crc"}, {From: 40, To: 45, Reason: "gap"}}}
	ts := &iceberg.TableStats{Topic: "p.public.orders", Table: "cdc.orders"}
	for _, tc := range []struct {
		committed []int64 // nil: nothing committed
		want      int     // ranges still unread
	}{
		{nil, 2}, {[]int64{0, 0, 5}, 2}, {[]int64{0, 0, 20}, 1}, {[]int64{0, 0, 45}, 0}, {[]int64{99}, 2},
	} {
		ts.Committed.Store(nil)
		if tc.committed != nil {
			ts.Committed.Store(&tc.committed)
		}
		if got := unreadLost(ps, ts); len(got) != tc.want {
			t.Errorf("committed %v: %d unread ranges, want %d", tc.committed, len(got), tc.want)
		}
	}
	alerts := evaluateLog(logInputs{losses: []tableLoss{{topic: ps.Topic, table: ts.Table, source: "public.orders", partition: 2, lost: ps.Lost[0]}}})
	if len(alerts) != 1 {
		t.Fatalf("alerts = %+v", alerts)
	}
	a := alerts[0]
	if a.Name != AlertLogDataLost || a.Severity != SeverityCritical || a.Subject != "p.public.orders/2" {
		t.Fatalf("alert = %+v", a)
	}
	for _, want := range []string{"[10, 20)", "cdc.orders", "bad crc"} {
		if !strings.Contains(a.Summary, want) {
			t.Errorf("summary %q does not say %q", a.Summary, want)
		}
	}
	if !strings.Contains(a.Action, "cdcd snapshot -c FILE --replace public.orders") {
		t.Errorf("action %q does not name the re-snapshot", a.Action)
	}
}

// TestLogWriteFailingAlert: failing partitions raise one critical alert
// naming the log's directory, the OS error and what to do; none without.
func TestLogWriteFailingAlert(t *testing.T) {
	if got := evaluateLog(logInputs{failing: logFailing{dir: "/data/log"}}); len(got) != 0 {
		t.Fatalf("alerts with no failing partition: %+v", got)
	}
	werr := &log.WriteError{Topic: "t", Partition: 1, Op: "write", Err: errors.New("write /data/log/topics/t/1/00000000000000000000.log: no space left on device")}
	got := evaluateLog(logInputs{failing: logFailing{dir: "/data/log", partitions: 3, failedFor: 90 * time.Second, err: werr}})
	if len(got) != 1 {
		t.Fatalf("alerts = %+v", got)
	}
	a := got[0]
	if a.Name != AlertLogWriteFailing || a.Severity != SeverityCritical || a.Subject != "/data/log" {
		t.Fatalf("alert = %+v", a)
	}
	for _, want := range []string{"/data/log", "1m30s", "3 partitions", "no space left on device", "00000000000000000000.log"} {
		if !strings.Contains(a.Summary, want) {
			t.Errorf("summary %q does not say %q", a.Summary, want)
		}
	}
	if !strings.Contains(a.Action, "free space") || !strings.Contains(a.Action, "resumes by itself") {
		t.Errorf("action %q", a.Action)
	}
}

// TestLogRetentionNearAlert: a table's uncommitted records that retention
// may remove soon raise a warning naming the offsets, the retention and
// both fixes; critical once they may go at the next cleanup. The warning
// window is a day, or half a shorter retention.
func TestLogRetentionNearAlert(t *testing.T) {
	if w := retentionWarning(168 * time.Hour); w != 24*time.Hour {
		t.Errorf("warning at 168h retention: %s, want 24h", w)
	}
	if w := retentionWarning(time.Hour); w != 30*time.Minute {
		t.Errorf("warning at 1h retention: %s, want 30m", w)
	}
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	e := tableExpiry{topic: "p.public.orders", table: "cdc.orders", source: "public.orders", partition: 3,
		from: 100, end: 250, at: at, left: 5 * time.Hour, retention: 168 * time.Hour}
	got := evaluateLog(logInputs{expiring: []tableExpiry{e}})
	if len(got) != 1 || got[0].Name != AlertLogRetentionNear || got[0].Severity != SeverityWarning || got[0].Subject != "cdc.orders" {
		t.Fatalf("alerts = %+v", got)
	}
	for _, want := range []string{"[100, 250)", "partition 3", "168h0m0s", "2026-12-05T10:00:00Z", "in 5h0m0s"} {
		if !strings.Contains(got[0].Summary, want) {
			t.Errorf("summary %q does not say %q", got[0].Summary, want)
		}
	}
	for _, want := range []string{"log.retention", "cdcd snapshot -c FILE --replace public.orders", "cdcd status"} {
		if !strings.Contains(got[0].Action, want) {
			t.Errorf("action %q does not say %q", got[0].Action, want)
		}
	}
	e.left = -time.Minute
	if got := evaluateLog(logInputs{expiring: []tableExpiry{e}}); len(got) != 1 || got[0].Severity != SeverityCritical || !strings.Contains(got[0].Summary, "next cleanup") {
		t.Fatalf("past the expiry: %+v", got)
	}
}
