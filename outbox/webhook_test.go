package outbox

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/source"
)

// messages routes n events over aggs aggregates at positions (lsn, i).
func messages(t *testing.T, lsn uint64, n, aggs int) []Message {
	t.Helper()
	rt := newRouter(Route{Table: "public.outbox"}, t.Logf)
	out := make([]Message, n)
	for i := range n {
		c := event(lsn, uint32(i), "Order", strconv.Itoa(i%aggs), "Placed")
		m, ok, err := rt.route(&c)
		if !ok || err != nil {
			t.Fatal(ok, err)
		}
		out[i] = m
	}
	return out
}

// hookServer records requests; answer decides each response.
type hookServer struct {
	mu       sync.Mutex
	reqs     []hookReq
	inFlight map[string]int // per aggregate
	arrived  map[string]int // requests per id
	maxAgg   int            // most requests of one aggregate at once
	now, top atomic.Int64   // requests in flight, most at once
	answer   func(r *http.Request, attempt int) (status int, delay time.Duration, header http.Header)
}

type hookReq struct {
	id, agg   string
	body      []byte
	header    http.Header
	status    int
	start, at time.Time
}

func newHookServer(t *testing.T, answer func(*http.Request, int) (int, time.Duration, http.Header)) (*hookServer, *httptest.Server) {
	hs := &hookServer{inFlight: map[string]int{}, arrived: map[string]int{}, answer: answer}
	srv := httptest.NewTLSServer(http.HandlerFunc(hs.serve))
	t.Cleanup(srv.Close)
	return hs, srv
}

func (hs *hookServer) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, _ := io.ReadAll(r.Body)
	id, agg := r.Header.Get(HeaderIdempotencyKey), r.Header.Get(HeaderAggregateID)
	if n := hs.now.Add(1); n > hs.top.Load() {
		hs.top.Store(n)
	}
	defer hs.now.Add(-1)
	hs.mu.Lock()
	hs.inFlight[agg]++
	hs.maxAgg = max(hs.maxAgg, hs.inFlight[agg])
	hs.arrived[id]++
	attempt := hs.arrived[id]
	hs.mu.Unlock()
	status, delay, h := hs.answer(r, attempt)
	time.Sleep(delay)
	for k, v := range h {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
	hs.mu.Lock()
	hs.inFlight[agg]--
	hs.reqs = append(hs.reqs, hookReq{id: id, agg: agg, body: body, header: r.Header.Clone(), status: status, start: start, at: time.Now()})
	hs.mu.Unlock()
}

func (hs *hookServer) requests() []hookReq {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return append([]hookReq(nil), hs.reqs...)
}

// newTestWebhook returns a webhook target running until the test ends
// (or stop is called).
func newTestWebhook(t *testing.T, srv *httptest.Server, lg log.Log, st State, cfg WebhookConfig) (w *Webhook, stop func() error) {
	t.Helper()
	cfg.URL, cfg.Client = srv.URL, srv.Client()
	w, err := NewWebhook(cfg, lg, st, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return w, stop
}

// deliver queues msgs and waits until they are delivered.
func deliver(t *testing.T, w *Webhook, msgs []Message) {
	t.Helper()
	if err := w.Deliver(t.Context(), msgs); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(t.Context(), msgs[len(msgs)-1].Pos); err != nil {
		t.Fatal(err)
	}
}

// TestWebhookDelivers: every event is POSTed once with its id as the
// idempotency key and a signature that verifies; one aggregate's requests
// one at a time and in order, several aggregates at once; the saved
// progress makes a new target drop what the source sends again.
func TestWebhookDelivers(t *testing.T) {
	hs, srv := newHookServer(t, func(*http.Request, int) (int, time.Duration, http.Header) { return 204, 5 * time.Millisecond, nil })
	lg := openLog(t, t.TempDir())
	defer lg.Close()
	st := &memState{}
	w, stop := newTestWebhook(t, srv, lg, st, WebhookConfig{Secret: "whsec_c2VjcmV0LWtleQ==", Concurrency: 8})
	msgs := messages(t, 10, 60, 3)
	deliver(t, w, msgs)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	reqs := hs.requests()
	if len(reqs) != 60 || w.Stats().Delivered.Load() != 60 {
		t.Fatalf("%d requests, %d delivered, want 60", len(reqs), w.Stats().Delivered.Load())
	}
	byID := map[string]Message{}
	for _, m := range msgs {
		byID[m.ID] = m
	}
	last := map[string]source.Position{}
	for _, q := range reqs {
		m := byID[q.id]
		if q.header.Get(HeaderWebhookID) != m.ID || q.header.Get(HeaderEventType) != "Placed" || q.header.Get("Content-Type") != "application/json" {
			t.Errorf("request headers %v", q.header)
		}
		if err := Verify("whsec_c2VjcmV0LWtleQ==", q.header, q.body, time.Minute, time.Now()); err != nil {
			t.Errorf("signature of %s: %v", q.id, err)
		}
		if err := Verify("whsec_b3RoZXI=", q.header, q.body, time.Minute, time.Now()); err == nil {
			t.Error("a signature verifies with another secret")
		}
		if p := last[q.agg]; p != nil && m.Pos.Compare(p) <= 0 {
			t.Errorf("aggregate %s: event %s delivered out of order", q.agg, q.id)
		}
		last[q.agg] = m.Pos
	}
	if hs.maxAgg != 1 || hs.top.Load() < 2 {
		t.Errorf("at most %d requests of one aggregate and %d in all at once; want 1 and several", hs.maxAgg, hs.top.Load())
	}
	// A restart: a new target with the saved progress gets the batch again.
	w, _ = newTestWebhook(t, srv, lg, st, WebhookConfig{Concurrency: 4})
	deliver(t, w, msgs)
	if _, _, ok := w.Oldest(); ok {
		t.Error("an event is queued after the batch came again")
	}
	if n := len(hs.requests()); n != 60 || w.Stats().Duplicates.Load() != 60 {
		t.Errorf("%d requests after the batch came again (want 60), %d duplicates", n, w.Stats().Duplicates.Load())
	}
}

// TestWebhookRetries: a failed request is sent again with the same id —
// after the Retry-After the receiver asked for, after a backoff, and after
// a timeout — and only after the earlier one failed.
func TestWebhookRetries(t *testing.T) {
	hs, srv := newHookServer(t, func(r *http.Request, attempt int) (int, time.Duration, http.Header) {
		switch r.Header.Get(HeaderAggregateID) + "/" + strconv.Itoa(attempt) {
		case "0/1":
			return 503, 0, http.Header{"Retry-After": {"1"}}
		case "1/1", "1/2":
			return 500, 0, nil
		case "2/1":
			return 200, 400 * time.Millisecond, nil // past the timeout
		}
		return 200, 0, nil
	})
	lg := openLog(t, t.TempDir())
	defer lg.Close()
	w, _ := newTestWebhook(t, srv, lg, &memState{}, WebhookConfig{Timeout: 200 * time.Millisecond, BackoffMin: 20 * time.Millisecond})
	deliver(t, w, messages(t, 1, 3, 3))
	reqs := hs.requests()
	slices.SortFunc(reqs, func(a, b hookReq) int { return a.start.Compare(b.start) })
	tries := map[string][]hookReq{}
	for _, q := range reqs {
		tries[q.agg] = append(tries[q.agg], q)
	}
	if n := len(tries["0"]); n != 2 {
		t.Fatalf("aggregate 0: %d requests, want 2", n)
	}
	if gap := tries["0"][1].start.Sub(tries["0"][0].at); gap < 900*time.Millisecond {
		t.Errorf("the retry came %s after a Retry-After of 1s", gap)
	}
	if n := len(tries["1"]); n != 3 {
		t.Errorf("aggregate 1: %d requests, want 3", n)
	}
	// The server sees the first request start later than the client sent
	// it (a TLS handshake on a busy machine), so the retry is required at
	// half the timeout after it: a retry that did not wait for the timeout
	// comes after the backoff alone (20 ms).
	if n := len(tries["2"]); n != 2 || tries["2"][1].start.Before(tries["2"][0].start.Add(100*time.Millisecond)) {
		t.Errorf("aggregate 2: %d requests; the second must come after the first timed out", n)
	}
	st := w.Stats()
	if st.Delivered.Load() != 3 || st.Attempts.Load() != 7 || st.Failures.Load() != 4 || st.FailingSince.Load() != 0 {
		t.Errorf("stats: delivered %d attempts %d failures %d failing since %d", st.Delivered.Load(), st.Attempts.Load(), st.Failures.Load(), st.FailingSince.Load())
	}
}

// TestWebhookGivesUp: an event still failing after GiveUpAfter goes to
// the dead-letter topic with the error, and its aggregate's next event is
// delivered after it.
func TestWebhookGivesUp(t *testing.T) {
	_, srv := newHookServer(t, func(r *http.Request, _ int) (int, time.Duration, http.Header) {
		if r.Header.Get("X-Poison") == "" {
			return 200, 0, nil
		}
		return 422, 0, nil
	})
	lg := openLog(t, t.TempDir())
	defer lg.Close()
	w, _ := newTestWebhook(t, srv, lg, &memState{}, WebhookConfig{Name: "orders", BackoffMin: 10 * time.Millisecond, GiveUpAfter: 150 * time.Millisecond})
	msgs := messages(t, 1, 2, 1)
	msgs[0].Headers = append(msgs[0].Headers, log.Header{Key: "x-poison", Value: []byte("1")})
	deliver(t, w, msgs)
	dead := readTopic(t, lg, "_cdcd_dead.outbox.orders")
	if len(dead) != 1 || string(dead[0].Header(HeaderID)) != msgs[0].ID || len(dead[0].Header(HeaderError)) == 0 {
		t.Fatalf("dead letters: %d", len(dead))
	}
	if a, _ := strconv.Atoi(string(dead[0].Header(HeaderAttempts))); a < 3 {
		t.Errorf("gave up after %d attempts", a)
	}
	st := w.Stats()
	if st.DeadLettered.Load() != 1 || st.Delivered.Load() != 1 {
		t.Errorf("dead-lettered %d delivered %d", st.DeadLettered.Load(), st.Delivered.Load())
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{"": 0, "3": 3 * time.Second, "x": 0, "-1": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("%q: %s, want %s", in, got, want)
		}
	}
}

// TestWebhookQueue: Deliver queues and returns; an aggregate that fails
// holds back only itself (and Oldest, which holds the source back); a
// full queue makes Deliver wait; Wait mode returns only once delivered.
func TestWebhookQueue(t *testing.T) {
	var blocked atomic.Bool
	blocked.Store(true)
	hs, srv := newHookServer(t, func(r *http.Request, _ int) (int, time.Duration, http.Header) {
		if r.Header.Get(HeaderAggregateID) == "0" && blocked.Load() {
			return 503, 0, nil
		}
		return 200, 0, nil
	})
	lg := openLog(t, t.TempDir())
	defer lg.Close()
	w, _ := newTestWebhook(t, srv, lg, &memState{}, WebhookConfig{BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, MaxQueued: 4})
	msgs := messages(t, 1, 6, 3) // aggregates 0 1 2 0 1 2
	if err := w.Deliver(t.Context(), msgs[:4]); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "aggregates 1 and 2 delivered while 0 fails", func() bool { return w.Stats().Delivered.Load() == 2 })
	if p, _, ok := w.Oldest(); !ok || p.Compare(msgs[0].Pos) != 0 {
		t.Errorf("oldest %x %v, want the first event of aggregate 0", p, ok)
	}
	if q := w.Stats().Queued.Load(); q != 2 {
		t.Errorf("%d events queued, want aggregate 0's 2", q)
	}
	// Four events are held from the oldest undelivered on: the queue is full.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := w.Deliver(ctx, msgs[4:5]); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Deliver with a full queue: %v, want it to wait", err)
	}
	blocked.Store(false)
	if err := w.Flush(t.Context(), msgs[3].Pos); err != nil {
		t.Fatal(err)
	}
	deliver(t, w, msgs[4:])
	if _, _, ok := w.Oldest(); ok || w.Stats().Delivered.Load() != 6 || len(hs.requests()) < 7 {
		t.Errorf("after recovery: oldest %v, %d delivered, %d requests", ok, w.Stats().Delivered.Load(), len(hs.requests()))
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
