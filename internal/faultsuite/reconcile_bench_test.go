package faultsuite

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/reconcile"
)

// reconcileBenchDDL is the benchmark's table (the daemon benchmarks'
// shape: integers, text, numeric, timestamptz, boolean, float).
const reconcileBenchDDL = `CREATE TABLE bench (id bigint PRIMARY KEY, a int, b bigint, c text, d numeric(12,2), e timestamptz, f bool, g float8);
INSERT INTO bench SELECT g, g % 1000, g * 7, 'row ' || g, (g % 100000) / 100.0, '2024-01-01'::timestamptz + g * interval '1 second',
	g % 2 = 0, g / 3.0 FROM generate_series(1, ROWS) g; ANALYZE bench;`

// TestReconcileBench measures cdcd reconcile of a table equal to its
// mirror, the daemon running and idle, against COPY bench TO STDOUT
// (FORMAT binary) of the same table in the same run (issue 21's goal: a
// ratio of at least 0.3 at 5M rows), and the source's CPU per row of
// each. CDCD_RECONCILE_BENCH_ROWS sets the size (default 20,000: CI runs
// it small, checking that every figure is there). A test, not a
// testing.B: the pipeline harness is the real binary's, built on
// *testing.T. No timing assertion. CDCD_RECONCILE_BENCH_CPU=file writes
// the reconcile's CPU profile.
func TestReconcileBench(t *testing.T) {
	rows := 20_000
	if n, err := strconv.Atoi(os.Getenv("CDCD_RECONCILE_BENCH_ROWS")); err == nil && n > 0 {
		rows = n
	}
	p := newPipeline(t, pipelineOptions{DDL: strings.Replace(reconcileBenchDDL, "ROWS", strconv.Itoa(rows), 1), Tables: []string{"public.bench"}, Partitions: 4})
	p.start()
	lsn := p.markLSN()
	p.waitFor("the load caught up", time.Duration(rows/1000+180)*time.Second, func(st daemon.Status) bool { return st.CaughtUp(lsn) })

	// COPY binary, twice (the second with a warm cache, like the
	// reconcile after it): the faster counts.
	var pid int
	if err := p.Conn.QueryRow(p.ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var copyRate, copyCPU float64
	for range 2 {
		cpu0, t0 := reconcile.ProcessCPU(pid), time.Now()
		if _, err := p.Conn.PgConn().CopyTo(p.ctx, io.Discard, "COPY bench TO STDOUT (FORMAT binary)"); err != nil {
			t.Fatal(err)
		}
		if r := float64(rows) / time.Since(t0).Seconds(); r > copyRate {
			copyRate, copyCPU = r, float64((reconcile.ProcessCPU(pid)-cpu0).Microseconds())/float64(rows)
		}
	}

	t0 := time.Now()
	cmd := exec.CommandContext(p.ctx, binary(t), "reconcile", "-c", p.CfgPath, "--json", "public.bench")
	cmd.Env = append(os.Environ(), "CDCD_CPUPROFILE="+os.Getenv("CDCD_RECONCILE_BENCH_CPU"))
	out, err := cmd.Output()
	wall := time.Since(t0)
	var doc struct{ Tables []*reconcile.TableReport }
	if err != nil || json.Unmarshal(out, &doc) != nil || len(doc.Tables) != 1 {
		t.Fatalf("cdcd reconcile: %v: %s", err, out)
	}
	code := cmd.ProcessState.ExitCode()
	cdcdCPU := float64((cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Microseconds()) / float64(rows)
	var rssMB float64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rssMB = float64(ru.Maxrss) / 1024 // KiB on Linux
	}
	r := doc.Tables[0]
	if code != 0 || r == nil || !r.Equal() || r.Rows != int64(rows) || r.Unchecked != 0 {
		t.Fatalf("reconcile of an equal table: exit %d, %+v; want equal, %d rows", code, r, rows)
	}
	if r.RowsPerSecond <= 0 || r.SourceCPUMicrosPerRow <= 0 || copyRate <= 0 {
		t.Errorf("a figure is missing: reconcile %.0f rows/s, %.2f source CPU-µs/row; COPY %.0f rows/s", r.RowsPerSecond, r.SourceCPUMicrosPerRow, copyRate)
	}
	t.Logf("reconcile of %d rows: %.0f rows/s (%.2f source CPU-µs/row, %.2f cdcd CPU-µs/row, cdcd peak RSS %.0f MB; the command took %s in all); COPY binary %.0f rows/s (%.2f source CPU-µs/row): ratio %.2f",
		rows, r.RowsPerSecond, r.SourceCPUMicrosPerRow, cdcdCPU, rssMB, wall.Round(time.Millisecond), copyRate, copyCPU, r.RowsPerSecond/copyRate)
}
