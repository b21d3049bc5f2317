package outbox

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/source"
)

// WebhookConfig configures a webhook target. Zero values take the
// documented defaults.
type WebhookConfig struct {
	// Name identifies the target in metrics, logs and saved state;
	// default "webhook".
	Name string
	// URL receives each event as a POST. Required.
	URL string
	// Secret signs each request (see sign.go); "" sends no signature.
	Secret string
	// Timeout bounds one request; default 10s. A request that times out
	// failed, and is sent again with the same event id.
	Timeout time.Duration
	// Concurrency is how many aggregates are delivered at once (one
	// request at a time per aggregate); default 16.
	Concurrency int
	// BackoffMin and BackoffMax bound the wait before a retry: it doubles
	// from BackoffMin up to BackoffMax, and a random half of it is jitter;
	// a Retry-After header (seconds or an HTTP date) replaces it. Defaults
	// 500ms and 1m.
	BackoffMin, BackoffMax time.Duration
	// GiveUpAfter: an event still failing this long after its first
	// attempt goes to DeadLetterTopic and its aggregate's next event is
	// sent; default 10m.
	GiveUpAfter time.Duration
	// DeadLetterTopic receives the events given up on, with the last
	// error (header cdcd.error) and the attempts (cdcd.attempts); default
	// _cdcd_dead.outbox.<name>.
	DeadLetterTopic string
	// MaxQueued bounds the events held, from the oldest not delivered on
	// (the others' are delivered but still behind it); Deliver waits while
	// it is reached, so an aggregate that keeps failing stops the source
	// after that many events until its event is given up on. Default 20000.
	MaxQueued int
	// Wait makes Deliver return only once its events are delivered, for
	// a source that cannot hold its position back (source.Holder): MySQL.
	Wait bool
	// Client sends the requests; default one that keeps a connection per
	// concurrent aggregate.
	Client *http.Client
}

func (c *WebhookConfig) defaults() {
	if c.Name == "" {
		c.Name = "webhook"
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = 500 * time.Millisecond
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = max(time.Minute, c.BackoffMin)
	}
	if c.GiveUpAfter <= 0 {
		c.GiveUpAfter = 10 * time.Minute
	}
	if c.DeadLetterTopic == "" {
		c.DeadLetterTopic = "_cdcd_dead.outbox." + TopicName(c.Name)
	}
	if c.MaxQueued <= 0 {
		c.MaxQueued = 20_000
	}
	if c.Client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = c.Concurrency
		c.Client = &http.Client{Transport: t}
	}
}

// State is durable key/value storage (the daemon's state topic); Save
// must be durable when it returns.
type State interface {
	Load(ctx context.Context, key string) ([]byte, error) // nil, nil when absent
	Save(ctx context.Context, key string, value []byte) error
}

// Webhook delivers events as HTTPS POSTs: the record's value as the body,
// the event id as Idempotency-Key and webhook-id, a Standard Webhooks
// signature, and the event's type, aggregate, topic and headers
// (webhook_send.go). Each aggregate's events go one request at a time, in
// order; Concurrency aggregates go at once. A failed request (an error, a
// timeout, a status other than 2xx) is sent again after a backoff until
// GiveUpAfter, then the event goes to the dead-letter topic.
//
// Deliver queues the events and returns (Queue): Run delivers them, and
// the relay holds the source's position back before the oldest event not
// delivered yet, so a restart sends again what was queued and not
// delivered. At least once: an id may come again after a failed or
// timed-out request, or after a restart.
//
// Progress: the position up to which every event is delivered is saved
// (state key outbox/webhook/<name>) every 100ms while it moves; events at
// or before it are dropped when the source sends them again.
type Webhook struct {
	cfg    WebhookConfig
	key    []byte // HMAC key; nil: unsigned
	lg     log.Log
	state  State
	logger *slog.Logger
	stats  TargetStats
	// failing counts events whose last attempt failed and that are not
	// delivered or dead-lettered yet.
	failing atomic.Int64
	now     func() time.Time

	mu sync.Mutex // the queue
	// changed is closed (and replaced) at every change of the queue.
	changed chan struct{}
	loaded  bool
	// saved: every event up to it was delivered and that is saved; done:
	// every event up to it is delivered; enqueued: the newest event
	// queued. An event at or before max(saved, enqueued) is not queued
	// again.
	saved, done, enqueued source.Position
	queue                 []*entry // from the oldest not delivered on, in position order
	undelivered           int      // entries of queue not delivered
	aggs                  map[string]*aggregateQueue
	ready                 []*aggregateQueue // aggregates with events and no worker
	err                   error             // Run's terminal error
	running               bool

	deadMu    sync.Mutex // the workers share the dead-letter topic
	deadReady bool       // it exists
}

// entry is one queued event.
type entry struct {
	m    Message
	done bool
}

// aggregateQueue is one aggregate's queued events, in order; busy while a
// worker delivers its first.
type aggregateQueue struct {
	key     string
	entries []*entry
	busy    bool
}

var (
	_ Target = (*Webhook)(nil)
	_ Queue  = (*Webhook)(nil)
)

// NewWebhook returns a webhook target; lg takes its dead letters, state
// its progress. Run delivers what Deliver queues.
func NewWebhook(cfg WebhookConfig, lg log.Log, state State, logger *slog.Logger) (*Webhook, error) {
	cfg.defaults()
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("outbox: webhook %s: the url must be an https:// URL", cfg.Name)
	}
	w := &Webhook{cfg: cfg, lg: lg, state: state, now: time.Now, changed: make(chan struct{}), aggs: map[string]*aggregateQueue{},
		logger: logger.With("component", "outbox", "target", cfg.Name, "url", u.Redacted())}
	if cfg.Secret != "" {
		if w.key, err = signingKey(cfg.Secret); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Name is the configured name.
func (w *Webhook) Name() string { return w.cfg.Name }

// Stats returns the target's counters.
func (w *Webhook) Stats() *TargetStats { return &w.stats }

// stateKey is where the progress is saved.
func (w *Webhook) stateKey() string { return "outbox/webhook/" + w.cfg.Name }

// progress is the saved state.
type progress struct {
	Delivered string `json:"delivered"` // hex of the position
}

// broadcastLocked wakes everyone waiting for a change of the queue.
func (w *Webhook) broadcastLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// Deliver queues msgs (with Wait: and waits until they are delivered). It
// waits while MaxQueued events are queued; it fails once Run failed.
func (w *Webhook) Deliver(ctx context.Context, msgs []Message) error {
	if err := w.load(ctx); err != nil {
		return err
	}
	var last source.Position
	for i := range msgs {
		m := &msgs[i]
		w.mu.Lock()
		for w.err == nil && len(w.queue) >= w.cfg.MaxQueued {
			ch := w.changed
			w.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			w.mu.Lock()
		}
		if w.err != nil {
			w.mu.Unlock()
			return w.err
		}
		last = m.Pos
		if w.enqueued != nil && m.Pos.Compare(w.enqueued) <= 0 {
			w.mu.Unlock()
			w.stats.Duplicates.Add(1)
			continue
		}
		w.enqueueLocked(&entry{m: *m})
		w.mu.Unlock()
	}
	if w.cfg.Wait && last != nil {
		return w.Flush(ctx, last)
	}
	return nil
}

// enqueueLocked adds e at the end of the queue and of its aggregate's.
func (w *Webhook) enqueueLocked(e *entry) {
	w.enqueued = e.m.Pos
	w.queue = append(w.queue, e)
	w.undelivered++
	w.stats.Queued.Store(int64(w.undelivered))
	key := e.m.aggregate()
	q := w.aggs[key]
	if q == nil {
		q = &aggregateQueue{key: key}
		w.aggs[key] = q
	}
	q.entries = append(q.entries, e)
	if len(q.entries) == 1 && !q.busy {
		w.ready = append(w.ready, q)
	}
	w.broadcastLocked()
}

// Flush waits until every event up to pos is delivered (or Run failed).
func (w *Webhook) Flush(ctx context.Context, pos source.Position) error {
	for {
		w.mu.Lock()
		done := w.done != nil && w.done.Compare(pos) >= 0
		err, ch := w.err, w.changed
		w.mu.Unlock()
		switch {
		case err != nil:
			return err
		case done:
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// load reads the saved progress once.
func (w *Webhook) load(ctx context.Context) error {
	w.mu.Lock()
	loaded := w.loaded
	w.mu.Unlock()
	if loaded {
		return nil
	}
	b, err := w.state.Load(ctx, w.stateKey())
	if err != nil {
		return fmt.Errorf("load the webhook's progress: %w", err)
	}
	var pos source.Position
	if b != nil {
		var p progress
		if err := json.Unmarshal(b, &p); err != nil {
			return fmt.Errorf("the webhook's saved progress %s is not readable: %w", w.stateKey(), err)
		}
		if pos, err = hex.DecodeString(p.Delivered); err != nil {
			return fmt.Errorf("the webhook's saved progress %s is not readable: %w", w.stateKey(), err)
		}
	}
	w.mu.Lock()
	w.saved, w.done, w.enqueued, w.loaded = pos, pos, pos, true
	w.mu.Unlock()
	return nil
}

// Oldest is the oldest event queued and not delivered yet.
func (w *Webhook) Oldest() (source.Position, time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		return nil, time.Time{}, false
	}
	return w.queue[0].m.Pos, w.queue[0].m.Commit, true
}

// Run delivers queued events with Concurrency workers and saves the
// progress, until ctx ends (events not delivered stay queued, and the
// source sends them again after a restart) or a dead letter cannot be
// appended (its error is returned, and Deliver fails from then on).
func (w *Webhook) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return fmt.Errorf("outbox: webhook %s: Run called twice", w.cfg.Name)
	}
	w.running = true
	w.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range w.cfg.Concurrency {
		wg.Go(func() {
			if err := w.work(ctx); err != nil {
				w.fail(err)
				cancel()
			}
		})
	}
	saved := make(chan struct{})
	go func() {
		defer close(saved)
		w.saveLoop(ctx)
	}()
	wg.Wait()
	cancel()
	<-saved
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// fail records Run's terminal error.
func (w *Webhook) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = fmt.Errorf("outbox: webhook %s: %w", w.cfg.Name, err)
		w.broadcastLocked()
	}
}

// work delivers aggregates' first events until ctx ends.
func (w *Webhook) work(ctx context.Context) error {
	for {
		q := w.take(ctx)
		if q == nil {
			return nil
		}
		e := q.entries[0]
		if err := w.send(ctx, &e.m); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		w.finish(q, e)
	}
}

// take waits for an aggregate with an event and no worker (nil when ctx
// ends or Run failed) and marks it busy.
func (w *Webhook) take(ctx context.Context) *aggregateQueue {
	w.mu.Lock()
	for len(w.ready) == 0 && w.err == nil {
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
		w.mu.Lock()
	}
	defer w.mu.Unlock()
	if w.err != nil || ctx.Err() != nil {
		return nil
	}
	q := w.ready[0]
	w.ready[0] = nil
	w.ready = w.ready[1:]
	q.busy = true
	return q
}

// finish records e, the first event of q, delivered: q's next event is
// ready, and the queue's delivered front moves on.
func (w *Webhook) finish(q *aggregateQueue, e *entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e.done = true
	q.entries[0] = nil
	q.entries = q.entries[1:]
	q.busy = false
	if len(q.entries) > 0 {
		w.ready = append(w.ready, q)
	} else {
		delete(w.aggs, q.key)
	}
	for len(w.queue) > 0 && w.queue[0].done {
		w.done = w.queue[0].m.Pos
		w.queue[0] = nil
		w.queue = w.queue[1:]
	}
	w.undelivered--
	w.stats.Queued.Store(int64(w.undelivered))
	w.broadcastLocked()
}

// saveInterval is how often the progress is saved while it moves.
const saveInterval = 100 * time.Millisecond

// saveLoop saves the progress while it moves, and once more at the end.
func (w *Webhook) saveLoop(ctx context.Context) {
	t := time.NewTicker(saveInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			w.saveProgress(sctx)
			cancel()
			return
		case <-t.C:
			w.saveProgress(ctx)
		}
	}
}

// saveProgress saves the delivered front if it moved; a failure is
// logged (the source sends those events again after a restart).
func (w *Webhook) saveProgress(ctx context.Context) {
	w.mu.Lock()
	done := w.done
	moved := done != nil && (w.saved == nil || done.Compare(w.saved) > 0)
	w.mu.Unlock()
	if !moved {
		return
	}
	b, _ := json.Marshal(progress{Delivered: hex.EncodeToString(done)})
	if err := w.state.Save(ctx, w.stateKey(), b); err != nil {
		if !errors.Is(err, context.Canceled) {
			w.logger.Warn("the webhook's progress was not saved; after a restart it sends those events again", "err", err)
		}
		return
	}
	w.mu.Lock()
	w.saved = done
	w.mu.Unlock()
}
