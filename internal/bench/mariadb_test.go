package bench

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/dbtest"
	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
)

// BenchmarkMariaDB is `cdcd bench --source mariadb` (make bench-once runs
// it once at CDCD_BENCH_ROWS rows; default 50,000): every phase runs,
// every count is verified, every figure is positive. The goals are
// printed, not asserted (BENCHMARKS.md has the figures at full size).
func BenchmarkMariaDB(b *testing.B) {
	if err := mariadbserver.CheckInstalled(mariadbserver.Options{}); err != nil {
		dbtest.MissingBinaries(b, err) // fails under CI=true
	}
	rows := 50_000
	if n, err := strconv.Atoi(os.Getenv("CDCD_BENCH_ROWS")); err == nil && n > 0 {
		rows = max(n, 20_000) // the workload's updates and deletes need stride room
	}
	for b.Loop() {
		var out bytes.Buffer
		res, err := Run(b.Context(), Options{
			Source: SourceMariaDB, Rows: rows, Scale: float64(rows) / 2_000_000, CommitInterval: time.Second, CopyRuns: 2, Out: &out,
			Command: func(cfg string) *exec.Cmd {
				cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
				cmd.Env = append(os.Environ(), envChild+"="+cfg)
				return cmd
			},
		})
		b.Log("\n" + out.String())
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range []Measure{res.CopyMedian(), res.Load, res.Decode, res.Stream} {
			if m.Items <= 0 || m.Wall <= 0 || m.CPU <= 0 || m.PGCPU < 0 {
				b.Errorf("%s: a figure is not positive: %+v", m.Name, m)
			}
			// The server's CPU for sending a small binlog (to the plain loop
			// or to cdcd's stream: about 0.4 µs an event, 10 ms at this size)
			// can be below the clock tick; the reads of rows make it work.
			if m.PGCPU == 0 && m.Name != res.Decode.Name && m.Name != res.Stream.Name {
				b.Errorf("%s: MariaDB's CPU is not positive: %+v", m.Name, m)
			}
		}
		if res.Load.PeakRSS <= 0 || res.Stream.PeakRSS <= 0 {
			b.Error("no peak RSS")
		}
		if res.Load.Items != int64(rows) || res.SummaryRows != res.PGRows || res.ScanRows != res.PGRows {
			b.Errorf("load %d rows of %d; MariaDB %d rows, summary %d, scan %d", res.Load.Items, rows, res.PGRows, res.SummaryRows, res.ScanRows)
		}
		if len(res.Decodes) != 2 || res.Decode != medianRun(res.Decodes) {
			b.Errorf("the decode loop ran %d times, want CopyRuns (2), its median the raw limit", len(res.Decodes))
		}
		for _, want := range []string{"SELECT *", "initial load", "decode loop (raw; median of 2)", "streaming", "goals:"} {
			if !strings.Contains(out.String(), want) {
				b.Errorf("the output lacks %q", want)
			}
		}
		b.ReportMetric(res.Load.Rate()/res.CopyMedian().Rate(), "load/select")
		b.ReportMetric(res.Stream.Rate()/res.Decode.Rate(), "stream/loop")
	}
}
