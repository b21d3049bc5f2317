package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// logStore keeps a registry in the log's _schemas topic, as the daemon does.
type logStore struct{ l *log.Embedded }

func (s logStore) Load(ctx context.Context, fn func(k, v []byte) error) error {
	return readOnlyStore(s).Load(ctx, fn)
}

func (s logStore) Append(ctx context.Context, k, v []byte) error {
	return s.l.Produce(ctx, schemasTopic, []log.Record{{Key: k, Value: v, Partition: 0}})
}

// TestLogConsumeAvro: cdcd log consume decodes a table topic's records
// through the registry in the log, as kafka-avro-console-consumer does —
// one JSON line with partition, offset, timestamp, headers, and key and
// value as JSON (decimals exact, times in RFC 3339); a schema registered
// after the command opened the registry is still found; a record that is
// not framed prints as JSON or text; --raw keeps the framed bytes.
func TestLogConsumeAvro(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := log.Open(dir, log.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for name, parts := range map[string]int32{schemasTopic: 1, "shop.public.orders": 1} {
		if err := l.CreateTopic(ctx, name, log.TopicConfig{Partitions: parts}); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := schema.OpenRegistry(ctx, logStore{l})
	if err != nil {
		t.Fatal(err)
	}
	tbl := &schema.Table{Namespace: "public", Name: "orders", Key: []int{0}, Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64},
		{Name: "note", Kind: schema.String, Nullable: true},
		{Name: "total", Kind: schema.Decimal, Precision: 12, Scale: 2, Nullable: true},
		{Name: "at", Kind: schema.TimestampTZ, Nullable: true},
	}}
	const topic = "shop.public.orders"
	ks, err := schema.KeySchema(tbl, topic)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := schema.ValueSchema(tbl, topic)
	if err != nil {
		t.Fatal(err)
	}
	keyID, err := reg.Register(ctx, topic+"-key", ks)
	if err != nil {
		t.Fatal(err)
	}
	valID, err := reg.Register(ctx, topic+"-value", vs)
	if err != nil {
		t.Fatal(err)
	}
	row := []any{int64(7), "hé \"quoted\"", "-12345.67", int64(1_700_000_000_123_456)}
	key, err := schema.AppendKey(schema.AppendFrame(nil, keyID), tbl, row)
	if err != nil {
		t.Fatal(err)
	}
	val, err := schema.AppendEnvelope(schema.AppendFrame(nil, valID), tbl, &schema.Envelope{After: row, Op: 'c',
		Source: schema.SourceInfo{Connector: "postgresql", Schema: "public", Table: "orders", LSN: 42, TxID: 9}})
	if err != nil {
		t.Fatal(err)
	}
	recs := []log.Record{
		{Key: key, Value: val, Partition: 0, Headers: []log.Header{{Key: "cdcd.txid", Value: []byte("9")}, {Key: "cdcd.pos", Value: []byte{0, 1, 0xff}}}},
		{Key: key, Value: nil, Partition: 0}, // a tombstone
		{Key: []byte("order-7"), Value: []byte(`{"total": 12.5, "note": "a<b & c"}`), Partition: 0}, // outbox-like JSON
		{Key: []byte{0xff, 0xfe}, Value: []byte("plain text"), Partition: 0},                        // neither
		{Key: schema.AppendFrame(nil, 9999), Value: []byte("x"), Partition: 0},                      // an unknown id
	}
	if err := l.Produce(ctx, topic, recs); err != nil {
		t.Fatal(err)
	}
	ld := "--log-dir=" + dir
	out := mustRun(t, "", "consume", "--topic", topic, "--from-beginning", ld)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(recs) {
		t.Fatalf("%d lines for %d records:\n%s", len(lines), len(recs), out)
	}
	var first struct {
		Partition   int32             `json:"partition"`
		Offset      int64             `json:"offset"`
		Timestamp   string            `json:"timestamp"`
		Headers     map[string]string `json:"headers"`
		Key         map[string]any    `json:"key"`
		Value       map[string]any    `json:"value"`
		ValueSchema uint32            `json:"value_schema_id"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatalf("line 1 is not JSON: %v\n%s", err, lines[0])
	}
	// A union of a record prints as Avro's JSON encoding does, under the
	// record's name (what Confluent's consumer shows); a nullable
	// primitive prints its value.
	union, _ := first.Value["after"].(map[string]any)
	after, _ := union["shop.public.orders.Value"].(map[string]any)
	switch {
	case first.Partition != 0 || first.Offset != 0 || first.Timestamp == "":
		t.Errorf("position: %s", lines[0])
	case first.Key["id"] != float64(7):
		t.Errorf("key %v, want {id: 7}", first.Key)
	case first.Value["op"] != "c" || after["note"] != `hé "quoted"` || after["total"] != "-12345.67" || after["at"] != "2023-11-14T22:13:20.123456Z":
		t.Errorf("value %v", first.Value)
	case first.Headers["cdcd.txid"] != "9" || first.Headers["cdcd.pos"] != "0x0001ff":
		t.Errorf("headers %v", first.Headers)
	case first.ValueSchema != valID:
		t.Errorf("value_schema_id %d, want %d", first.ValueSchema, valID)
	}
	for i, want := range []string{`"value":null`, `"key":"order-7","value":{"total":12.5,"note":"a<b & c"}`, `"key":"base64://4=","value":"plain text"`} {
		if !strings.Contains(lines[i+1], want) {
			t.Errorf("line %d = %s, want %s", i+2, lines[i+1], want)
		}
	}

	// A schema registered after the decoder read the registry.
	dec, err := newAvroDecoder(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	newID, err := reg.Register(ctx, "other-value", `{"type":"record","name":"o","fields":[{"name":"n","type":"long"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if js, id := dec.field(append(schema.AppendFrame(nil, newID), 6)); string(js) != `{"n":3}` || id != newID {
		t.Errorf("a later schema: %s (id %d)", js, id)
	}

	raw := mustRun(t, "", "consume", "--topic", topic, "--from-beginning", "--max", "1", "--raw", ld)
	if f := strings.Split(strings.TrimSpace(raw), "\t"); len(f) != 5 || !strings.HasPrefix(f[3], `"\x00`) {
		t.Errorf("--raw = %q, want the framed bytes quoted", raw)
	}
}
