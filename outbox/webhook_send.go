package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cdcd-dev/cdcd/log"
)

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
			if f := w.stats.Latency; f != nil && !m.Commit.IsZero() {
				f(w.now().Sub(m.Commit))
			}
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
