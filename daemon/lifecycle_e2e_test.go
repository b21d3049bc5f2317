package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/internal/promtooltest"
)

// writeOperatorConfig writes a config for tables with extra YAML appended
// (shutdown, alerts, masking sections).
func writeOperatorConfig(t *testing.T, dir, dsn, slot, admin, mode, tables, extra string) string {
	t.Helper()
	cfg := fmt.Sprintf(`pipeline: e2e
data_dir: %q
source:
  postgres:
    dsn: %q
    slot: %s
    publication: %s
    tables: [%s]
log:
  partitions: 4
sink:
  iceberg:
    namespace: mirror
    mode: %s
    commit_interval: 200ms
admin:
  listen: %q
%s`, dir, dsn, slot, slot, tables, mode, admin, extra)
	path := filepath.Join(dir, "cdcd.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// exitCode is a finished child's exit code.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

var flushedLine = regexp.MustCompile(`msg="source stopped" flushed_lsn=([0-9A-F]+/[0-9A-F]+)`)

// TestSIGTERMUnderLoad stops the daemon with SIGTERM again and again while
// a workload runs: each stop is graceful (exit 0) and takes less than the
// shutdown deadline, the slot's confirmed_flush_lsn is the flushed position
// the daemon acknowledged last, and once a hard stop (a second signal) is
// thrown in too, the changelog still holds every change exactly once, in
// order per key. On the way it checks /metrics with promtool under load.
func TestSIGTERMUnderLoad(t *testing.T) {
	t.Parallel()
	const deadline = 15 * time.Second
	dsn := pgtest.NewDB(t)
	names := pgtest.Names(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), workloadDDL); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	admin := freeAddr(t)
	cfgPath := writeOperatorConfig(t, dir, dsn, names.Slot, admin, "append", "public.acct, public.kv",
		fmt.Sprintf("shutdown:\n  deadline: %s\nalerts:\n  interval: 300ms\n", deadline))
	logFile, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("daemon log:\n%s", b)
		}
	}()

	m := newModel(31)
	work := make(chan error, 1)
	var stopped atomic.Bool
	c := startChild(t, cfgPath, admin, logFile)
	waitFor(t, "streaming", func() bool { st, err := c.status(); return err == nil && st.Source.Streaming }, c.done)
	go func() {
		defer close(work)
		for !stopped.Load() {
			if _, err := m.run(context.Background(), conn, 1, time.Millisecond); err != nil {
				work <- err
				return
			}
		}
	}()

	// Under load: ready, and the scrape has every family and passes
	// promtool's checks.
	if code, body := get(t, "http://"+admin+"/readyz"); code != http.StatusOK || !strings.Contains(body, "streaming") {
		t.Errorf("/readyz = %d %q", code, body)
	}
	families := []string{"cdcd_table_events_in_total{table=\"mirror.acct\"}", "cdcd_consumer_lag_records{", "cdcd_consumer_lag_seconds{",
		"cdcd_slot_lag_bytes{", "cdcd_slot_confirmed_flush_lsn_bytes{", "cdcd_source_flushed_lsn_bytes ", "cdcd_slot_wal_status{slot=", "cdcd_commit_duration_seconds_bucket{",
		"cdcd_commit_files_bucket{", "cdcd_commit_bytes_bucket{", "cdcd_log_end_offset{", "cdcd_table_events_out_total{"}
	var scrape string
	waitFor(t, "every metric family", func() bool {
		_, scrape = get(t, "http://"+admin+"/metrics")
		for _, name := range families {
			if !strings.Contains(scrape, name) {
				return false
			}
		}
		return true
	}, c.done)
	promtooltest.CheckMetrics(t, []byte(scrape))

	acked := 0
	for i := range 4 {
		if i > 0 {
			// Stop a daemon that streams, under load.
			waitFor(t, "streaming", func() bool { st, err := c.status(); return err == nil && st.Source.Streaming }, c.done)
			time.Sleep(time.Duration(500+200*i) * time.Millisecond)
		}
		hard := i == 2 // the third stop gets a second signal right away
		began := time.Now()
		if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if hard {
			time.Sleep(5 * time.Millisecond)
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
		}
		err := <-c.done
		took := time.Since(began)
		code := exitCode(err)
		fmt.Fprintf(logFile, "---- test: SIGTERM %d (second signal: %v): exit %d after %s\n", i+1, hard, code, took)
		t.Logf("stop %d (second signal: %v): exit %d after %s", i+1, hard, code, took)
		switch {
		case took >= deadline:
			t.Errorf("stop %d took %s, the deadline is %s", i+1, took, deadline)
		case hard && code != 3 && code != 0:
			t.Errorf("stop %d with a second signal: exit %d, want 3 (or 0 if the graceful stop won)", i+1, code)
		case !hard && code != 0:
			t.Errorf("graceful stop %d: exit %d, want 0", i+1, code)
		}
		if !hard && checkAcknowledged(t, dsn, names.Slot, logFile.Name()) {
			acked++
		}
		c = startChild(t, cfgPath, admin, logFile)
	}
	stopped.Store(true)
	if err := <-work; err != nil {
		t.Fatal(err)
	}
	lsn, err := m.run(t.Context(), conn, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitChild(t, c, "caught up", func() bool { st, err := c.status(); return err == nil && st.CaughtUp(lsn) })
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(<-c.done); code != 0 {
		t.Fatalf("last stop: exit %d", code)
	}
	t.Logf("%d of 3 graceful stops left confirmed_flush_lsn at the acknowledged position", acked)
	b, _ := os.ReadFile(logFile.Name())
	if n := strings.Count(string(b), `msg="cdcd stopped cleanly"`); n < 4 {
		t.Errorf("%d clean stops logged, want at least 4", n)
	}
	verify(t, dir, m)
}

// waitChild is waitFor for a child daemon; on a timeout the child gets
// SIGQUIT, so its goroutines' stacks land in its log for the failure.
func waitChild(t *testing.T, c *child, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !ok() {
		select {
		case err := <-c.done:
			t.Fatalf("daemon stopped while waiting for %s: %v", what, err)
		default:
		}
		if time.Now().After(deadline) {
			if st, err := c.status(); err == nil {
				t.Logf("status: %+v", st)
			}
			_ = c.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-c.done:
			case <-time.After(10 * time.Second):
			}
			t.Fatalf("timed out waiting for %s (the child's stacks are in its log)", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkAcknowledged compares the slot's confirmed_flush_lsn with the
// flushed position the stopped daemon logged last. It must never be past
// it (DESIGN.md: the slot never confirms what the log does not hold). It
// should equal it: the source sends that position as its final standby
// status and ends the stream with CopyDone, waiting for the server's end,
// so the walsender has read the status before the connection closes.
func checkAcknowledged(t *testing.T, dsn, slot, logPath string) (equal bool) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	b, _ := os.ReadFile(logPath)
	all := flushedLine.FindAllStringSubmatch(string(b), -1)
	if len(all) == 0 {
		t.Errorf("no \"source stopped\" line in the log")
		return false
	}
	want, _ := pglogrepl.ParseLSN(all[len(all)-1][1])
	var got pglogrepl.LSN
	for range 50 { // the walsender records the last status as it exits
		var s string
		if err := conn.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, slot).Scan(&s); err == nil {
			if got, _ = pglogrepl.ParseLSN(s); got == want {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	switch {
	case got > want:
		t.Errorf("slot confirmed_flush_lsn %s is past the position the daemon acknowledged, %s", got, want)
	default:
		t.Errorf("slot confirmed_flush_lsn %s, the daemon acknowledged %s: the final status was not read", got, want)
	}
	return false
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
