package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/outbox"
	"github.com/cdcd-dev/cdcd/source/postgres"
)

// The outbox relay's benchmark: events/s streamed from the outbox table
// into the embedded log against the plain decode loop over the same slot
// contents, and the time from commit to webhook delivery at a steady rate.
// BenchmarkOutboxRelay runs it; make test runs it once at a small size
// (bench-once), where it checks its counts.

// outboxBenchOptions sizes a run.
type outboxBenchOptions struct {
	Events   int           // throughput: outbox rows, in transactions of 100
	Rate     int           // latency: events/s, each its own transaction
	Duration time.Duration // latency: how long the producers write
}

// outboxBenchResult is what a run measured.
type outboxBenchResult struct {
	relay, raw loadMeasure // events/s into the log; the decode loop
	latency    outboxLatency
}

// outboxLatency is the latency run's figures.
type outboxLatency struct {
	sent          int     // events written
	achieved      float64 // events/s the producers reached
	p50, p99, max time.Duration
	commitP99     time.Duration // the COMMIT statements' own p99
	logP99        time.Duration // from commit until the log had the event and the webhook queued it
}

const outboxBenchInsert = `INSERT INTO outbox SELECT gen_random_uuid(), 'Order', 'order-' || (g %% 1000), 'Placed',
	jsonb_build_object('n', g, 'sku', 'sku-' || (g %% 97), 'qty', g %% 5) FROM generate_series(%d, %d) g`

func outboxBenchEnv(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkOutboxRelay: CDCD_BENCH_EVENTS outbox rows (default 200,000)
// relayed into the embedded log, against postgres.DecodeLoop in the same
// run (CDCD_BENCH_ROWS when CDCD_BENCH_EVENTS is unset: make bench-once);
// then CDCD_BENCH_OUTBOX_RATE events/s (default 1,000) for
// CDCD_BENCH_OUTBOX_SECONDS (default events/10,000, 2 to 20) to a webhook
// (and the log), the p50/p99 from commit to the receiver.
func BenchmarkOutboxRelay(b *testing.B) {
	events := outboxBenchEnv("CDCD_BENCH_EVENTS", outboxBenchEnv("CDCD_BENCH_ROWS", 200_000))
	opts := outboxBenchOptions{Events: events, Rate: outboxBenchEnv("CDCD_BENCH_OUTBOX_RATE", 1000),
		Duration: time.Duration(outboxBenchEnv("CDCD_BENCH_OUTBOX_SECONDS", min(20, max(2, events/10_000)))) * time.Second}
	for b.Loop() {
		res := runOutboxBench(b, opts)
		ratio := res.relay.rate / res.raw.rate
		b.Logf("relay of %d events into the log: %.0f events/s (%.2f CPU-µs/event); plain decode loop %.0f events/s: ratio %.2f",
			opts.Events, res.relay.rate, res.relay.cpuUs, res.raw.rate, ratio)
		l := res.latency
		b.Logf("commit to webhook at %.0f events/s (%d events): p50 %s, p99 %s, max %s (the COMMITs' own p99 %s; commit to the log p99 %s)",
			l.achieved, l.sent, l.p50, l.p99, l.max, l.commitP99, l.logP99)
		b.ReportMetric(res.relay.rate, "relay-events/s")
		b.ReportMetric(res.raw.rate, "raw-events/s")
		b.ReportMetric(ratio, "ratio")
		b.ReportMetric(float64(l.p99.Microseconds())/1000, "p99-ms")
	}
}

func runOutboxBench(tb testing.TB, opts outboxBenchOptions) outboxBenchResult {
	var res outboxBenchResult
	res.relay, res.raw = outboxBenchThroughput(tb, opts.Events)
	res.latency = outboxBenchLatency(tb, opts.Rate, opts.Duration)
	return res
}

// outboxBenchRelay builds a relay of the outbox table into the log (and
// the extra targets) in front of a test emitter, and returns it with a
// function making a reader on slot (one per run).
func outboxBenchRelay(tb testing.TB, dsn, slot, publication string, extra ...func(log.Log, outbox.State) outbox.Target) (*outbox.Relay, *outbox.LogTarget, func() *postgres.Reader) {
	e, lg := newTestEmitter(tb, "outbox", 8)
	lt := outbox.NewLogTarget(lg, log.TopicConfig{Partitions: 8, Cleanup: log.CleanupDelete})
	targets := []outbox.Target{lt}
	for _, f := range extra {
		targets = append(targets, f(lg, e.state))
	}
	if err := ensureTopic(tb.Context(), lg, TopicOutboxDead, log.TopicConfig{Partitions: 1}); err != nil {
		tb.Fatal(err)
	}
	r, err := outbox.New(outbox.Config{Route: outbox.Route{Table: "public.outbox"}, Log: lg, DeadLetterTopic: TopicOutboxDead},
		e, targets, slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatal(err)
	}
	spill := tb.TempDir()
	return r, lt, func() *postgres.Reader {
		return postgres.New(postgres.Config{DSN: dsn, Slot: slot, Publication: publication, Tables: []string{"public.outbox"},
			SpillDir: spill, HeartbeatInterval: -1}, e.state, slog.New(slog.DiscardHandler))
	}
}

// outboxBenchThroughput writes events outbox rows that two slots hold,
// decodes one with the plain loop and relays the other into the log.
func outboxBenchThroughput(tb testing.TB, events int) (relay, raw loadMeasure) {
	ctx := tb.Context()
	dsn, conn := benchDB(tb, (outbox.Writer{}).DDL())
	names := pgtest.Names(tb)
	ours, plain := names.Slot+"_ours", names.Slot+"_plain"
	r, lt, reader := outboxBenchRelay(tb, dsn, ours, names.Publication)
	if err := loadUntilStreaming(ctx, reader(), r); err != nil {
		tb.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", plain); err != nil {
		tb.Fatal(err)
	}
	var end pglogrepl.LSN
	for lo := 1; lo <= events; lo += 100 {
		var s string
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf(outboxBenchInsert, lo, min(lo+99, events))); err != nil {
				return err
			}
			return tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s)
		})
		if err != nil {
			tb.Fatal(err)
		}
		if end, err = pglogrepl.ParseLSN(s); err != nil {
			tb.Fatal(err)
		}
	}
	raw, err := measureLoad(events, func() error {
		st, err := postgres.DecodeLoop(ctx, dsn, plain, names.Publication, uint64(end))
		if err == nil && st.Inserts != int64(events) {
			err = fmt.Errorf("the decode loop decoded %d inserts, want %d", st.Inserts, events)
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	relay, err = measureLoad(events, func() error {
		return runReaderUntil(ctx, reader(), r, func() bool { return lt.Stats().Delivered.Load() >= int64(events) })
	})
	if err != nil {
		tb.Fatal(err)
	}
	if n := lt.Stats().Delivered.Load(); n != int64(events) {
		tb.Fatalf("the log target appended %d events, want %d", n, events)
	}
	dropBenchSlot(tb, conn, ours)
	dropBenchSlot(tb, conn, plain)
	return relay, raw
}

// outboxBenchLatency writes rate events a second, each in its own
// transaction, for d, relayed to the log and a webhook; the latency of an
// event is from the return of its COMMIT until its first request reached
// the receiver.
func outboxBenchLatency(tb testing.TB, rate int, d time.Duration) (res outboxLatency) {
	ctx := tb.Context()
	dsn := pgtest.NewDB(tb)
	names := pgtest.Names(tb)
	var mu sync.Mutex
	committed := map[string]time.Time{}
	var commits []time.Duration
	arrived := map[string]time.Time{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		id := r.Header.Get(outbox.HeaderIdempotencyKey)
		mu.Lock()
		if _, ok := arrived[id]; !ok {
			arrived[id] = now
		}
		mu.Unlock()
	}))
	tb.Cleanup(srv.Close)
	webhook := func(lg log.Log, st outbox.State) outbox.Target {
		w, err := outbox.NewWebhook(outbox.WebhookConfig{URL: srv.URL, Client: srv.Client()}, lg, st, slog.New(slog.DiscardHandler))
		if err != nil {
			tb.Fatal(err)
		}
		return w
	}
	conns := make([]*pgx.Conn, 4)
	for i := range conns {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close(context.Background()) })
		conns[i] = c
	}
	if _, err := conns[0].Exec(ctx, (outbox.Writer{}).DDL()); err != nil {
		tb.Fatal(err)
	}
	r, _, reader := outboxBenchRelay(tb, dsn, names.Slot, names.Publication, webhook)
	var relayed []time.Duration // guarded by mu
	r.Stats().Latency = func(d time.Duration) {
		mu.Lock()
		relayed = append(relayed, d)
		mu.Unlock()
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- r.Run(rctx) }()
	rd := reader()
	readDone := make(chan error, 1)
	go func() { readDone <- rd.Run(rctx, r) }()
	deadline := time.Now().Add(time.Minute)
	for !rd.Stats().Streaming.Load() {
		if time.Now().After(deadline) {
			tb.Fatal("the reader is not streaming after a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Producers: event i is due at start + i/rate; each connection takes
	// the next due event.
	total := int(float64(rate) * d.Seconds())
	start := time.Now()
	var next sync.Mutex
	i := 0
	var wg sync.WaitGroup
	for p, conn := range conns {
		wg.Go(func() {
			for {
				next.Lock()
				n := i
				i++
				next.Unlock()
				if n >= total {
					return
				}
				time.Sleep(time.Until(start.Add(time.Duration(n) * time.Second / time.Duration(rate))))
				ev, err := outbox.NewEvent("Order", fmt.Sprintf("order-%d", n%100), "Placed", map[string]int{"n": n, "producer": p})
				if err != nil {
					tb.Error(err)
					return
				}
				tx, err := conn.Begin(ctx)
				if err == nil {
					err = outbox.Write(ctx, tx, ev)
				}
				if err != nil {
					tb.Error(err)
					return
				}
				t0 := time.Now()
				if err := tx.Commit(ctx); err != nil {
					tb.Error(err)
					return
				}
				now := time.Now()
				mu.Lock()
				committed[ev.ID] = now
				commits = append(commits, now.Sub(t0))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.sent, res.achieved = total, float64(total)/time.Since(start).Seconds()
	deadline = time.Now().Add(time.Minute)
	for {
		mu.Lock()
		n := len(arrived)
		mu.Unlock()
		if n >= total {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d events reached the webhook within a minute", n, total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-readDone
	<-runDone
	mu.Lock()
	defer mu.Unlock()
	lat := make([]time.Duration, 0, total)
	for id, c := range committed {
		a, ok := arrived[id]
		if !ok {
			tb.Fatalf("event %s committed and not delivered", id)
		}
		lat = append(lat, max(0, a.Sub(c)))
	}
	if len(arrived) != total {
		tb.Fatalf("%d events arrived, %d written", len(arrived), total)
	}
	res.p50, res.p99, res.max = percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 1)
	res.commitP99, res.logP99 = percentile(commits, 0.99), percentile(relayed, 0.99)
	return res
}

// percentile sorts ds and returns its q-quantile (q 1: the largest).
func percentile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}
