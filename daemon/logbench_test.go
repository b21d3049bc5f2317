package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres"
)

// The benchmarks' table (the source package's benchmarks use the same).
const (
	benchTable = `CREATE TABLE bench (id bigint PRIMARY KEY, a int, b bigint, c text, d numeric(12,2), e timestamptz, f bool, g float8)`
	benchRows  = `INSERT INTO bench SELECT g, g %% 1000, g * 7, 'row ' || g, (g %% 100000) / 100.0, '2024-01-01'::timestamptz + g * interval '1 second',
	g %% 2 = 0, g / 3.0 FROM generate_series(%d, %d) g`
)

func benchRowCount() int {
	if n, err := strconv.Atoi(os.Getenv("CDCD_BENCH_ROWS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

// BenchmarkLoadIntoLog: the initial load through the daemon's own emitter
// (registry, masking check, Avro key and envelope, headers, the
// per-partition dedupe) into the embedded log, against COPY ... TO STDOUT
// (FORMAT binary) of the same table in the same run. Issue 4's load goal is
// measured here: source/postgres's BenchmarkInitialLoad runs the reader
// into a test emitter that models this one. CDCD_BENCH_ROWS (default 1M)
// sets the table's size, CDCD_BENCH_WORKERS and CDCD_BENCH_CHUNK_ROWS the
// load's workers and chunk size (default: the reader's); CDCD_BENCH_LOAD_CPU=file writes a CPU profile of
// the load alone.
func BenchmarkLoadIntoLog(b *testing.B) {
	rows := benchRowCount()
	ctx := b.Context()
	dsn, conn := benchDB(b, benchTable+"; "+fmt.Sprintf(benchRows, 1, rows)+"; ANALYZE bench")
	names := pgtest.Names(b)
	for i := 0; b.Loop(); i++ {
		raw, err := measureLoad(rows, func() error {
			_, err := conn.PgConn().CopyTo(ctx, io.Discard, "COPY bench TO STDOUT (FORMAT binary)")
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		e, lg := newTestEmitter(b, "bench", 8)
		slot := fmt.Sprintf("%s_%d", names.Slot, i)
		workers, _ := strconv.Atoi(os.Getenv("CDCD_BENCH_WORKERS"))
		chunk, _ := strconv.Atoi(os.Getenv("CDCD_BENCH_CHUNK_ROWS"))
		r := postgres.New(postgres.Config{DSN: dsn, Slot: slot, Publication: names.Publication, Tables: []string{"bench"},
			Snapshot: true, SpillDir: b.TempDir(), HeartbeatInterval: -1, SnapshotWorkers: workers, SnapshotChunkRows: int64(chunk)},
			e.state, slog.New(slog.DiscardHandler))
		stop := cpuProfile(b, os.Getenv("CDCD_BENCH_LOAD_CPU"))
		ours, err := measureLoad(rows, func() error { return loadUntilStreaming(ctx, r, e) })
		stop()
		if err != nil {
			b.Fatal(err)
		}
		if got := e.produced.Load(); got != int64(rows) {
			b.Fatalf("the emitter appended %d records, want %d", got, rows)
		}
		lg.Close()
		dropBenchSlot(b, conn, slot)
		reportAgainstRaw(b, "load", rows, ours, "COPY binary", raw)
	}
}

// BenchmarkStreamIntoLog: streaming through the daemon's emitter into the
// embedded log — each batch emitted and acknowledged (Emit), as the reader
// streams — against the plain pglogrepl receive-and-decode loop
// (postgres.DecodeLoop) over the same slot contents, in the same run:
// CDCD_BENCH_ROWS inserts (default 1M) in transactions of 1,000.
func BenchmarkStreamIntoLog(b *testing.B) {
	benchStream(b, func(tb testing.TB) (*emitter, log.Log) { return newTestEmitter(tb, "bench", 8) })
}

// benchStream is BenchmarkStreamIntoLog over the emitter (of table bench, 8
// partitions) and log newEmitter makes for each round.
func benchStream(b *testing.B, newEmitter func(testing.TB) (*emitter, log.Log)) {
	rows := benchRowCount()
	ctx := b.Context()
	dsn, conn := benchDB(b, benchTable)
	names := pgtest.Names(b)
	for i := 0; b.Loop(); i++ {
		e, lg := newEmitter(b)
		ours, plain := fmt.Sprintf("%s_ours_%d", names.Slot, i), fmt.Sprintf("%s_plain_%d", names.Slot, i)
		cfg := postgres.Config{DSN: dsn, Slot: ours, Publication: names.Publication, Tables: []string{"bench"},
			SpillDir: b.TempDir(), HeartbeatInterval: -1}
		// Create both slots, then write: both hold the same changes.
		r := postgres.New(cfg, e.state, slog.New(slog.DiscardHandler))
		if err := loadUntilStreaming(ctx, r, e); err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", plain); err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "TRUNCATE bench"); err != nil {
			b.Fatal(err)
		}
		var end pglogrepl.LSN
		for lo := 1; lo <= rows; lo += 1000 {
			tx, err := conn.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(benchRows, lo, min(lo+999, rows))); err != nil {
				b.Fatal(err)
			}
			var s string
			if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
			if end, err = pglogrepl.ParseLSN(s); err != nil {
				b.Fatal(err)
			}
		}
		raw, err := measureLoad(rows, func() error {
			_, err := postgres.DecodeLoop(ctx, dsn, plain, names.Publication, uint64(end))
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		before := e.produced.Load()
		r = postgres.New(cfg, e.state, slog.New(slog.DiscardHandler))
		stop := cpuProfile(b, os.Getenv("CDCD_BENCH_STREAM_CPU"))
		got, err := measureLoad(rows, func() error {
			return runReaderUntil(ctx, r, e, func() bool { return r.Stats().Flushed.Load() >= uint64(end) })
		})
		stop()
		if err != nil {
			b.Fatal(err)
		}
		// The TRUNCATE is a record in each of the 8 partitions.
		if n := e.produced.Load() - before; n != int64(rows)+8 {
			b.Fatalf("the emitter appended %d records, want %d inserts and 8 for the truncate", n, rows)
		}
		lg.Close()
		dropBenchSlot(b, conn, ours)
		dropBenchSlot(b, conn, plain)
		reportAgainstRaw(b, "stream", rows, got, "plain pglogrepl decode loop", raw)
	}
}

// benchDB is a fresh database prepared with sql, and a connection to it
// (closed at the benchmark's end).
func benchDB(b testing.TB, sql string) (string, *pgx.Conn) {
	dsn := pgtest.NewDB(b)
	conn, err := pgx.Connect(b.Context(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(b.Context(), sql); err != nil {
		b.Fatal(err)
	}
	return dsn, conn
}

// dropBenchSlot drops a slot, waiting up to 5 s for its walsender to let go.
func dropBenchSlot(b testing.TB, conn *pgx.Conn, slot string) {
	var err error
	for range 50 {
		if _, err = conn.Exec(b.Context(), "SELECT pg_drop_replication_slot($1)", slot); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Fatalf("drop slot %s: %v", slot, err)
}

// loadUntilStreaming runs r into e until its initial load is done.
func loadUntilStreaming(ctx context.Context, r *postgres.Reader, e source.Emitter) error {
	return runReaderUntil(ctx, r, e, func() bool { return r.Stats().Streaming.Load() })
}

// runReaderUntil runs r into e until done holds.
func runReaderUntil(ctx context.Context, r *postgres.Reader, e source.Emitter, done func() bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx, e) }()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			return fmt.Errorf("reader stopped: %w", err)
		case <-tick.C:
			if done() {
				cancel()
				<-errc
				return nil
			}
		}
	}
}

type loadMeasure struct {
	rate, cpuUs, peakMB float64
	serverUs            float64 // the database server's CPU-µs per item, where measured
}

// selfCPU is this process's user+system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measureLoad times fn over items: wall rate, this process's CPU per item
// and its peak RSS (reset first).
func measureLoad(items int, fn func() error) (loadMeasure, error) {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	cpu := selfCPU
	cpu0, t0 := cpu(), time.Now()
	if err := fn(); err != nil {
		return loadMeasure{}, err
	}
	el, used := time.Since(t0), cpu()-cpu0
	m := loadMeasure{rate: float64(items) / el.Seconds(), cpuUs: float64(used.Microseconds()) / float64(items)}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			var kb int64
			if n, _ := fmt.Sscanf(line, "VmHWM: %d kB", &kb); n == 1 {
				m.peakMB = float64(kb) / 1024
			}
		}
	}
	return m, nil
}

// reportAgainstRaw logs and reports a measurement of what ("load" or
// "stream") through the daemon's emitter against the raw limit measured in
// the same run.
func reportAgainstRaw(b *testing.B, what string, rows int, ours loadMeasure, rawName string, raw loadMeasure) {
	ratio := ours.rate / raw.rate
	b.Logf("%s of %d rows through the daemon's emitter: %.0f rows/s (%.2f CPU-µs/row, peak RSS %.0f MB); %s %.0f rows/s (%.2f CPU-µs/row): ratio %.2f",
		what, rows, ours.rate, ours.cpuUs, ours.peakMB, rawName, raw.rate, raw.cpuUs, ratio)
	b.ReportMetric(ours.rate, what+"-rows/s")
	b.ReportMetric(raw.rate, "raw-rows/s")
	b.ReportMetric(ratio, "ratio")
	b.ReportMetric(ours.cpuUs, "cpu-µs/row")
	b.ReportMetric(ours.peakMB, "peak-MB")
}

// cpuProfile profiles the process into path until the returned func is
// called; nothing when path is empty.
func cpuProfile(b testing.TB, path string) func() {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
