package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

const progressRows = 20000

// loadWatch is what a status watcher saw of one table during a load.
type loadWatch struct {
	catchUp  int // read done, not all committed: shown below 100%
	rate     int // a commit rate and a time left shown
	rising   bool
	lastPct  float64
	final    daemon.SnapshotStatus
	problems []string
}

// TestLoadProgressIntoIceberg watches /status during a load of 20,000
// rows (real PostgreSQL): the table's progress is its rows committed to
// Iceberg, not the rows read. While the read is over but the sink has not
// committed every row, status never says 100% (what it said before);
// with several commits during a throttled incremental load it shows a
// commit rate and a time left; at the end every row is counted, 100%, and
// the daemon logs the load's end. The metrics agree, and the commit
// histogram saw every commit.
func TestLoadProgressIntoIceberg(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"initial", "incremental"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dsn := pgtest.NewDB(t)
			names := pgtest.Names(t)
			conn, err := pgx.Connect(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(t.Context(), fmt.Sprintf(`CREATE TABLE big (id int PRIMARY KEY, v text);
				INSERT INTO big SELECT g, repeat('x', 40) FROM generate_series(1, %d) g; ANALYZE big`, progressRows)); err != nil {
				t.Fatal(err)
			}
			// initial: one commit after the whole read (a long commit
			// interval); incremental: 5,000 rows/s read, a commit every
			// 300 ms.
			interval, incremental := "3s", ""
			if mode == "incremental" {
				interval, incremental = "300ms", "\n    incremental: {chunk_rows: 1000, max_rows_per_second: 5000}"
			}
			dir := t.TempDir()
			path := filepath.Join(dir, "cdcd.yaml")
			cfgText := fmt.Sprintf(`pipeline: prog
data_dir: %q
source:
  postgres:
    dsn: %q
    slot: %s
    publication: %s
    tables: [public.big]
    snapshot: %s%s
log:
  partitions: 2
sink:
  iceberg:
    namespace: mirror
    commit_interval: %s
admin:
  listen: "off"
`, dir, dsn, names.Slot, names.Slot, mode, incremental, interval)
			if err := os.WriteFile(path, []byte(cfgText), 0o644); err != nil {
				t.Fatal(err)
			}
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

			w := watchLoad(t, d, done)
			if mode == "initial" && w.catchUp == 0 {
				t.Error("never saw the catch-up (read over, rows not all committed) below 100%")
			}
			if mode == "incremental" && w.rate == 0 {
				t.Error("no commit rate and time left shown during the throttled load")
			}
			if mode == "incremental" && !w.rising {
				t.Error("the committed share never rose between 0 and 100%")
			}
			t.Logf("%s: %d catch-up observations, %d with a rate and time left", mode, w.catchUp, w.rate)
			for _, p := range w.problems {
				t.Error(p)
			}
			if f := w.final; f.Committed != progressRows || f.CommittedPercent != 100 {
				t.Errorf("at the end: %+v, want %d committed, 100%%", f, progressRows)
			}
			waitFor(t, "the load's end in the log", func() bool {
				return strings.Contains(logs.String(), `msg="load committed to iceberg" table=mirror.big rows=20000`)
			}, done)
			checkLoadMetrics(t, d)
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			d.Close()
		})
	}
}

// watchLoad polls d's status until big's load is all committed, checking
// each observation against the sink's own count.
func watchLoad(t *testing.T, d *daemon.Daemon, done <-chan error) loadWatch {
	t.Helper()
	var w loadWatch
	deadline := time.Now().Add(3 * time.Minute)
	for {
		select {
		case err := <-done:
			t.Fatalf("daemon stopped during the load: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the load did not reach Iceberg in time; last seen %+v", w.final)
		}
		st := d.Status()
		if len(st.Tables) != 1 {
			continue
		}
		s := st.Tables[0].Snapshot
		inIceberg := d.SinkStats()[0].Rows.Load() // read after the status: >= what it saw
		w.final = s
		switch {
		case s.Committed > inIceberg:
			w.problems = append(w.problems, fmt.Sprintf("status counts %d rows committed, the table holds %d", s.Committed, inIceberg))
		case (s.AllCommitted || s.CommittedPercent >= 100) && s.Committed < progressRows:
			w.problems = append(w.problems, fmt.Sprintf("status says all committed (%.1f%%) with %d of %d rows in Iceberg", s.CommittedPercent, s.Committed, progressRows))
		}
		readDone := st.Source.Streaming && s.Incremental == ""
		if readDone && s.Committed < progressRows && inIceberg < progressRows {
			w.catchUp++
		}
		if s.CommittedPercent > 0 && s.CommittedPercent < 100 {
			w.rising = w.rising || s.CommittedPercent > w.lastPct && w.lastPct > 0
			w.lastPct = s.CommittedPercent
		}
		if s.CommitRowsPerSecond > 0 && s.CommitETASeconds > 0 && !s.AllCommitted {
			w.rate++
		}
		if s.AllCommitted && s.Committed == progressRows {
			return w
		}
	}
}

// checkLoadMetrics: the committed load rows and ratio are exported, and
// the commit-duration histogram counted every commit.
func checkLoadMetrics(t *testing.T, d *daemon.Daemon) {
	t.Helper()
	mfs, err := d.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	val := func(name string) (float64, bool) {
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if !hasLabel(m, "table", "mirror.big") {
					continue
				}
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue(), true
				case m.Gauge != nil:
					return m.Gauge.GetValue(), true
				case m.Histogram != nil:
					return float64(m.Histogram.GetSampleCount()), true
				}
			}
		}
		return 0, false
	}
	if v, _ := val("cdcd_table_snapshot_rows_committed_total"); v != progressRows {
		t.Errorf("cdcd_table_snapshot_rows_committed_total = %v, want %d", v, progressRows)
	}
	if v, _ := val("cdcd_table_snapshot_committed_ratio"); v != 1 {
		t.Errorf("cdcd_table_snapshot_committed_ratio = %v, want 1", v)
	}
	commits, _ := val("cdcd_table_commits_total")
	observed, _ := val("cdcd_commit_duration_seconds")
	if commits < 1 || observed != commits {
		t.Errorf("cdcd_commit_duration_seconds observed %v commits, cdcd_table_commits_total is %v", observed, commits)
	}
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
