package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Event is one event a service writes in its own transaction, in
// Debezium's outbox shape.
type Event struct {
	// ID identifies the event: the record header "id" in the log and the
	// Idempotency-Key of a webhook request. NewEvent gives a UUIDv7 (time
	// ordered, so the outbox table's index stays compact).
	ID string
	// AggregateType names the kind of aggregate ("Order"); it picks the
	// topic (the topic template's ${aggregatetype}).
	AggregateType string
	// AggregateID identifies the aggregate; it is the record key, so the
	// events of one aggregate stay in order.
	AggregateID string
	// Type is the event's type ("OrderPlaced"), the record header "type".
	Type string
	// Payload is the event's body, a JSON document; nil is JSON null.
	Payload json.RawMessage
	// Extra holds values of further columns of the outbox table (or
	// further fields of a logical message), by column name; a relay
	// configured with outbox.headers carries them as headers.
	Extra map[string]any
}

// NewEvent returns an event with a new UUIDv7 id. payload is stored as
// JSON: a json.RawMessage or []byte is taken as JSON text (and checked),
// anything else is encoded with encoding/json.
func NewEvent(aggregateType, aggregateID, eventType string, payload any) (Event, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Event{}, fmt.Errorf("outbox: new event id: %w", err)
	}
	var raw json.RawMessage
	switch p := payload.(type) {
	case json.RawMessage:
		raw = p
	case []byte:
		raw = p
	default:
		if raw, err = json.Marshal(payload); err != nil {
			return Event{}, fmt.Errorf("outbox: encode the payload of a %s event of %s %s: %w", eventType, aggregateType, aggregateID, err)
		}
	}
	if raw != nil && !json.Valid(raw) {
		return Event{}, fmt.Errorf("outbox: the payload of a %s event of %s %s is not valid JSON", eventType, aggregateType, aggregateID)
	}
	return Event{ID: id.String(), AggregateType: aggregateType, AggregateID: aggregateID, Type: eventType, Payload: raw}, nil
}

// ErrInvalidEvent: an event lacks a field the relay needs (id, aggregate
// type, aggregate id, type); the wrapping error names it.
var ErrInvalidEvent = errors.New("outbox: invalid event")

// check reports what ev lacks.
func (ev *Event) check() error {
	for _, f := range []struct{ name, v string }{{"id", ev.ID}, {"aggregate type", ev.AggregateType},
		{"aggregate id", ev.AggregateID}, {"type", ev.Type}} {
		if f.v == "" {
			return fmt.Errorf("%w: an event without %s (id %q): set it, or build events with NewEvent", ErrInvalidEvent, f.name, ev.ID)
		}
	}
	if ev.Payload != nil && !json.Valid(ev.Payload) {
		return fmt.Errorf("%w: event %s: the payload is not valid JSON", ErrInvalidEvent, ev.ID)
	}
	return nil
}

// payloadText is the payload as the outbox table's column takes it: JSON
// text, nil for NULL.
func (ev *Event) payloadText() any {
	if ev.Payload == nil || bytes.Equal(ev.Payload, []byte("null")) {
		return nil
	}
	return string(ev.Payload)
}

// message is the content of a logical decoding message (MessagePrefix):
// a JSON object with the event's fields under the column names.
func (ev *Event) message(cols Columns) ([]byte, error) {
	m := make(map[string]any, 5+len(ev.Extra))
	for k, v := range ev.Extra {
		m[k] = v
	}
	m[cols.ID], m[cols.AggregateType], m[cols.AggregateID], m[cols.Type] = ev.ID, ev.AggregateType, ev.AggregateID, ev.Type
	if ev.Payload != nil {
		m[cols.Payload] = ev.Payload
	} else {
		m[cols.Payload] = nil
	}
	return json.Marshal(m)
}

// Columns names the outbox table's columns (and the fields of a logical
// message). The zero value of a field means Debezium's name.
type Columns struct {
	ID            string // default "id"
	AggregateType string // default "aggregatetype"
	AggregateID   string // default "aggregateid"
	Type          string // default "type"
	Payload       string // default "payload"
	// Timestamp, when set, is a timestamp column whose value becomes the
	// record's timestamp (default: the transaction's commit time).
	Timestamp string
}

// WithDefaults fills unset names with Debezium's.
func (c Columns) WithDefaults() Columns {
	def := func(p *string, d string) {
		if *p == "" {
			*p = d
		}
	}
	def(&c.ID, "id")
	def(&c.AggregateType, "aggregatetype")
	def(&c.AggregateID, "aggregateid")
	def(&c.Type, "type")
	def(&c.Payload, "payload")
	return c
}

// timeText renders a timestamp for messages and logs.
func timeText(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
