package bench

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/pgserver"
)

// envChild makes the test binary a daemon on the config file it names (the
// benchmark's child), as `cdcd run -c FILE` would be.
const envChild = "CDCD_BENCH_TEST_DAEMON"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(envChild); cfg != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
		if err := RunDaemon(ctx, cfg, logger); err != nil {
			logger.Error("daemon failed", "err", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestShortRun runs the whole benchmark at a small size: every phase runs,
// every count is verified, every figure is positive. No timing assertions.
func TestShortRun(t *testing.T) {
	if err := pgserver.CheckInstalled(""); err != nil {
		t.Skip(err)
	}
	var out bytes.Buffer
	res, err := Run(t.Context(), Options{
		Rows: 50_000, Scale: 0.025, LatencyRate: 2000, LatencyDuration: 3 * time.Second,
		CommitInterval: time.Second, CopyRuns: 2, Out: &out,
		Command: func(cfg string) *exec.Cmd {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envChild+"="+cfg)
			return cmd
		},
	})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []Measure{res.CopyMedian(), res.Load, res.Decode, res.Stream, res.Latency.Measure} {
		if m.Items <= 0 || m.Wall <= 0 || m.Rate() <= 0 || m.CPU <= 0 || m.PGCPU <= 0 {
			t.Errorf("%s: a figure is not positive: %+v", m.Name, m)
		}
	}
	for _, m := range []Measure{res.Load, res.Stream, res.Latency.Measure} {
		if m.PeakRSS <= 0 {
			t.Errorf("%s: no peak RSS", m.Name)
		}
	}
	if res.Load.Items != 50_000 || res.Stream.Items != 68_000 {
		t.Errorf("load %d rows, streaming %d events; want 50000 and 68000", res.Load.Items, res.Stream.Items)
	}
	if res.PGRows <= 50_000 || res.SummaryRows != res.PGRows || res.ScanRows != res.PGRows {
		t.Errorf("rows: PostgreSQL %d, summary %d, scan %d", res.PGRows, res.SummaryRows, res.ScanRows)
	}
	l := res.Latency
	if l.Transactions <= 0 || l.P50 <= 0 || l.P99 < l.P50 || l.Max < l.P99 {
		t.Errorf("latency figures out of order: %+v", l)
	}
	for _, want := range []string{"COPY binary", "initial load", "decode loop", "streaming", "latency", "goals:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q", want)
		}
	}
}
