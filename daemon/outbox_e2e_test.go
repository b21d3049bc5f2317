package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/outbox"
)

// hookRecorder is a webhook receiver that keeps the event ids it accepted
// per aggregate and can be told to fail.
type hookRecorder struct {
	mu     sync.Mutex
	ids    map[string][]string // aggregate -> accepted ids, in order
	bodies map[string]string   // id -> body
	fail   atomic.Bool
	bad    atomic.Int64 // requests whose signature did not verify
}

func (h *hookRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := outbox.Verify("hook-secret", r.Header, body, time.Minute, time.Now()); err != nil {
		h.bad.Add(1)
	}
	if h.fail.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	h.mu.Lock()
	agg, id := r.Header.Get(outbox.HeaderAggregateID), r.Header.Get(outbox.HeaderIdempotencyKey)
	h.ids[agg] = append(h.ids[agg], id)
	h.bodies[id] = string(body)
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *hookRecorder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, ids := range h.ids {
		n += len(ids)
	}
	return n
}

// TestOutboxRelay: the daemon relays an outbox table (not mirrored) and
// logical messages beside a mirrored table: every event once in its log
// topic and once at the webhook, in order per aggregate, signed; an
// unroutable row goes to the dead-letter topic; while the webhook fails
// the source waits, /status and CdcdOutboxLag say so, and once it answers
// again everything arrives.
func TestOutboxRelay(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDB(t)
	names := pgtest.Names(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), (outbox.Writer{}).DDL()+`; ALTER TABLE outbox ADD tenant text;
		CREATE TABLE orders (id text PRIMARY KEY, total int)`); err != nil {
		t.Fatal(err)
	}
	hook := &hookRecorder{ids: map[string][]string{}, bodies: map[string]string{}}
	srv := httptest.NewServer(hook)
	defer srv.Close()

	dir := t.TempDir()
	path := filepath.Join(dir, "cdcd.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, `pipeline: obx
data_dir: %q
source:
  postgres: {dsn: %q, slot: %s, publication: %s, tables: [public.orders], heartbeat_interval: 200ms}
log: {partitions: 3}
sink: {iceberg: {mode: append, commit_interval: 200ms}}
admin: {listen: "off"}
alerts: {interval: 200ms}
outbox:
  table: public.outbox
  message_prefix: app.events
  headers: [tenant]
  targets:
    - log: {}
    - webhook: {url: %q, secret: hook-secret, backoff_min: 50ms, backoff_max: 200ms}
  alerts: {lag: {warning: 1s}}
`, dir, dsn, names.Slot, names.Publication, srv.URL+"/events"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(t.Context(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
		d.Close()
	}()
	waitFor(t, "streaming", func() bool { return d.SourceStats().Streaming.Load() }, done)

	var want []outbox.Event
	write := func(w outbox.Writer, evs ...outbox.Event) {
		t.Helper()
		err := pgx.BeginFunc(t.Context(), conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(t.Context(), `INSERT INTO orders VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET total = orders.total + 1`, evs[0].AggregateID); err != nil {
				return err
			}
			return w.Write(t.Context(), tx, evs...)
		})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, evs...)
	}
	event := func(aggType, aggID, typ string, n int) outbox.Event {
		ev, err := outbox.NewEvent(aggType, aggID, typ, map[string]int{"n": n})
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	for i := range 10 {
		ev := event("Order", fmt.Sprint(i%3), "Placed", i)
		ev.Extra = map[string]any{"tenant": "acme"}
		write(outbox.Writer{Delete: i%2 == 0}, ev, event("Order", fmt.Sprint(i%3), "Paid", i))
		write(outbox.Writer{MessagePrefix: "app.events"}, event("Customer", "c", "Touched", i))
	}
	if _, err := conn.Exec(t.Context(), `INSERT INTO outbox VALUES (gen_random_uuid(), 'Order', '', 'Broken', '{}')`); err != nil {
		t.Fatal(err)
	}
	lsn := markLSN(t, conn)
	waitFor(t, "caught up", func() bool { return d.CaughtUp(lsn) }, done)
	checkRelayed(t, d, hook, want)

	// The webhook fails: the source waits, the lag alert fires and names
	// the target; once the webhook answers, everything arrives.
	hook.fail.Store(true)
	write(outbox.Writer{}, event("Order", "0", "Cancelled", 99))
	waitFor(t, "the lag alert", func() bool {
		st := d.Status()
		for _, a := range st.Alerts {
			if a.Name == daemon.AlertOutboxLag && strings.Contains(a.Summary, "target webhook failing") && strings.Contains(a.Summary, "503") {
				return st.Outbox.Targets[1].FailingSeconds > 0
			}
		}
		return false
	}, done)
	// The mirror flows meanwhile; the source's position waits.
	rows := d.Status().Tables[0].Rows
	if _, err := conn.Exec(t.Context(), `INSERT INTO orders VALUES ('while-failing', 1)`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the mirrored table committed while the webhook fails", func() bool { return d.Status().Tables[0].Rows > rows }, done)
	lsn = markLSN(t, conn)
	time.Sleep(1500 * time.Millisecond) // past the source's status interval
	if d.CaughtUp(lsn) {
		t.Fatal("the source confirmed past an event the webhook does not have")
	}
	if q := d.Status().Outbox.Targets[1].Queued; q != 1 {
		t.Errorf("the failing webhook has %d events queued, want the 1 it cannot deliver", q)
	}
	hook.fail.Store(false)
	waitFor(t, "caught up after the webhook recovered", func() bool { return d.CaughtUp(lsn) }, done)
	checkRelayed(t, d, hook, want)
	if n, delivered := webhookLatencyCount(t, d), d.Status().Outbox.Targets[1].Delivered; n != uint64(delivered) || n == 0 {
		t.Errorf("cdcd_outbox_target_delivery_seconds counts %d events of the webhook, which delivered %d", n, delivered)
	}
	waitFor(t, "the lag alert resolved", func() bool {
		for _, a := range d.Status().Alerts {
			if a.Name == daemon.AlertOutboxLag {
				return false
			}
		}
		return true
	}, done)
	st := d.Status()
	if st.Outbox == nil || st.Outbox.Events != int64(len(want)) || st.Outbox.Malformed != 1 || len(st.Tables) != 1 || st.Tables[0].Source != "public.orders" {
		t.Errorf("status: outbox %+v, tables %+v", st.Outbox, st.Tables)
	}
	if n := hook.bad.Load(); n != 0 {
		t.Errorf("%d requests whose signature did not verify", n)
	}
}

// checkRelayed requires every wanted event once in the log and at the
// webhook, in order per aggregate, and the unroutable row dead-lettered.
func checkRelayed(t *testing.T, d *daemon.Daemon, hook *hookRecorder, want []outbox.Event) {
	t.Helper()
	wantBy := map[string][]string{}
	for _, ev := range want {
		wantBy[ev.AggregateID] = append(wantBy[ev.AggregateID], ev.ID)
	}
	logBy := map[string][]string{}
	tenants := 0
	for _, topic := range []string{"outbox.Order", "outbox.Customer"} {
		for _, rec := range readAllRecords(t, d.Log(), topic) {
			logBy[string(rec.Key)] = append(logBy[string(rec.Key)], string(rec.Header(outbox.HeaderID)))
			if string(rec.Header("tenant")) == "acme" {
				tenants++
			}
		}
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	for agg, ids := range wantBy {
		if !slices.Equal(logBy[agg], ids) {
			t.Errorf("log, aggregate %s: %d ids, want %d in order", agg, len(logBy[agg]), len(ids))
		}
		if !slices.Equal(hook.ids[agg], ids) {
			t.Errorf("webhook, aggregate %s: %d ids, want %d in order", agg, len(hook.ids[agg]), len(ids))
		}
	}
	if tenants != 10 {
		t.Errorf("%d records carry the tenant header, want 10", tenants)
	}
	if dead := readAllRecords(t, d.Log(), daemon.TopicOutboxDead); len(dead) != 1 || !strings.Contains(string(dead[0].Header(outbox.HeaderError)), "aggregateid") {
		t.Errorf("dead letters: %d", len(dead))
	}
	if _, err := d.Log().DescribeTopic(t.Context(), "obx.public.outbox"); !errors.Is(err, log.ErrUnknownTopic) {
		t.Errorf("the outbox table got a table topic: %v", err)
	}
}

func readAllRecords(t *testing.T, lg log.Log, topic string) []log.Record {
	t.Helper()
	info, err := lg.DescribeTopic(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []log.Record
	for _, p := range info.Partitions {
		for off := p.Start; off < p.End; {
			recs, err := lg.Fetch(t.Context(), topic, p.Partition, off, log.FetchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				break
			}
			out = append(out, recs...)
			off = recs[len(recs)-1].Offset + 1
		}
	}
	return out
}

// markLSN commits a transaction and returns an LSN inside it.
func markLSN(t *testing.T, conn *pgx.Conn) uint64 {
	t.Helper()
	var s string
	if err := conn.QueryRow(t.Context(), "SELECT pg_current_wal_insert_lsn()::text FROM (SELECT txid_current()) x").Scan(&s); err != nil {
		t.Fatal(err)
	}
	var hi, lo uint32
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		t.Fatal(err)
	}
	return uint64(hi)<<32 | uint64(lo)
}

// webhookLatencyCount is the count of cdcd_outbox_target_delivery_seconds
// for the target named webhook.
func webhookLatencyCount(t *testing.T, d *daemon.Daemon) uint64 {
	t.Helper()
	mfs, err := d.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cdcd_outbox_target_delivery_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "target" && l.GetValue() == "webhook" {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}
