package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/log/kafka"
	"github.com/cdcd-dev/cdcd/log/kafka/kafkatest"
	"github.com/cdcd-dev/cdcd/outbox"
)

// TestOutboxRelayKafka: with log.backend kafka the relay's log target
// appends to Kafka exactly once. A webhook that always fails holds the
// slot's position back while the events reach Kafka; the daemon restarts
// without it, PostgreSQL sends those events again, and the target drops
// them by the positions Kafka holds: each id once, in order per aggregate.
func TestOutboxRelayKafka(t *testing.T) {
	t.Parallel()
	brokers, _ := kafkatest.Brokers(t)
	registry := externalRegistry(t)
	dsn := pgtest.NewDB(t)
	names := pgtest.Names(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), (outbox.Writer{}).DDL()+`; CREATE TABLE orders (id text PRIMARY KEY, total int)`); err != nil {
		t.Fatal(err)
	}
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer failing.Close()

	dir := t.TempDir()
	run := func(targets string, phase func(d *daemon.Daemon, done chan error)) {
		t.Helper()
		path := filepath.Join(dir, "cdcd.yaml")
		if err := os.WriteFile(path, fmt.Appendf(nil, `pipeline: obxk
data_dir: %q
source:
  postgres: {dsn: %q, slot: %s, publication: %s, tables: [public.orders], heartbeat_interval: 200ms}
log: {partitions: 3, backend: kafka, kafka: {brokers: [%q]}}
schema_registry: {url: %q}
sink: {iceberg: {mode: append, commit_interval: 200ms}}
admin: {listen: "off"}
outbox:
  table: public.outbox
  targets:
%s`, dir, dsn, names.Slot, names.Publication, brokers[0], registry, targets), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		d, err := daemon.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := d.Log().(*kafka.Log); !ok {
			t.Fatalf("the daemon's log is %T, want the Kafka backend", d.Log())
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		waitFor(t, "streaming", func() bool { return d.SourceStats().Streaming.Load() }, done)
		phase(d, done)
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var want []outbox.Event
	write := func(n int) {
		for i := range n {
			ev, err := outbox.NewEvent("Order", fmt.Sprint(len(want)%3), "Placed", map[string]int{"n": i})
			if err != nil {
				t.Fatal(err)
			}
			err = pgx.BeginFunc(t.Context(), conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(t.Context(), `INSERT INTO orders VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET total = orders.total + 1`, ev.AggregateID); err != nil {
					return err
				}
				return outbox.Write(t.Context(), tx, ev)
			})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, ev)
		}
	}

	run(fmt.Sprintf("    - log: {}\n    - webhook: {url: %q, backoff_min: 50ms, backoff_max: 100ms}\n", failing.URL), func(d *daemon.Daemon, done chan error) {
		write(12)
		waitFor(t, "the events in Kafka", func() bool { return d.Status().Outbox.Targets[0].Delivered == 12 }, done)
		lsn := markLSN(t, conn)
		time.Sleep(1500 * time.Millisecond) // past the source's status interval
		if d.CaughtUp(lsn) {
			t.Fatal("the source confirmed events the failing webhook does not have")
		}
	})
	run("    - log: {}\n", func(d *daemon.Daemon, done chan error) {
		lsn := markLSN(t, conn)
		waitFor(t, "caught up after the restart", func() bool { return d.CaughtUp(lsn) }, done)
		if st := d.Status().Outbox.Targets[0]; st.Duplicates != 12 || st.Delivered != 0 {
			t.Errorf("after the restart the log target dropped %d events as duplicates and appended %d; want the 12 sent again dropped", st.Duplicates, st.Delivered)
		}
		write(9)
		lsn = markLSN(t, conn)
		waitFor(t, "caught up", func() bool { return d.CaughtUp(lsn) }, done)
		wantBy, got := map[string][]string{}, map[string][]string{}
		for _, ev := range want {
			wantBy[ev.AggregateID] = append(wantBy[ev.AggregateID], ev.ID)
		}
		for _, rec := range readAllRecords(t, d.Log(), "outbox.Order") {
			got[string(rec.Key)] = append(got[string(rec.Key)], string(rec.Header(outbox.HeaderID)))
		}
		for agg, ids := range wantBy {
			if !slices.Equal(got[agg], ids) {
				t.Errorf("Kafka, aggregate %s: %d ids, want %d once each in order", agg, len(got[agg]), len(ids))
			}
		}
	})
}
