package outbox

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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
	// sent; default 10m. The source waits meanwhile (its position moves
	// only when every target has the event).
	GiveUpAfter time.Duration
	// DeadLetterTopic receives the events given up on, with the last
	// error (header cdcd.error) and the attempts (cdcd.attempts); default
	// _cdcd_dead.outbox.<name>.
	DeadLetterTopic string
	// Client sends the requests; default one whose connections are kept
	// per aggregate worker.
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
// signature, and the event's type, aggregate, topic and headers. Each
// aggregate's events go one request at a time, in order; aggregates go in
// parallel. A failed request (an error, a timeout, a status other than
// 2xx) is sent again after a backoff until GiveUpAfter, then the event
// goes to the dead-letter topic. At least once: an id may come again
// after a failed or timed-out request, or after a restart that came
// before the target saved its progress.
//
// Progress: after each Deliver the position of its last event is saved
// (state key outbox/webhook/<name>); events at or before it are dropped
// when the source re-sends them.
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

	loaded    bool
	delivered source.Position // every event up to here is delivered

	deadMu    sync.Mutex // the aggregates' workers share the dead-letter topic
	deadReady bool       // it exists
}

var _ Target = (*Webhook)(nil)

// NewWebhook returns a webhook target; lg takes its dead letters, state
// its progress.
func NewWebhook(cfg WebhookConfig, lg log.Log, state State, logger *slog.Logger) (*Webhook, error) {
	cfg.defaults()
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("outbox: webhook %s: the url must be an https:// URL", cfg.Name)
	}
	w := &Webhook{cfg: cfg, lg: lg, state: state, now: time.Now,
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

// Deliver sends msgs, returning once each is accepted or dead-lettered and
// the progress is saved.
func (w *Webhook) Deliver(ctx context.Context, msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := w.load(ctx); err != nil {
		return err
	}
	var groups [][]*Message
	index := map[string]int{}
	for i := range msgs {
		m := &msgs[i]
		if w.delivered != nil && m.Pos.Compare(w.delivered) <= 0 {
			w.stats.Duplicates.Add(1)
			continue
		}
		g, ok := index[m.aggregate()]
		if !ok {
			g = len(groups)
			index[m.aggregate()] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], m)
	}
	if err := w.sendGroups(ctx, groups); err != nil {
		return err
	}
	last := msgs[len(msgs)-1].Pos
	if w.delivered != nil && last.Compare(w.delivered) <= 0 {
		return nil
	}
	b, _ := json.Marshal(progress{Delivered: hex.EncodeToString(last)})
	if err := w.state.Save(ctx, w.stateKey(), b); err != nil {
		return fmt.Errorf("save the webhook's progress: %w", err)
	}
	w.delivered = append(w.delivered[:0], last...)
	return nil
}

// load reads the saved progress once.
func (w *Webhook) load(ctx context.Context) error {
	if w.loaded {
		return nil
	}
	b, err := w.state.Load(ctx, w.stateKey())
	if err != nil {
		return fmt.Errorf("load the webhook's progress: %w", err)
	}
	if b != nil {
		var p progress
		if err := json.Unmarshal(b, &p); err != nil {
			return fmt.Errorf("the webhook's saved progress %s is not readable: %w", w.stateKey(), err)
		}
		if w.delivered, err = hex.DecodeString(p.Delivered); err != nil {
			return fmt.Errorf("the webhook's saved progress %s is not readable: %w", w.stateKey(), err)
		}
	}
	w.loaded = true
	return nil
}

// sendGroups sends each group's messages in order, Concurrency groups at
// a time.
func (w *Webhook) sendGroups(ctx context.Context, groups [][]*Message) error {
	if len(groups) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan []*Message)
	var wg sync.WaitGroup
	for range min(w.cfg.Concurrency, len(groups)) {
		wg.Go(func() {
			for g := range next {
				for _, m := range g {
					if err := w.send(ctx, m); err != nil {
						cancel(err)
						return
					}
				}
			}
		})
	}
feed:
	for _, g := range groups {
		select {
		case next <- g:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}

// send delivers one event: it returns nil once the receiver accepted it or
// it went to the dead-letter topic; an error only when ctx ends or the
// dead-letter append fails.
func (w *Webhook) send(ctx context.Context, m *Message) error {
	w.stats.InFlight.Add(1)
	defer w.stats.InFlight.Add(-1)
	first := w.now()
	failed := false
	defer func() {
		if failed && w.failing.Add(-1) == 0 {
			w.stats.FailingSince.Store(0)
		}
	}()
	for attempt := 1; ; attempt++ {
		retryAfter, err := w.post(ctx, m)
		if err == nil {
			w.stats.Delivered.Add(1)
			if failed {
				w.logger.Info("webhook accepted an event after failed attempts", "id", m.ID, "attempts", attempt)
			}
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		w.stats.Failures.Add(1)
		msg := err.Error()
		w.stats.LastError.Store(&msg)
		if !failed {
			failed = true
			if w.failing.Add(1) == 1 {
				w.stats.FailingSince.Store(w.now().UnixMilli())
			}
		}
		now := w.now()
		giveUp := first.Add(w.cfg.GiveUpAfter)
		if !now.Before(giveUp) {
			return w.deadLetter(ctx, m, err, attempt)
		}
		wait := w.backoff(attempt)
		if retryAfter > 0 {
			wait = retryAfter
		}
		wait = min(wait, giveUp.Sub(now))
		w.logger.Warn("webhook request failed; retrying", "id", m.ID, "aggregate", m.AggregateID, "attempt", attempt,
			"in", wait.Round(time.Millisecond), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// backoff is the wait before attempt+1: BackoffMin doubled per attempt up
// to BackoffMax, its upper half random.
func (w *Webhook) backoff(attempt int) time.Duration {
	d := w.cfg.BackoffMax
	if attempt < 32 {
		d = min(d, w.cfg.BackoffMin<<(attempt-1))
	}
	return d/2 + rand.N(d/2+1)
}

// Headers of a webhook request besides the signature's.
const (
	HeaderEventType     = "Cdcd-Event-Type"
	HeaderAggregateType = "Cdcd-Aggregate-Type"
	HeaderAggregateID   = "Cdcd-Aggregate-Id"
	HeaderTopic         = "Cdcd-Topic"
)

// post sends m once; a nil error means a 2xx answer. retryAfter is the
// answer's Retry-After, 0 without one.
func (w *Webhook) post(ctx context.Context, m *Message) (retryAfter time.Duration, err error) {
	w.stats.Attempts.Add(1)
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.URL, bytes.NewReader(m.Value))
	if err != nil {
		return 0, err
	}
	h := req.Header
	h.Set("Content-Type", m.ContentType)
	h.Set("User-Agent", "cdcd-outbox")
	h.Set(HeaderIdempotencyKey, m.ID)
	h.Set(HeaderWebhookID, m.ID)
	ts := w.now().Unix()
	h.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts, 10))
	if w.key != nil {
		h.Set(HeaderWebhookSignature, sign(w.key, m.ID, ts, m.Value))
	}
	if m.Type != "" {
		h.Set(HeaderEventType, m.Type)
	}
	h.Set(HeaderAggregateType, m.AggregateType)
	h.Set(HeaderAggregateID, m.AggregateID)
	h.Set(HeaderTopic, m.Topic)
	for _, x := range m.Headers {
		if x.Key != HeaderID && x.Key != HeaderType && !strings.HasPrefix(x.Key, "cdcd.") {
			h.Set(x.Key, string(x.Value))
		}
	}
	resp, err := w.cfg.Client.Do(req)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return 0, fmt.Errorf("no answer within %s", w.cfg.Timeout)
		}
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10)) // read, so the connection is reused
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return 0, nil
	}
	return parseRetryAfter(resp.Header.Get("Retry-After"), w.now()), fmt.Errorf("answered %s: %.200s", resp.Status, bytes.TrimSpace(body))
}

// parseRetryAfter reads a Retry-After value: seconds, or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now))
	}
	return 0
}

// Headers of a dead-letter record besides HeaderError.
const (
	HeaderAttempts = "cdcd.attempts"
	HeaderTarget   = "cdcd.target"
)

// deadLetter appends m to the dead-letter topic with why it was given up.
func (w *Webhook) deadLetter(ctx context.Context, m *Message, cause error, attempts int) error {
	topic := w.cfg.DeadLetterTopic
	w.deadMu.Lock()
	defer w.deadMu.Unlock()
	if !w.deadReady {
		err := w.lg.CreateTopic(ctx, topic, log.TopicConfig{Partitions: 1, Cleanup: log.CleanupDelete})
		if err != nil && !errors.Is(err, log.ErrTopicExists) {
			return fmt.Errorf("create the dead-letter topic %s: %w", topic, err)
		}
		w.deadReady = true
	}
	h := append(append([]log.Header(nil), m.Headers...),
		log.Header{Key: HeaderError, Value: []byte(cause.Error())},
		log.Header{Key: HeaderAttempts, Value: []byte(strconv.Itoa(attempts))},
		log.Header{Key: HeaderTarget, Value: []byte(w.cfg.Name)},
		log.Header{Key: HeaderTopic, Value: []byte(m.Topic)})
	rec := log.Record{Key: m.Key, Value: m.Value, Headers: h, Timestamp: m.Time, Partition: 0}
	if err := w.lg.Produce(ctx, topic, []log.Record{rec}); err != nil {
		return fmt.Errorf("append event %s to the dead-letter topic %s: %w", m.ID, topic, err)
	}
	w.stats.DeadLettered.Add(1)
	w.logger.Error("webhook gave up on an event; it is in the dead-letter topic", "id", m.ID, "aggregate", m.AggregateID,
		"attempts", attempts, "err", cause, "dead_letter_topic", topic,
		"what_to_do", "read it with cdcd log consume "+topic+" and deliver it by hand once the receiver works")
	return nil
}
