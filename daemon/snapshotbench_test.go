package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// BenchmarkIncrementalIntoLog: an incremental snapshot of the benchmark
// table (chunks between watermarks while the slot streams) through the
// daemon's emitter into the embedded log, against COPY ... TO STDOUT
// (FORMAT binary) of the same table and against the initial load (COPY
// chunks in the slot's exported snapshot), in the same run. Issue 17's
// goal is an incremental rate of at least 0.8 of the initial load's.
// CDCD_BENCH_ROWS (default 1M) sets the table's size, CDCD_BENCH_CHUNK_ROWS
// the snapshot's chunk; CDCD_BENCH_INC_CPU=file profiles the snapshot.
func BenchmarkIncrementalIntoLog(b *testing.B) {
	rows := benchRowCount()
	chunk, _ := strconv.Atoi(os.Getenv("CDCD_BENCH_CHUNK_ROWS"))
	for b.Loop() {
		res := measureIncremental(b, rows, chunk)
		reportAgainstRaw(b, "incremental", rows, res.inc, "COPY binary", res.raw)
		reportAgainstRaw(b, "load", rows, res.load, "COPY binary", res.raw)
		b.ReportMetric(res.inc.rate/res.load.rate, "inc/load")
		b.Logf("incremental / initial load: %.2f; streaming lag while the snapshot ran: max %s over %d changes", res.inc.rate/res.load.rate,
			res.lagMax.Round(time.Millisecond), res.lagN)
	}
}

// TestIncrementalBenchShort runs the benchmark's measurement once at a
// small size (as CI does): every phase runs and is verified; no timing
// assertions.
func TestIncrementalBenchShort(t *testing.T) {
	t.Parallel()
	res := measureIncremental(t, 20_000, 2000)
	for name, m := range map[string]loadMeasure{"copy": res.raw, "load": res.load, "incremental": res.inc} {
		if m.rate <= 0 || m.cpuUs <= 0 {
			t.Errorf("%s: a figure is not positive: %+v", name, m)
		}
	}
	if res.lagN == 0 {
		t.Error("no streamed change was measured while the snapshot ran")
	}
	t.Logf("copy %.0f rows/s, load %.0f rows/s, incremental %.0f rows/s (%.2f of the load, %.2f CPU-µs/row), lag max %s",
		res.raw.rate, res.load.rate, res.inc.rate, res.inc.rate/res.load.rate, res.inc.cpuUs, res.lagMax)
}

type incrementalResult struct {
	raw, load, inc loadMeasure
	lagMax         time.Duration // longest wait of a streamed change while the snapshot ran
	lagN           int
}

// measureIncremental loads the benchmark table three ways and measures
// each: COPY, the initial load, an incremental snapshot (with a writer
// changing another table, whose changes' wait in the stream is the lag the
// snapshot adds).
func measureIncremental(tb testing.TB, rows, chunk int) incrementalResult {
	ctx := tb.Context()
	dsn, conn := benchDB(tb, benchTable+"; "+fmt.Sprintf(benchRows, 1, rows)+"; ANALYZE bench; CREATE TABLE beat (id int PRIMARY KEY, at timestamptz)")
	names := pgtest.Names(tb)
	var res incrementalResult
	var err error
	if res.raw, err = measureLoad(rows, func() error {
		_, err := conn.PgConn().CopyTo(ctx, io.Discard, "COPY bench TO STDOUT (FORMAT binary)")
		return err
	}); err != nil {
		tb.Fatal(err)
	}

	e, lg := newTestEmitter(tb, "bench", 8)
	r := postgres.New(postgres.Config{DSN: dsn, Slot: names.Slot + "_load", Publication: names.Publication, Tables: []string{"bench"},
		Snapshot: true, SpillDir: tb.TempDir(), HeartbeatInterval: -1}, e.state, slog.New(slog.DiscardHandler))
	if res.load, err = measureLoad(rows, func() error { return loadUntilStreaming(ctx, r, e) }); err != nil {
		tb.Fatal(err)
	}
	lg.Close()
	dropBenchSlot(tb, conn, names.Slot+"_load")

	e, lg = newTestEmitter(tb, "bench", 8)
	defer lg.Close()
	if err := ensureTopic(ctx, lg, "p.public.beat", log.TopicConfig{Partitions: 8}); err != nil {
		tb.Fatal(err)
	}
	lag := &lagEmitter{next: e, table: "beat"}
	r = postgres.New(postgres.Config{DSN: dsn, Slot: names.Slot + "_inc", Publication: names.Publication, Tables: []string{"bench", "beat"},
		SpillDir: tb.TempDir(), HeartbeatInterval: -1, Incremental: postgres.IncrementalConfig{ChunkRows: chunk}},
		e.state, slog.New(slog.DiscardHandler))
	rctx, cancel := context.WithCancel(ctx)
	errc, ran := make(chan error, 1), make(chan struct{})
	go func() { defer close(ran); errc <- r.Run(rctx, lag) }()
	defer func() {
		cancel()
		<-ran
		dropBenchSlot(tb, conn, names.Slot+"_inc")
	}()
	for !r.Stats().Streaming.Load() {
		select {
		case err := <-errc:
			tb.Fatalf("reader stopped: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	beat := startBeat(ctx, dsn)
	stop := cpuProfile(tb, os.Getenv("CDCD_BENCH_INC_CPU"))
	before := e.produced.Load()
	res.inc, err = measureLoad(rows, func() error {
		if err := r.Snapshots().Submit(ctx, snapshot.Request{Table: "public.bench", Origin: "bench"}); err != nil {
			return err
		}
		lag.on.Store(true)
		defer lag.on.Store(false)
		for {
			select {
			case err := <-errc:
				return fmt.Errorf("reader stopped: %w", err)
			case <-time.After(2 * time.Millisecond):
			}
			if p := r.Snapshots().Progress(); len(p) == 1 && !p[0].Finished.IsZero() {
				return nil
			}
		}
	})
	stop()
	beat()
	if err != nil {
		tb.Fatal(err)
	}
	if n := e.produced.Load() - before; n < int64(rows) {
		tb.Fatalf("the emitter appended %d records, want at least %d", n, rows)
	}
	res.lagMax, res.lagN = time.Duration(lag.max.Load()), int(lag.n.Load())
	return res
}

// startBeat inserts a row into beat every 10 ms (its commit time in it)
// until the returned func is called.
func startBeat(ctx context.Context, dsn string) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for i := 0; ctx.Err() == nil; i++ {
			_, _ = conn.Exec(ctx, "INSERT INTO beat VALUES ($1, clock_timestamp())", i)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return func() { cancel(); <-done }
}

// lagEmitter passes batches on and, while on, records how long after its
// commit each change of table reached the emitter.
type lagEmitter struct {
	next  *emitter
	table string
	on    atomic.Bool
	max   atomic.Int64
	n     atomic.Int64
}

func (l *lagEmitter) Emit(ctx context.Context, batch []source.Change) error {
	if l.on.Load() {
		now := time.Now()
		for i := range batch {
			if c := &batch[i]; c.Table.Name == l.table && !c.Snapshot {
				d := now.Sub(c.CommitTime)
				l.n.Add(1)
				if int64(d) > l.max.Load() {
					l.max.Store(int64(d))
				}
			}
		}
	}
	return l.next.Emit(ctx, batch)
}
