package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/cdcd-dev/cdcd/config"
)

// amAlert is one alert in Alertmanager's API v2 form (POST /api/v2/alerts).
type amAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// maxWebhookBackoff caps the wait between retries.
const maxWebhookBackoff = time.Minute

// webhook delivers alerts in order from a bounded queue, retrying each
// delivery with exponential backoff.
type webhook struct {
	cfg       config.Webhook
	pipeline  string
	generator string // generatorURL: the admin /status
	realert   time.Duration
	client    *http.Client
	logger    *slog.Logger
	queue     chan amAlert

	Sent, Failed, Dropped atomic.Int64
}

func newWebhook(cfg config.Webhook, pipeline, admin string, realert time.Duration, logger *slog.Logger) *webhook {
	w := &webhook{cfg: cfg, pipeline: pipeline, realert: realert, client: &http.Client{Timeout: cfg.Timeout},
		logger: logger.With("component", "alert-webhook"), queue: make(chan amAlert, 256)}
	if admin != "" && admin != config.ListenOff {
		w.generator = "http://" + admin + "/status"
	}
	return w
}

// enqueue queues an alert event without blocking; when the queue is full
// (the receiver has been down a long time) the event is dropped.
func (w *webhook) enqueue(a Alert, resolved bool, now time.Time) {
	labels := map[string]string{"alertname": a.Name, "severity": a.Severity, "service": "cdcd", "pipeline": w.pipeline}
	if a.Name == AlertConsumerLag || a.Name == AlertTablePaused || a.Name == AlertCommitsFailing {
		labels["table"] = a.Subject
	} else {
		labels["slot"] = a.Subject
	}
	am := amAlert{Labels: labels, Annotations: map[string]string{"summary": a.Summary, "description": a.Action},
		StartsAt: a.Since.UTC(), GeneratorURL: w.generator}
	if resolved {
		am.EndsAt = now.UTC()
	} else {
		// Alertmanager resolves it by itself if cdcd stops re-sending.
		am.EndsAt = now.Add(3 * w.realert).UTC()
	}
	select {
	case w.queue <- am:
	default:
		w.Dropped.Add(1)
		w.logger.Warn("alert webhook queue full; dropping an alert event", "alert", a.Name, "resolved", resolved,
			"what_to_do", "check that the webhook receiver is reachable")
	}
}

// run delivers queued alerts until ctx ends.
func (w *webhook) run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case a := <-w.queue:
			w.deliver(ctx, a)
		}
	}
}

// deliver posts one alert, retrying with backoff; it gives up after
// cfg.Retries retries (logging what was lost) or when ctx ends.
func (w *webhook) deliver(ctx context.Context, a amAlert) {
	body, _ := json.Marshal([]amAlert{a})
	backoff := w.cfg.Backoff
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	for attempt := 0; ; attempt++ {
		err := w.post(ctx, body)
		if err == nil {
			w.Sent.Add(1)
			return
		}
		if attempt >= w.cfg.Retries || ctx.Err() != nil {
			w.Failed.Add(1)
			w.logger.Warn("alert webhook delivery failed", "alert", a.Labels["alertname"], "attempts", attempt+1, "err", err,
				"what_to_do", "check alerts.webhook.url and the receiver; the alert stays in the log and the cdcd_alert_firing metric")
			return
		}
		w.logger.Debug("alert webhook delivery failed; retrying", "attempt", attempt+1, "in", backoff, "err", err)
		timer.Reset(backoff)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		backoff = min(2*backoff, maxWebhookBackoff)
	}
}

func (w *webhook) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "cdcd/"+Version)
	resp, err := w.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = redactedURL(ue.URL) // the URL may hold a password
		}
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return nil
}

// redactedURL hides a URL's password.
func redactedURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(the webhook URL)"
	}
	return u.Redacted()
}
