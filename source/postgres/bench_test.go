package postgres

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
)

// Heavy tests and benchmarks. None runs in a plain `go test`:
//
//	CDCD_PG_HEAVY=1 go test ./source/postgres -run TestLargeTransactionMemory -v
//	go test ./source/postgres -run '^$' -bench . -benchtime 1x   (CDCD_BENCH_ROWS, default 1000000)
//
// Both run the reader the way the daemon does: into the embedded log, with
// Avro encoding, partitioning and the position dedupe (logemit_test.go).

// benchDDL is the 8-column benchmark table.
const benchDDL = `CREATE TABLE bench (id bigint PRIMARY KEY, a int, b bigint, c text, d numeric(12,2), e timestamptz, f bool, g float8)`

const benchInsert = `INSERT INTO bench SELECT g, g %% 1000, g * 7, 'row ' || g, (g %% 100000) / 100.0, '2024-01-01'::timestamptz + g * interval '1 second',
	g %% 2 = 0, g / 3.0 FROM generate_series(%d, %d) g`

func benchRows() int {
	if s := os.Getenv("CDCD_BENCH_ROWS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	return 1_000_000
}

// benchWorkers is CDCD_BENCH_WORKERS, else the reader's default.
func benchWorkers() int {
	n, _ := strconv.Atoi(os.Getenv("CDCD_BENCH_WORKERS"))
	return n
}

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs fn and reports its rate, CPU per item and the process's peak RSS.
type measured struct {
	rate   float64 // items per second
	cpuUs  float64 // CPU microseconds per item
	peakMB float64
}

func measure(items int, fn func() error) (measured, error) {
	// Reset the peak RSS (VmHWM) so it is this measurement's.
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	cpu0, t0 := cpuTime(), time.Now()
	if err := fn(); err != nil {
		return measured{}, err
	}
	el, cpu := time.Since(t0), cpuTime()-cpu0
	rss, _ := peakRSS(os.Getpid())
	return measured{rate: float64(items) / el.Seconds(), cpuUs: float64(cpu.Microseconds()) / float64(items), peakMB: float64(rss) / (1 << 20)}, nil
}

// BenchmarkInitialLoad: the initial load's rows/s into the log against
// COPY ... TO STDOUT (FORMAT binary) of the same table, in the same run,
// through this package's model of the daemon's emitter (logEmitter), and
// without any emitter. The daemon's own path is daemon's
// BenchmarkLoadIntoLog.
func BenchmarkInitialLoad(b *testing.B) {
	rows := benchRows()
	env := benchEnv(b, benchDDL+"; "+fmt.Sprintf(benchInsert, 1, rows)+"; ANALYZE bench")
	for b.Loop() {
		raw, err := measure(rows, func() error {
			_, err := env.conn.PgConn().CopyTo(b.Context(), io.Discard, "COPY bench TO STDOUT (FORMAT binary)")
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		dir := b.TempDir()
		lg, err := log.Open(filepath.Join(dir, "log"), log.Options{CleanupInterval: -1}, nil)
		if err != nil {
			b.Fatal(err)
		}
		env.names.Slot = fmt.Sprintf("%s_%d", env.names.Slot, time.Now().UnixNano()%1e6)
		cfg := Config{DSN: env.dsn, Slot: env.names.Slot, Publication: env.names.Publication, Tables: []string{"bench"},
			Snapshot: true, SpillDir: filepath.Join(dir, "spill"), HeartbeatInterval: -1, SnapshotWorkers: benchWorkers()}
		r := New(cfg, &memState{}, discard)
		stop := profileCPU(b, "CDCD_BENCH_LOAD_CPU") // a profile of this phase alone
		ours, err := measure(rows, func() error {
			return runUntil(b.Context(), r, newLogEmitter(lg, 8), func() bool { return r.Stats().Streaming.Load() })
		})
		stop()
		dropSlot(b, env.conn, cfg.Slot)
		if err != nil {
			b.Fatal(err)
		}
		// Without the log: the same load into an Emitter that drops batches.
		cfg.Slot += "_null"
		r = New(cfg, &memState{}, discard)
		null, err := measure(rows, func() error {
			return runUntil(b.Context(), r, nullEmitter{}, func() bool { return r.Stats().Streaming.Load() })
		})
		dropSlot(b, env.conn, cfg.Slot)
		if err != nil {
			b.Fatal(err)
		}
		appendOnly := logCeiling(b, lg, topicPrefix+"public.bench", 2*8192)
		lg.Close()
		report(b, "load", rows, raw, ours, "COPY binary")
		fmt.Printf("load of %d rows without the log: %.0f rows/s (%.2f CPU-µs/row), ratio %.2f of COPY; "+
			"the log alone appends the same records at %.0f rows/s\n", rows, null.rate, null.cpuUs, null.rate/raw.rate, appendOnly)
	}
}

// profileCPU starts a CPU profile into the file named by env, if set; the
// returned function stops it.
func profileCPU(b *testing.B, env string) func() {
	path := os.Getenv(env)
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

// nullEmitter drops every batch: the reader's own speed.
type nullEmitter struct{}

func (nullEmitter) Emit(context.Context, []source.Change) error { return nil }

// logCeiling reads a topic's records and appends them again to a new log
// in batches of n, in order (pipelined as the load is), returning records
// per second: the log's own limit for the same records.
func logCeiling(b *testing.B, from log.Log, topic string, n int) float64 {
	var recs []log.Record
	if err := readTopic(b.Context(), from, topic, func(r log.Record) error {
		r.Offset = 0
		recs = append(recs, r)
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	lg, err := log.Open(filepath.Join(b.TempDir(), "log"), log.Options{CleanupInterval: -1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer lg.Close()
	if err := lg.CreateTopic(b.Context(), topic, log.TopicConfig{Partitions: 8}); err != nil {
		b.Fatal(err)
	}
	var pipe source.Pipeline
	t0 := time.Now()
	for lo := 0; lo < len(recs); lo += n {
		part := recs[lo:min(lo+n, len(recs))]
		if err := pipe.Go(b.Context(), func() error { return lg.Produce(b.Context(), topic, part) }); err != nil {
			b.Fatal(err)
		}
	}
	if err := pipe.Wait(b.Context()); err != nil {
		b.Fatal(err)
	}
	return float64(len(recs)) / time.Since(t0).Seconds()
}

// BenchmarkStreaming: streamed events/s into the log against a plain
// pglogrepl receive-and-decode loop over the same slot contents.
func BenchmarkStreaming(b *testing.B) {
	rows := benchRows()
	env := benchEnv(b, benchDDL)
	for b.Loop() {
		dir := b.TempDir()
		lg, err := log.Open(filepath.Join(dir, "log"), log.Options{CleanupInterval: -1}, nil)
		if err != nil {
			b.Fatal(err)
		}
		ours := fmt.Sprintf("%s_ours_%d", env.names.Slot, time.Now().UnixNano()%1e6)
		plain := fmt.Sprintf("%s_plain_%d", env.names.Slot, time.Now().UnixNano()%1e6)
		cfg := Config{DSN: env.dsn, Slot: ours, Publication: env.names.Publication, Tables: []string{"bench"},
			SpillDir: filepath.Join(dir, "spill"), HeartbeatInterval: -1}
		// Create both slots, then write: both hold the same changes.
		r := New(cfg, &memState{}, discard)
		if err := runUntil(b.Context(), r, newLogEmitter(lg, 8), func() bool { return r.Stats().Streaming.Load() }); err != nil {
			b.Fatal(err)
		}
		env.exec(b, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", plain))
		env.exec(b, "TRUNCATE bench")
		var end uint64
		for lo := 1; lo <= rows; lo += 1000 {
			hi := min(lo+999, rows)
			tx, err := env.conn.Begin(b.Context())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Exec(b.Context(), fmt.Sprintf(benchInsert, lo, hi)); err != nil {
				b.Fatal(err)
			}
			var s string
			if err := tx.QueryRow(b.Context(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(b.Context()); err != nil {
				b.Fatal(err)
			}
			end, _ = parseLSN(s)
		}
		rawM, err := measure(rows, func() error { return plainLoop(b.Context(), env.dsn, plain, env.names.Publication, end) })
		if err != nil {
			b.Fatal(err)
		}
		r = New(cfg, &memState{}, discard)
		oursM, err := measure(rows, func() error {
			return runUntil(b.Context(), r, newLogEmitter(lg, 8), func() bool { return r.Stats().Flushed.Load() >= end })
		})
		lg.Close()
		dropSlot(b, env.conn, ours)
		dropSlot(b, env.conn, plain)
		if err != nil {
			b.Fatal(err)
		}
		report(b, "stream", rows, rawM, oursM, "plain pglogrepl loop")
	}
}

func report(b *testing.B, what string, n int, raw, ours measured, rawName string) {
	ratio := ours.rate / raw.rate
	b.ReportMetric(ours.rate, what+"-rows/s")
	b.ReportMetric(raw.rate, "raw-rows/s")
	b.ReportMetric(ratio, "ratio")
	b.ReportMetric(ours.cpuUs, "cpu-µs/row")
	b.ReportMetric(ours.peakMB, "peak-MB")
	fmt.Printf("%s of %d rows: cdcd %.0f rows/s (%.2f CPU-µs/row), %s %.0f rows/s (%.2f CPU-µs/row): ratio %.2f; peak RSS %.0f MB\n",
		what, n, ours.rate, ours.cpuUs, rawName, raw.rate, raw.cpuUs, ratio, ours.peakMB)
}

// runUntil runs r until done() holds, then stops it.
func runUntil(ctx context.Context, r *Reader, e source.Emitter, done func() bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx, e) }()
	for {
		select {
		case err := <-errc:
			return fmt.Errorf("reader stopped: %w", err)
		case <-time.After(time.Millisecond):
			if done() {
				cancel()
				<-errc
				return nil
			}
		}
	}
}

// plainLoop is DecodeLoop (rawloop.go).
func plainLoop(ctx context.Context, dsn, slot, publication string, end uint64) error {
	_, err := DecodeLoop(ctx, dsn, slot, publication, end)
	return err
}

// dropSlot drops a slot, waiting up to 5s for its walsender to let go.
func dropSlot(tb testing.TB, conn *pgx.Conn, slot string) {
	tb.Helper()
	var err error
	for i := 0; i < 50; i++ {
		if _, err = conn.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", slot); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	tb.Fatalf("drop slot %s: %v", slot, err)
}

// benchEnv is setup for benchmarks.
func benchEnv(b *testing.B, ddl string) *env {
	return setup(b, ddl)
}

// TestLargeTransactionMemory: one transaction of 5M rows (CDCD_PG_HEAVY=1;
// CDCD_PG_HEAVY_ROWS to change the size) is captured by a reader process
// whose memory is capped with GOMEMLIMIT; its peak RSS must stay under
// 300 MB, and the log must hold the transaction whole: 5M changes at its
// commit LSN, indexes 0..5M-1 once each.
func TestLargeTransactionMemory(t *testing.T) {
	if os.Getenv("CDCD_PG_HEAVY") == "" {
		t.Skip("set CDCD_PG_HEAVY=1 to run (a 5M-row transaction)")
	}
	rows := 5_000_000
	if s := os.Getenv("CDCD_PG_HEAVY_ROWS"); s != "" {
		rows, _ = strconv.Atoi(s)
	}
	ke := newKillEnv(t, kvDDL, false)
	ke.cc.Reader.DSN = ke.dsn // the server's own logical_decoding_work_mem: 64MB
	ke.cc.Reader.BatchMax = 0
	ke.proc = startChild(t, ke.cc, ke.logFile, "GOMEMLIMIT=224MiB") // cmd/cdcd's defaultMemoryLimit
	for slotConfirmed(t, ke.conn, ke.names.Slot) == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	began := time.Now()
	ke.exec(t, fmt.Sprintf(`INSERT INTO kv SELECT g, g, repeat('p', 20) FROM generate_series(1, %d) g`, rows))
	committed := time.Since(began)
	topic := topicPrefix + "public.kv"
	for deadline := time.Now().Add(20 * time.Minute); countRecords(t, ke.dir, topic) < rows; time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records after 20 minutes", countRecords(t, ke.dir, topic), rows)
		}
	}
	delivered := time.Since(began)
	peak, err := peakRSS(ke.proc.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	ke.proc.stop(t)
	t.Logf("%d-row transaction: committed after %v, in the log after %v; reader peak RSS (VmHWM) %d MB",
		rows, committed.Round(time.Millisecond), delivered.Round(time.Millisecond), peak>>20)
	if peak >= 300<<20 {
		t.Errorf("peak RSS %d MB, want under 300 MB", peak>>20)
	}
	if b, _ := os.ReadFile(ke.logFile.Name()); !strings.Contains(string(b), "replayed a transaction streamed before its commit") {
		t.Error("the transaction did not arrive streamed: the test did not exercise the spill")
	}
	// Whole: one commit LSN, every index once.
	lg, err := log.Open(filepath.Join(ke.dir, "log"), log.Options{ReadOnly: true, CleanupInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	seen := make([]bool, rows)
	var lsn uint64
	n := 0
	err = readTopic(t.Context(), lg, topic, func(r log.Record) error {
		l, idx, err := pgpos.Parse(r.Header(headerPos))
		if err != nil {
			return err
		}
		if lsn == 0 {
			lsn = l
		}
		if l != lsn || int(idx) >= rows || seen[idx] {
			return fmt.Errorf("record at %X/%d: not one whole transaction once", l, idx)
		}
		seen[idx] = true
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != rows {
		t.Fatalf("%d records, want %d", n, rows)
	}
}

// countRecords sums the end offsets of a topic's partitions.
func countRecords(t *testing.T, dir, topic string) int {
	lg, err := log.Open(filepath.Join(dir, "log"), log.Options{ReadOnly: true, CleanupInterval: -1}, nil)
	if err != nil {
		return 0
	}
	defer lg.Close()
	info, err := lg.DescribeTopic(t.Context(), topic)
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range info.Partitions {
		n += int(p.End - p.Start)
	}
	return n
}
