package outbox

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Webhook requests are signed as the Standard Webhooks specification
// (standardwebhooks.com) says, so its verification libraries work as they
// are: the headers
//
//	webhook-id:        the event id
//	webhook-timestamp: Unix seconds when the request was sent
//	webhook-signature: v1,<base64 of HMAC-SHA256(key, id + "." + timestamp + "." + body)>
//
// The key is the secret's bytes, or, for a secret written
// "whsec_<base64>" (the specification's form), the decoded bytes.
const (
	HeaderWebhookID        = "Webhook-Id"
	HeaderWebhookTimestamp = "Webhook-Timestamp"
	HeaderWebhookSignature = "Webhook-Signature"
	// HeaderIdempotencyKey carries the event id too, for receivers that
	// deduplicate by the IETF idempotency-key draft's header.
	HeaderIdempotencyKey = "Idempotency-Key"
)

// signingKey returns the HMAC key of a secret.
func signingKey(secret string) ([]byte, error) {
	if rest, ok := strings.CutPrefix(secret, "whsec_"); ok {
		k, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return nil, fmt.Errorf("outbox: a whsec_ secret must be base64 after the prefix: %w", err)
		}
		return k, nil
	}
	return []byte(secret), nil
}

// sign returns the webhook-signature value for one request.
func sign(key []byte, id string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write(strconv.AppendInt(nil, ts, 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// ErrBadSignature: a webhook request's signature does not verify.
var ErrBadSignature = errors.New("outbox: webhook signature does not verify")

// Verify checks a webhook request's signature headers against body, for
// receivers written in Go: the signature must be one made with secret, and
// the timestamp within tolerance of now (replays of old requests fail).
func Verify(secret string, h http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	key, err := signingKey(secret)
	if err != nil {
		return err
	}
	id, tsText := h.Get(HeaderWebhookID), h.Get(HeaderWebhookTimestamp)
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if id == "" || err != nil {
		return fmt.Errorf("%w: missing or bad %s / %s headers", ErrBadSignature, HeaderWebhookID, HeaderWebhookTimestamp)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: the timestamp is %s away from now (tolerance %s)", ErrBadSignature, d.Round(time.Second), tolerance)
	}
	want := sign(key, id, ts, body)
	for _, got := range strings.Fields(h.Get(HeaderWebhookSignature)) {
		if hmac.Equal([]byte(got), []byte(want)) {
			return nil
		}
	}
	return ErrBadSignature
}
