package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// Payload says how a record's value is made from an event's payload.
type Payload int

const (
	// PayloadAsIs: the payload as stored — a JSON column's text, a text
	// column's text, a binary column's bytes; a logical message's payload
	// field's JSON. (Debezium's router with a string or byte-array value
	// converter.)
	PayloadAsIs Payload = iota
	// PayloadExpanded: always a JSON document. A payload that is a JSON
	// string whose text is itself JSON (JSON stored twice encoded) is
	// unwrapped; a payload that is not JSON becomes a JSON string.
	// (Debezium's table.expand.json.payload.)
	PayloadExpanded
)

// Header carries a further column (or message field) as a record header.
type Header struct {
	Column string
	Name   string // the header's name; default the column's
}

// Record headers of a relayed event. Debezium's router puts the event id
// in "id"; the type goes beside it.
const (
	HeaderID   = "id"
	HeaderType = "type"
)

// TopicVar is the topic template's variable: the event's aggregate type.
// ${routedByValue}, Debezium's name, is taken too.
const TopicVar = "${aggregatetype}"

// Route says which changes are events and how they become records.
type Route struct {
	// Table is the outbox table as the source names its changes
	// (schema.Table.QualifiedName: "public.outbox", "shop.outbox"); ""
	// when only messages are relayed. Its inserts (and the rows a snapshot
	// reads) are events; deletes are ignored (a row inserted and deleted
	// in one transaction is still relayed, by its insert); updates are
	// ignored with a warning.
	Table string
	// MessagePrefix: transactional logical decoding messages with exactly
	// this prefix are events, their content a JSON object with the
	// event's fields under the column names.
	MessagePrefix string
	// Columns names the event's columns (zero fields: Debezium's names).
	Columns Columns
	// Topic is the topic template; TopicVar is replaced by the aggregate
	// type with every character a topic name does not take (other than
	// letters, digits, '.', '_', '-') as '_'. Default "outbox.${aggregatetype}".
	Topic   string
	Payload Payload
	// Headers are further columns carried as headers (a NULL is left out).
	Headers []Header
}

// Message is one event as the targets get it: routed, with its record.
type Message struct {
	ID, Type                   string
	AggregateType, AggregateID string
	Topic                      string
	// Key is the aggregate id's text; Value the payload (Route.Payload),
	// nil for a NULL payload.
	Key, Value []byte
	// ContentType is Value's media type, for webhooks.
	ContentType string
	// Headers: id, type (when set), Route.Headers, and the source position
	// (schema.HeaderPosition).
	Headers []log.Header
	// Pos is the event's source position; Commit its transaction's commit
	// time; Time the record's timestamp (Columns.Timestamp, else Commit).
	Pos          source.Position
	Commit, Time time.Time
}

// aggregate names the message's aggregate: the unit of order.
func (m *Message) aggregate() string { return m.AggregateType + "\x00" + m.AggregateID }

// errMalformed marks an event the relay cannot route (a missing field, a
// message that is not a JSON object); the wrapping error says what.
var errMalformed = errors.New("outbox: malformed event")

// router turns changes into messages.
type router struct {
	r       Route
	cols    map[*schema.Table]*tableCols
	warned  map[source.Op]bool
	onWarn  func(msg string, args ...any)
	topicOf func(aggregateType string) string
}

// tableCols are the indexes of the event's columns in one table version.
type tableCols struct {
	id, aggType, aggID, typ, payload, ts int
	headers                              []int
	missing                              string // a required column the table lacks
}

func newRouter(r Route, onWarn func(string, ...any)) *router {
	r.Columns = r.Columns.WithDefaults()
	if r.Topic == "" {
		r.Topic = "outbox." + TopicVar
	}
	for i := range r.Headers {
		if r.Headers[i].Name == "" {
			r.Headers[i].Name = r.Headers[i].Column
		}
	}
	tmpl := strings.ReplaceAll(r.Topic, "${routedByValue}", TopicVar)
	return &router{r: r, cols: map[*schema.Table]*tableCols{}, warned: map[source.Op]bool{}, onWarn: onWarn,
		topicOf: func(at string) string { return strings.ReplaceAll(tmpl, TopicVar, TopicName(at)) }}
}

// TopicName makes s a topic name's part: every character other than
// letters, digits, '.', '_' and '-' becomes '_'.
func TopicName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// isEvent reports whether c is the outbox's: a message with the prefix,
// or a change of the outbox table.
func (rt *router) isEvent(c *source.Change) bool {
	if c.Message != nil {
		return rt.r.MessagePrefix != "" && c.Message.Prefix == rt.r.MessagePrefix
	}
	return rt.r.Table != "" && c.Table != nil && c.Table.QualifiedName() == rt.r.Table
}

// route turns an outbox change into a message; ok is false for a change
// that carries no event (a delete, a truncate, an ignored update). An
// error wraps errMalformed.
func (rt *router) route(c *source.Change) (m Message, ok bool, err error) {
	var f fields
	if c.Message != nil {
		if f, err = messageFields(c.Message.Content, &rt.r); err != nil {
			return m, true, err
		}
	} else {
		switch c.Op {
		case source.OpCreate, source.OpRead:
		case source.OpUpdate:
			if !rt.warned[c.Op] {
				rt.warned[c.Op] = true
				rt.onWarn("an update of the outbox table is not an event and is ignored (the relay takes inserts only; this is said once)",
					"table", rt.r.Table, "what_to_do", "insert a new event instead of updating one")
			}
			return m, false, nil
		default: // deletes (the insert was the event), truncates
			return m, false, nil
		}
		if f, err = rt.rowFields(c.Table, c.After); err != nil {
			return m, true, err
		}
	}
	m = Message{ID: f.id, Type: f.typ, AggregateType: f.aggType, AggregateID: f.aggID, Topic: rt.topicOf(f.aggType),
		Key: []byte(f.aggID), Pos: slicesClone(c.Pos), Commit: c.CommitTime, Time: c.CommitTime}
	if !f.ts.IsZero() {
		m.Time = f.ts
	}
	m.Value, m.ContentType = payloadValue(f.payload, f.payloadKind, rt.r.Payload)
	m.Headers = append(make([]log.Header, 0, 3+len(f.headers)), log.Header{Key: HeaderID, Value: []byte(f.id)})
	if f.typ != "" {
		m.Headers = append(m.Headers, log.Header{Key: HeaderType, Value: []byte(f.typ)})
	}
	m.Headers = append(m.Headers, f.headers...)
	m.Headers = append(m.Headers, log.Header{Key: schema.HeaderPosition, Value: m.Pos})
	return m, true, nil
}

func slicesClone(p source.Position) source.Position { return append(source.Position(nil), p...) }

// fields are an event's values, read from a row or a message.
type fields struct {
	id, aggType, aggID, typ string
	payload                 []byte // nil: NULL
	payloadKind             schema.Kind
	ts                      time.Time
	headers                 []log.Header
}

// required checks the fields every event needs.
func (f *fields) required(where string, cols Columns) error {
	for _, x := range []struct{ name, v string }{{cols.ID, f.id}, {cols.AggregateType, f.aggType}, {cols.AggregateID, f.aggID}} {
		if x.v == "" {
			return fmt.Errorf("%w: %s has no %s (NULL or empty): every event needs an id, an aggregate type and an aggregate id", errMalformed, where, x.name)
		}
	}
	return nil
}

// rowFields reads an event from a row of the outbox table.
func (rt *router) rowFields(t *schema.Table, row []any) (fields, error) {
	tc := rt.tableCols(t)
	where := "a row of " + t.QualifiedName()
	if tc.missing != "" {
		return fields{}, fmt.Errorf("%w: %s has no column %s (it has %s): create the table with Writer.DDL, or name the columns in outbox.columns",
			errMalformed, t.QualifiedName(), tc.missing, columnList(t))
	}
	f := fields{id: valueText(row[tc.id]), aggType: valueText(row[tc.aggType]), aggID: valueText(row[tc.aggID]), typ: valueText(row[tc.typ]),
		payloadKind: t.Columns[tc.payload].Kind}
	if f.id != "" {
		where += " (id " + f.id + ")"
	}
	if err := f.required(where, rt.r.Columns); err != nil {
		return f, err
	}
	f.payload = valueBytes(row[tc.payload])
	if tc.ts >= 0 {
		f.ts = valueTime(t.Columns[tc.ts].Kind, row[tc.ts])
	}
	for i, ci := range tc.headers {
		if ci < 0 || row[ci] == nil {
			continue
		}
		f.headers = append(f.headers, log.Header{Key: rt.r.Headers[i].Name, Value: []byte(valueText(row[ci]))})
	}
	return f, nil
}

func (rt *router) tableCols(t *schema.Table) *tableCols {
	if tc := rt.cols[t]; tc != nil {
		return tc
	}
	c := rt.r.Columns
	tc := &tableCols{ts: -1}
	for _, x := range []struct {
		name string
		at   *int
	}{{c.ID, &tc.id}, {c.AggregateType, &tc.aggType}, {c.AggregateID, &tc.aggID}, {c.Type, &tc.typ}, {c.Payload, &tc.payload}} {
		if *x.at = t.ColumnIndex(x.name); *x.at < 0 && tc.missing == "" {
			tc.missing = x.name
		}
	}
	if c.Timestamp != "" {
		tc.ts = t.ColumnIndex(c.Timestamp)
	}
	for _, h := range rt.r.Headers {
		tc.headers = append(tc.headers, t.ColumnIndex(h.Column))
	}
	rt.cols[t] = tc
	return tc
}

func columnList(t *schema.Table) string {
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// messageFields reads an event from a logical decoding message's content.
func messageFields(content []byte, r *Route) (fields, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(content, &obj); err != nil || obj == nil {
		return fields{}, fmt.Errorf("%w: a logical decoding message with prefix %s is not a JSON object with the event's fields (%s, %s, %s, %s, %s): %.100q",
			errMalformed, r.MessagePrefix, r.Columns.ID, r.Columns.AggregateType, r.Columns.AggregateID, r.Columns.Type, r.Columns.Payload, content)
	}
	c := r.Columns
	f := fields{id: jsonText(obj[c.ID]), aggType: jsonText(obj[c.AggregateType]), aggID: jsonText(obj[c.AggregateID]),
		typ: jsonText(obj[c.Type]), payloadKind: schema.JSON}
	where := "a logical decoding message with prefix " + r.MessagePrefix
	if f.id != "" {
		where += " (id " + f.id + ")"
	}
	if err := f.required(where, c); err != nil {
		return f, err
	}
	if p, ok := obj[c.Payload]; ok && !bytes.Equal(bytes.TrimSpace(p), []byte("null")) {
		f.payload = p
	}
	if c.Timestamp != "" {
		if t, err := time.Parse(time.RFC3339Nano, jsonText(obj[c.Timestamp])); err == nil {
			f.ts = t
		}
	}
	for _, h := range r.Headers {
		if v, ok := obj[h.Column]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			f.headers = append(f.headers, log.Header{Key: h.Name, Value: []byte(jsonText(v))})
		}
	}
	return f, nil
}

// jsonText is a JSON value's text: a string's content, else the JSON
// itself ("" for null or absent).
func jsonText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return ""
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	return string(raw)
}

// valueText is a column value's text ("" for NULL).
func valueText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case [16]byte:
		return uuid.UUID(x).String()
	case int64:
		return strconv.FormatInt(x, 10)
	case bool:
		return strconv.FormatBool(x)
	case fmt.Stringer:
		return x.String()
	}
	return fmt.Sprint(v)
}

// valueBytes is a payload column's value as stored (nil for NULL).
func valueBytes(v any) []byte {
	switch x := v.(type) {
	case nil:
		return nil
	case []byte:
		return bytes.Clone(x)
	}
	return []byte(valueText(v))
}

// valueTime reads a timestamp column's value (zero if it is not one).
func valueTime(k schema.Kind, v any) time.Time {
	us, ok := v.(int64)
	if !ok || k != schema.Timestamp && k != schema.TimestampTZ || us == schema.TimestampInfinity || us == schema.TimestampMinusInfinity {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// payloadValue makes the record's value and its media type.
func payloadValue(p []byte, kind schema.Kind, mode Payload) ([]byte, string) {
	const jsonType = "application/json"
	if p == nil {
		return nil, jsonType
	}
	if mode == PayloadExpanded {
		return expand(p), jsonType
	}
	switch {
	case kind == schema.JSON || json.Valid(p):
		return p, jsonType
	case kind == schema.Bytes:
		return p, "application/octet-stream"
	}
	return p, "text/plain; charset=utf-8"
}

// expand returns p as a JSON document: JSON stored as a JSON string is
// unwrapped, text that is not JSON becomes a JSON string.
func expand(p []byte) []byte {
	if !json.Valid(p) {
		b, _ := json.Marshal(string(p))
		return b
	}
	t := bytes.TrimSpace(p)
	if len(t) > 0 && t[0] == '"' {
		var s string
		if json.Unmarshal(t, &s) == nil && json.Valid([]byte(s)) {
			return []byte(s)
		}
	}
	return p
}
