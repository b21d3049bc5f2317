package faultsuite

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/outbox"
)

// The outbox relay under kill -9: several producers write events (rows
// kept, rows deleted in their own transaction, logical messages) while the
// daemon is killed again and again; afterwards the log holds each event
// exactly once and a webhook that failed and stalled at random got each at
// least once, a second time only after a failed, timed-out or killed
// attempt, in order per aggregate.

const (
	obxProducers  = 4
	obxAggregates = 3 // per producer
	// obxHookTimeout is the relay's request timeout: long against the
	// loaded machine's scheduling delays, so a request the receiver
	// answered in time rarely timed out at the relay.
	obxHookTimeout  = 800 * time.Millisecond
	obxHookSecret   = "whsec_b3V0Ym94LWtpbGwtdGVzdA=="
	obxMessagePref  = "shop.events"
	obxKillsDefault = 6
)

// obxEvent identifies an event by its aggregate and its number in it.
type obxEvent struct {
	Agg string `json:"agg"`
	Seq int    `json:"seq"`
}

// obxProducer writes events for its own aggregates, each in a transaction
// with a row of orders, in sequence per aggregate; it records what
// committed.
type obxProducer struct {
	id    int
	conn  *pgx.Conn
	rng   *rand.Rand
	mu    sync.Mutex
	seq   map[string]int // aggregate -> events committed
	total int
}

func (pr *obxProducer) run(ctx context.Context, stop <-chan struct{}, t *testing.T) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		agg := fmt.Sprintf("p%d-a%d", pr.id, pr.rng.IntN(obxAggregates))
		pr.mu.Lock()
		seq := pr.seq[agg]
		pr.mu.Unlock()
		ev, err := outbox.NewEvent("Order", agg, "Changed", obxEvent{Agg: agg, Seq: seq})
		if err != nil {
			t.Error(err)
			return
		}
		w := outbox.Writer{}
		switch pr.rng.IntN(3) {
		case 1:
			w.Delete = true
		case 2:
			w.MessagePrefix = obxMessagePref
		}
		err = pgx.BeginFunc(ctx, pr.conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET n = orders.n + 1`, agg); err != nil {
				return err
			}
			return w.Write(ctx, tx, ev)
		})
		if err != nil {
			t.Errorf("producer %d: %v", pr.id, err)
			return
		}
		pr.mu.Lock()
		pr.seq[agg] = seq + 1
		pr.total++
		pr.mu.Unlock()
		time.Sleep(time.Duration(pr.rng.IntN(20)) * time.Millisecond)
	}
}

// hookLog is the webhook receiver: it fails and stalls at random and
// records every request.
type hookLog struct {
	mu   sync.Mutex
	rng  *rand.Rand
	reqs []hookCall
}

type hookCall struct {
	ev       obxEvent
	id       string
	arrived  time.Time
	answered time.Time
	status   int
	// stalled: answered after the relay's timeout, or after the relay
	// closed the connection (it timed out before the handler even ran):
	// the relay gave up on it.
	stalled     bool
	badSigOrKey bool
}

func (h *hookLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := hookCall{arrived: time.Now(), id: r.Header.Get(outbox.HeaderIdempotencyKey)}
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &c.ev)
	c.badSigOrKey = outbox.Verify(obxHookSecret, r.Header, body, time.Minute, time.Now()) != nil || c.id != r.Header.Get(outbox.HeaderWebhookID)
	h.mu.Lock()
	roll := h.rng.IntN(100)
	h.mu.Unlock()
	c.status = http.StatusOK
	switch {
	case roll < 8:
		c.status = http.StatusInternalServerError
	case roll < 10:
		c.status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", "1")
	case roll < 20:
		c.stalled = true
		time.Sleep(obxHookTimeout + 200*time.Millisecond)
	case roll < 40:
		time.Sleep(time.Duration(roll) * time.Millisecond)
	}
	// A relay that timed out closes the connection, which cancels the
	// request's context; give the server a moment to notice.
	select {
	case <-r.Context().Done():
		c.stalled = true
	case <-time.After(20 * time.Millisecond):
	}
	w.WriteHeader(c.status)
	c.answered = time.Now()
	h.mu.Lock()
	h.reqs = append(h.reqs, c)
	h.mu.Unlock()
}

func TestOutboxKillNine(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CDCD_OUTBOX_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	kills := obxKillsDefault
	if s := os.Getenv("CDCD_OUTBOX_KILLS"); s != "" {
		kills, _ = strconv.Atoi(s)
	}
	t.Logf("seed %d (CDCD_OUTBOX_SEED), %d kills (CDCD_OUTBOX_KILLS)", seed, kills)
	hook := &hookLog{rng: rand.New(rand.NewPCG(seed, 1))}
	srv := httptest.NewServer(hook)
	defer srv.Close()

	p := newPipeline(t, pipelineOptions{
		DDL:    (outbox.Writer{}).DDL() + `; CREATE TABLE orders (id text PRIMARY KEY, n int)`,
		Tables: []string{"public.orders"}, Snapshot: "never",
		Extra: fmt.Sprintf(`outbox:
  table: public.outbox
  message_prefix: %s
  targets:
    - log: {}
    - webhook: {name: shop, url: %q, secret: %q, timeout: %s, backoff_min: 20ms, backoff_max: 200ms, concurrency: 8}
`, obxMessagePref, srv.URL+"/events", obxHookSecret, obxHookTimeout),
	})
	stop := make(chan struct{})
	var producers []*obxProducer
	var wg sync.WaitGroup
	p.start()
	p.waitFor("streaming", time.Minute, func(st daemon.Status) bool { return st.Source.Streaming })
	for i := range obxProducers {
		pr := &obxProducer{id: i, conn: p.connect(), rng: rand.New(rand.NewPCG(seed, uint64(i+2))), seq: map[string]int{}}
		producers = append(producers, pr)
		wg.Go(func() { pr.run(p.ctx, stop, t) })
	}
	var killedAt []time.Time
	rng := rand.New(rand.NewPCG(seed, 99))
	for k := range kills {
		time.Sleep(300*time.Millisecond + time.Duration(rng.IntN(1500))*time.Millisecond)
		p.kill()
		killedAt = append(killedAt, time.Now()) // dead by now: a request it sent arrived before
		p.start()
		p.waitFor(fmt.Sprintf("streaming after kill %d", k+1), time.Minute, func(st daemon.Status) bool { return st.Source.Streaming })
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	p.waitCaughtUp()
	p.stop()
	p.requireMirror("public.orders")

	want := map[string]int{} // aggregate -> events committed
	total := 0
	for _, pr := range producers {
		for agg, n := range pr.seq {
			want[agg] = n
		}
		total += pr.total
	}
	t.Logf("%d events from %d producers over %d aggregates; %d webhook requests; %d kills", total, len(producers), len(want), len(hook.reqs), kills)
	if total < 200 {
		t.Fatalf("only %d events written: the test did not exercise the relay", total)
	}
	checkOutboxLog(t, p, want)
	checkOutboxHook(t, hook, want, killedAt, relayFailedIDs(p.logTail(1<<30)))
	out, _, code := p.cdcd("log", "consume", "-c", p.CfgPath, "--topic", "outbox.Order", "--from-beginning")
	if code != 0 || strings.Count(out, "\n") != total {
		t.Errorf("cdcd log consume (exit %d) printed %d records, want %d", code, strings.Count(out, "\n"), total)
	}
}

// checkOutboxLog requires every event exactly once in outbox.Order, in
// order per aggregate.
func checkOutboxLog(t *testing.T, p *pipeline, want map[string]int) {
	t.Helper()
	lg, err := log.Open(filepath.Join(p.DataDir, "log"), log.Options{ReadOnly: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	got := map[string][]int{}
	info, err := lg.DescribeTopic(p.ctx, "outbox.Order")
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range info.Partitions {
		for off := part.Start; off < part.End; {
			recs, err := lg.Fetch(p.ctx, "outbox.Order", part.Partition, off, log.FetchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				break
			}
			for _, r := range recs {
				var ev obxEvent
				if err := json.Unmarshal(r.Value, &ev); err != nil || ev.Agg != string(r.Key) {
					t.Fatalf("record %d/%d: key %q value %q", r.Partition, r.Offset, r.Key, r.Value)
				}
				got[ev.Agg] = append(got[ev.Agg], ev.Seq)
			}
			off = recs[len(recs)-1].Offset + 1
		}
	}
	for agg, n := range want {
		seqs := got[agg]
		if len(seqs) != n {
			t.Errorf("log: aggregate %s has %d events, want %d exactly once each", agg, len(seqs), n)
			continue
		}
		for i, s := range seqs {
			if s != i {
				t.Errorf("log: aggregate %s: event %d is at place %d (order lost or an event twice)", agg, s, i)
				break
			}
		}
	}
}

// checkOutboxHook requires every event accepted at least once; a second
// request of an event only after an earlier one failed, timed out or was
// cut by a kill; and each event first sent only after the aggregate's
// previous one was accepted.
//
// failed are the events whose requests the relay logged as failed: on a
// loaded machine a request the receiver answered in time can still time
// out at the relay (its goroutine not run before its deadline), and then
// it is rightly sent again.
func checkOutboxHook(t *testing.T, h *hookLog, want map[string]int, killedAt []time.Time, failed map[string]bool) {
	t.Helper()
	h.mu.Lock()
	reqs := slices.Clone(h.reqs)
	h.mu.Unlock()
	slices.SortFunc(reqs, func(a, b hookCall) int { return a.arrived.Compare(b.arrived) })
	type key struct {
		agg string
		seq int
	}
	calls := map[key][]hookCall{}
	ids := map[key]string{}
	redeliveredAfterKill := 0
	for _, c := range reqs {
		k := key{c.ev.Agg, c.ev.Seq}
		if c.badSigOrKey {
			t.Errorf("event %v: a bad signature or idempotency key", k)
		}
		if id, ok := ids[k]; ok && id != c.id {
			t.Errorf("event %v came with two ids, %s and %s", k, id, c.id)
		}
		ids[k] = c.id
		for _, prev := range calls[k] {
			if prev.status != http.StatusOK || prev.stalled {
				continue // failed, or timed out: the relay gave up on it
			}
			if failed[c.id] {
				redeliveredAfterKill++ // the relay says a request of it failed
				break
			}
			// Accepted in time: only a relay killed since it was sent may
			// not have heard the answer or saved its progress.
			if !killBetween(killedAt, prev.arrived, c.arrived) {
				t.Errorf("event %v sent again at %s after it was accepted (sent %s, answered %s), with no kill between (kills at %s)",
					k, c.arrived.Format("15:04:05.000"), prev.arrived.Format("15:04:05.000"), prev.answered.Format("15:04:05.000"), clock(killedAt))
			}
			redeliveredAfterKill++
			break
		}
		calls[k] = append(calls[k], c)
	}
	accepted := func(k key) (time.Time, bool) {
		var first time.Time
		for _, c := range calls[k] {
			if c.status == http.StatusOK && (first.IsZero() || c.answered.Before(first)) {
				first = c.answered
			}
		}
		return first, !first.IsZero()
	}
	for agg, n := range want {
		for s := range n {
			k := key{agg, s}
			if _, ok := accepted(k); !ok {
				t.Errorf("webhook: event %v never accepted (%d requests)", k, len(calls[k]))
				continue
			}
			if s == 0 {
				continue
			}
			prev, _ := accepted(key{agg, s - 1})
			if first := calls[k][0].arrived; first.Before(prev) {
				t.Errorf("webhook: event %v first sent at %s, before event %d was accepted at %s",
					k, first.Format("15:04:05.000"), s-1, prev.Format("15:04:05.000"))
			}
		}
	}
	t.Logf("webhook: %d requests, %d events sent again after a kill", len(reqs), redeliveredAfterKill)
}

func clock(ts []time.Time) string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Format("15:04:05.000"))
	}
	return strings.Join(out, " ")
}

func killBetween(kills []time.Time, from, to time.Time) bool {
	for _, k := range kills {
		if k.After(from) && k.Before(to) {
			return true
		}
	}
	return false
}

// relayFailedIDs returns the ids of the events the daemon's log says a
// webhook request failed for ("webhook request failed; retrying").
func relayFailedIDs(daemonLog string) map[string]bool {
	ids := map[string]bool{}
	re := regexp.MustCompile(`(?:\bid=|"id":")([^\s"]+)`)
	for line := range strings.Lines(daemonLog) {
		if !strings.Contains(line, "webhook request failed; retrying") {
			continue
		}
		if m := re.FindStringSubmatch(line); m != nil {
			ids[m[1]] = true
		}
	}
	return ids
}
