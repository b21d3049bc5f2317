package outbox

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/source/postgres"
)

// TestRelayFromPostgres: the PostgreSQL reader feeding a relay with a log
// and a webhook target: events written as rows, as rows deleted in the
// same transaction, and as logical messages all arrive, in order per
// aggregate, once in the log and once at the webhook; the mirrored table's
// changes go on to the next emitter, the outbox's do not.
func TestRelayFromPostgres(t *testing.T) {
	dsn := pgtest.NewDB(t)
	conn := pgConn(t, dsn)
	if _, err := conn.Exec(t.Context(), (Writer{}).DDL()+`; CREATE TABLE orders (id text PRIMARY KEY, total int)`); err != nil {
		t.Fatal(err)
	}
	hs, srv := newHookServer(t, func(*http.Request, int) (int, time.Duration, http.Header) { return 200, 0, nil })
	lg := openLog(t, t.TempDir())
	defer lg.Close()
	next := &recorder{}
	st := &memState{}
	hook, _ := newTestWebhook(t, srv, lg, st, WebhookConfig{})
	r := newTestRelay(t, lg, next, false, NewLogTarget(lg, log.TopicConfig{Partitions: 3}), hook)
	r.rt = newRouter(Route{Table: "public.outbox", MessagePrefix: "app.outbox"}, t.Logf)

	names := pgtest.Names(t)
	reader := postgres.New(postgres.Config{DSN: dsn, Slot: names.Slot, Publication: names.Publication,
		Tables: []string{"public.orders", "public.outbox"}, Messages: []string{"app.outbox"}, BatchDelay: 5 * time.Millisecond,
		SpillDir: t.TempDir()}, st, testLogger(t))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- reader.Run(ctx, r) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("reader: %v", err)
		}
	}()
	waitFor(t, "the reader streams", func() bool { return reader.Stats().Streaming.Load() })

	var want []Event
	write := func(w Writer, order string, events ...Event) {
		t.Helper()
		err := pgx.BeginFunc(t.Context(), conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(t.Context(), `INSERT INTO orders VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET total = orders.total + 1`, order); err != nil {
				return err
			}
			return w.Write(t.Context(), tx, events...)
		})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, events...)
	}
	for i := range 5 {
		write(Writer{}, "a", mustEvent(t, "Order", "a", "Placed", i), mustEvent(t, "Order", "a", "Paid", i))
		write(Writer{Delete: true}, "b", mustEvent(t, "Order", "b", "Placed", i))
		write(Writer{MessagePrefix: "app.outbox"}, "c", mustEvent(t, "Customer", "c", "Joined", i))
	}
	waitFor(t, "every event at every target", func() bool {
		_, held := r.Held()
		return r.Stats().Events.Load() >= int64(len(want)) && !held
	})
	waitFor(t, "every orders change emitted", func() bool {
		next.mu.Lock()
		defer next.mu.Unlock()
		return len(next.changes) == 15
	})
	next.mu.Lock()
	for _, c := range next.changes {
		if c.Table == nil || c.Table.Name != "orders" {
			t.Errorf("the next emitter got %+v", c)
		}
	}
	next.mu.Unlock()

	got := map[string][]string{} // aggregate -> ids in log order
	for _, topic := range []string{"outbox.Order", "outbox.Customer"} {
		for _, rec := range readTopic(t, lg, topic) {
			got[string(rec.Key)] = append(got[string(rec.Key)], string(rec.Header(HeaderID)))
		}
	}
	hooked := map[string][]string{}
	for _, q := range hs.requests() {
		hooked[q.agg] = append(hooked[q.agg], q.id)
	}
	wantBy := map[string][]string{}
	for _, ev := range want {
		wantBy[ev.AggregateID] = append(wantBy[ev.AggregateID], ev.ID)
	}
	for agg, ids := range wantBy {
		if !slices.Equal(got[agg], ids) {
			t.Errorf("log, aggregate %s: %v, want %v", agg, got[agg], ids)
		}
		if !slices.Equal(hooked[agg], ids) {
			t.Errorf("webhook, aggregate %s: %v, want %v", agg, hooked[agg], ids)
		}
	}
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM outbox`).Scan(&n); err != nil || n != 10 {
		t.Errorf("%d rows in the outbox table, want the 10 not deleted (%v)", n, err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
