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

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/internal/dbtest"
	"github.com/cdcd-dev/cdcd/internal/pgserver"
	icebergsink "github.com/cdcd-dev/cdcd/sink/iceberg"
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
		dbtest.MissingBinaries(t, err) // fails under CI=true
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

// TestLatencies: a transaction is visible only in a snapshot whose offsets
// have passed all of its records in every partition.
func TestLatencies(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// Two partitions; the phase starts at offsets {10, 20}. Transaction
	// A (commit LSN 100) has a record in each, B (200) in partition 1.
	recs := [][]uint64{{100}, {100, 200}}
	base := []int64{10, 20}
	txs := []txResult{{inner: 90, committed: t0, rows: 2}, {inner: 150, committed: t0.Add(time.Second), rows: 1}}
	snaps := []tableState{
		{offsets: []int64{10, 20}, seen: t0.Add(100 * time.Millisecond)},  // nothing yet
		{offsets: []int64{11, 20}, seen: t0.Add(200 * time.Millisecond)},  // half of A
		{offsets: []int64{11, 21}, seen: t0.Add(1500 * time.Millisecond)}, // all of A
		{offsets: []int64{11, 22}, seen: t0.Add(3 * time.Second)},         // B
	}
	got, err := latencies(txs, snaps, base, recs)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{1500 * time.Millisecond, 2 * time.Second}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("latencies %v, want %v", got, want)
	}
}

// TestStateOfMaintenanceSnapshot: a compaction's snapshot carries neither
// offsets nor a source position; the state is its newest ancestor's that
// does, and its own row count. (A stream phase failed with every record
// consumed and "source position 0" when the last commit was a compaction.)
func TestStateOfMaintenanceSnapshot(t *testing.T) {
	parent := func(id int64) *int64 { return &id }
	snaps := map[int64]*table.Snapshot{
		1: {SnapshotID: 1, Summary: &table.Summary{Properties: iceberg.Properties{
			icebergsink.PropOffsets: `{"0":5,"1":7}`, icebergsink.PropSourcePosition: "00000000116c2dd000000003",
			"total-records": "20", "total-position-deletes": "8"}}},
		2: {SnapshotID: 2, ParentSnapshotID: parent(1), Summary: &table.Summary{Operation: table.OpReplace, Properties: iceberg.Properties{
			"total-records": "12", "total-position-deletes": "0"}}},
		3: {SnapshotID: 3, ParentSnapshotID: parent(2), Summary: &table.Summary{Operation: table.OpReplace, Properties: iceberg.Properties{
			"total-records": "12", "total-position-deletes": "0"}}},
	}
	byID := func(id int64) *table.Snapshot { return snaps[id] }
	for _, id := range []int64{1, 2, 3} {
		st, ok := stateOf(snaps[id], byID)
		if !ok || st.snapshotID != id || st.rows != 12 || st.lsn != 0x116C2DD0 || st.consumed != 12 || len(st.offsets) != 2 || st.offsets[1] != 7 {
			t.Fatalf("snapshot %d: ok %v, state %+v; want rows 12, lsn 116C2DD0, offsets [5 7]", id, ok, st)
		}
	}
	orphan := &table.Snapshot{SnapshotID: 4, ParentSnapshotID: parent(99), Summary: &table.Summary{Properties: iceberg.Properties{"total-records": "3"}}}
	if st, ok := stateOf(orphan, byID); ok || st.rows != 3 {
		t.Fatalf("a snapshot with no ancestor carrying offsets: ok %v, state %+v; want not ok, rows 3", ok, st)
	}
}
