package outbox

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
)

// outboxTable is public.outbox as the PostgreSQL reader describes the
// table Writer.DDL creates, plus a tenant column and a timestamp.
var outboxTable = &schema.Table{Namespace: "public", Name: "outbox", Key: []int{0}, Columns: []schema.Column{
	{Name: "id", Kind: schema.UUID}, {Name: "aggregatetype", Kind: schema.String}, {Name: "aggregateid", Kind: schema.String},
	{Name: "type", Kind: schema.String}, {Name: "payload", Kind: schema.JSON, Nullable: true},
	{Name: "tenant", Kind: schema.String, Nullable: true}, {Name: "created", Kind: schema.TimestampTZ, Nullable: true},
}}

func row(id uuid.UUID, aggType, aggID, typ string, payload any, tenant any) []any {
	return []any{[16]byte(id), aggType, aggID, typ, payload, tenant, nil}
}

func headerMap(m Message) map[string]string {
	h := map[string]string{}
	for _, x := range m.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}

// TestRouteRow: a row of the outbox table becomes a message routed as
// Debezium's router does — topic from the aggregate type, key the
// aggregate id, id and type headers, chosen columns as headers, the
// payload as stored.
func TestRouteRow(t *testing.T) {
	rt := newRouter(Route{Table: "public.outbox", Headers: []Header{{Column: "tenant", Name: "x-tenant"}}}, t.Logf)
	id := uuid.MustParse("0190f6c1-7b3a-7cc2-9a5e-1c1b2a3d4e5f")
	commit := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	c := source.Change{Table: outboxTable, Op: source.OpCreate, After: row(id, "Order Line/EU", "o-17", "OrderPlaced", `{"total": 12.5}`, "acme"),
		Pos: pgpos.New(0x100, 3), CommitTime: commit}
	if !rt.isEvent(&c) {
		t.Fatal("a change of the outbox table is not taken as an event")
	}
	m, ok, err := rt.route(&c)
	if err != nil || !ok {
		t.Fatalf("route: %v %v", ok, err)
	}
	if m.Topic != "outbox.Order_Line_EU" || string(m.Key) != "o-17" || string(m.Value) != `{"total": 12.5}` || m.ContentType != "application/json" {
		t.Errorf("topic %q key %q value %q type %q", m.Topic, m.Key, m.Value, m.ContentType)
	}
	h := headerMap(m)
	if h["id"] != id.String() || h["type"] != "OrderPlaced" || h["x-tenant"] != "acme" || h[schema.HeaderPosition] != string(c.Pos) {
		t.Errorf("headers %v", h)
	}
	if !m.Time.Equal(commit) || m.Pos.Compare(c.Pos) != 0 {
		t.Errorf("time %v pos %x", m.Time, m.Pos)
	}
	// A NULL tenant is left out; a configured timestamp column sets the time.
	rt = newRouter(Route{Table: "public.outbox", Topic: "events.${routedByValue}.v1", Columns: Columns{Timestamp: "created"},
		Headers: []Header{{Column: "tenant"}}}, t.Logf)
	c.After = row(id, "Order", "o-17", "OrderPlaced", nil, nil)
	c.After[6] = int64(1_700_000_000_000_000)
	m, _, _ = rt.route(&c)
	if _, ok := headerMap(m)["tenant"]; ok || m.Topic != "events.Order.v1" || m.Value != nil || !m.Time.Equal(time.UnixMicro(1_700_000_000_000_000)) {
		t.Errorf("headers %v topic %q value %q time %v", headerMap(m), m.Topic, m.Value, m.Time)
	}
}

// TestRouteOps: inserts and snapshot reads are events; deletes (the row
// inserted and deleted in one transaction), truncates and updates are
// not; other tables and other prefixes are not the outbox's.
func TestRouteOps(t *testing.T) {
	var warned []string
	rt := newRouter(Route{Table: "public.outbox", MessagePrefix: "app"}, func(msg string, _ ...any) { warned = append(warned, msg) })
	after := row(uuid.New(), "Order", "1", "T", `{}`, nil)
	for _, tc := range []struct {
		op   source.Op
		want bool
	}{{source.OpCreate, true}, {source.OpRead, true}, {source.OpDelete, false}, {source.OpTruncate, false}, {source.OpUpdate, false}, {source.OpUpdate, false}} {
		c := source.Change{Table: outboxTable, Op: tc.op, After: after, Before: after}
		_, ok, err := rt.route(&c)
		if err != nil || ok != tc.want {
			t.Errorf("%s: event %v (%v), want %v", tc.op, ok, err, tc.want)
		}
	}
	if len(warned) != 1 {
		t.Errorf("updates warned %d times, want once: %v", len(warned), warned)
	}
	other := &schema.Table{Namespace: "public", Name: "orders"}
	for _, c := range []source.Change{{Table: other, Op: source.OpCreate}, {Message: &source.Message{Prefix: "app2"}}, {Message: &source.Message{Prefix: "ap"}}} {
		if rt.isEvent(&c) {
			t.Errorf("%+v taken as an event", c)
		}
	}
}

// TestRouteMessage: a logical message's JSON object is an event; its
// payload stays as written (a nested object), numbers as ids are text.
func TestRouteMessage(t *testing.T) {
	rt := newRouter(Route{MessagePrefix: "app", Headers: []Header{{Column: "trace"}}}, t.Logf)
	c := source.Change{Message: &source.Message{Prefix: "app", Content: []byte(
		`{"id":"e1","aggregatetype":"Customer","aggregateid":42,"type":"Renamed","payload":{"name":"Ada"},"trace":"t-1","other":1}`)},
		Pos: pgpos.New(7, 0)}
	m, ok, err := rt.route(&c)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if m.ID != "e1" || m.Topic != "outbox.Customer" || string(m.Key) != "42" || string(m.Value) != `{"name":"Ada"}` || headerMap(m)["trace"] != "t-1" {
		t.Errorf("%+v headers %v", m, headerMap(m))
	}
	c.Message.Content = []byte(`{"id":"e2","aggregatetype":"Customer","aggregateid":"42","type":"Deleted","payload":null}`)
	if m, _, _ = rt.route(&c); m.Value != nil {
		t.Errorf("a null payload gives value %q, want none (a tombstone)", m.Value)
	}
}

// TestRouteMalformed: what cannot be routed is an error naming what is
// missing, never a silently dropped event.
func TestRouteMalformed(t *testing.T) {
	rt := newRouter(Route{Table: "public.outbox", MessagePrefix: "app"}, t.Logf)
	cases := map[string]source.Change{
		"aggregateid": {Table: outboxTable, Op: source.OpCreate, After: row(uuid.New(), "Order", "", "T", nil, nil)},
		"not a JSON":  {Message: &source.Message{Prefix: "app", Content: []byte(`[1,2]`)}},
		"id":          {Message: &source.Message{Prefix: "app", Content: []byte(`{"aggregatetype":"A","aggregateid":"1"}`)}},
		"column type": {Table: &schema.Table{Namespace: "public", Name: "outbox", Columns: outboxTable.Columns[:3]}, Op: source.OpCreate, After: []any{nil, nil, nil}},
	}
	for want, c := range cases {
		_, ok, err := rt.route(&c)
		if !ok || !errors.Is(err, errMalformed) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: ok %v err %v", want, ok, err)
		}
	}
}

// TestPayloadModes: as-is keeps the stored bytes; expanded always gives
// JSON, unwrapping JSON stored as a JSON string.
func TestPayloadModes(t *testing.T) {
	for _, tc := range []struct {
		in        string
		kind      schema.Kind
		mode      Payload
		want, typ string
	}{
		{`{"a":1}`, schema.JSON, PayloadAsIs, `{"a":1}`, "application/json"},
		{`"{\"a\":1}"`, schema.JSON, PayloadAsIs, `"{\"a\":1}"`, "application/json"},
		{`"{\"a\":1}"`, schema.JSON, PayloadExpanded, `{"a":1}`, "application/json"},
		{`"plain"`, schema.JSON, PayloadExpanded, `"plain"`, "application/json"},
		{`hello`, schema.String, PayloadAsIs, `hello`, "text/plain; charset=utf-8"},
		{`hello`, schema.String, PayloadExpanded, `"hello"`, "application/json"},
		{"\x00\x01", schema.Bytes, PayloadAsIs, "\x00\x01", "application/octet-stream"},
	} {
		v, typ := payloadValue([]byte(tc.in), tc.kind, tc.mode)
		if string(v) != tc.want || typ != tc.typ {
			t.Errorf("%q (%s, mode %d): %q %q, want %q %q", tc.in, tc.kind, tc.mode, v, typ, tc.want, tc.typ)
		}
	}
}
