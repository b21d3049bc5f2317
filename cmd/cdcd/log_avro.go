package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hamba/avro/v2"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// `cdcd log consume` prints each record as one JSON line, as Confluent's
// kafka-avro-console-consumer does with its print options on: partition,
// offset, timestamp, headers, and key and value decoded from Avro through
// the registry the log holds (the _schemas topic). A key or value that is
// not a Confluent-framed Avro record prints as JSON when it is JSON (the
// outbox's payloads), else as a string; --raw keeps the tab-separated
// bytes.

// schemasTopic is the registry's topic in the embedded log (daemon.TopicSchemas).
const schemasTopic = "_schemas"

// consumedRecord is one line of `cdcd log consume`.
type consumedRecord struct {
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Timestamp string            `json:"timestamp"`
	Headers   map[string]string `json:"headers,omitempty"`
	Key       json.RawMessage   `json:"key"`
	Value     json.RawMessage   `json:"value"`
	// SchemaIDs of the key and the value, when framed.
	KeySchema   uint32 `json:"key_schema_id,omitempty"`
	ValueSchema uint32 `json:"value_schema_id,omitempty"`
}

// avroDecoder decodes framed records by the schemas of the log's registry.
type avroDecoder struct {
	ctx    context.Context
	l      *log.Embedded
	reg    *schema.Registry
	parsed map[uint32]avro.Schema
	// reloaded: ids the registry was read again for (once each).
	reloaded map[uint32]bool
}

// readOnlyStore reads the registry from the log and refuses writes.
type readOnlyStore struct{ l *log.Embedded }

func (s readOnlyStore) Load(ctx context.Context, fn func(key, value []byte) error) error {
	info, err := s.l.DescribeTopic(ctx, schemasTopic)
	if errors.Is(err, log.ErrUnknownTopic) {
		return nil // no registry: nothing is framed
	}
	if err != nil {
		return err
	}
	for _, p := range info.Partitions {
		for off := p.Start; off < p.End; {
			recs, err := s.l.Fetch(ctx, schemasTopic, p.Partition, off, log.FetchOptions{MaxBytes: 1 << 20})
			if err != nil {
				return fmt.Errorf("read the registry (%s/%d at %d): %w", schemasTopic, p.Partition, off, err)
			}
			if len(recs) == 0 {
				break
			}
			for _, r := range recs {
				if err := fn(r.Key, r.Value); err != nil {
					return err
				}
				off = r.Offset + 1
			}
		}
	}
	return nil
}

func (readOnlyStore) Append(context.Context, []byte, []byte) error {
	return errors.New("cdcd log consume reads the registry only")
}

func newAvroDecoder(ctx context.Context, l *log.Embedded) (*avroDecoder, error) {
	reg, err := schema.OpenRegistry(ctx, readOnlyStore{l})
	if err != nil {
		return nil, err
	}
	return &avroDecoder{ctx: ctx, l: l, reg: reg, parsed: map[uint32]avro.Schema{}, reloaded: map[uint32]bool{}}, nil
}

// record renders r.
func (d *avroDecoder) record(r *log.Record) consumedRecord {
	out := consumedRecord{Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC().Format(time.RFC3339Nano)}
	if len(r.Headers) > 0 {
		out.Headers = make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			out.Headers[h.Key] = headerText(h.Value)
		}
	}
	out.Key, out.KeySchema = d.field(r.Key)
	out.Value, out.ValueSchema = d.field(r.Value)
	return out
}

// print writes r as one JSON line.
func (d *avroDecoder) print(w *bufio.Writer, r *log.Record) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // values as they are: <, > and & too
	if err := enc.Encode(d.record(r)); err != nil {
		_ = enc.Encode(map[string]any{"partition": r.Partition, "offset": r.Offset, "error": err.Error()})
	}
}

// field renders a key or value: null, the decoded Avro record, JSON, or a
// string.
func (d *avroDecoder) field(b []byte) (json.RawMessage, uint32) {
	if b == nil {
		return json.RawMessage("null"), 0
	}
	if id, body, err := schema.ParseFrame(b); err == nil && id > 0 {
		if v, err := d.decode(id, body); err == nil {
			if js, err := json.Marshal(jsonValue(v)); err == nil {
				return js, id
			}
		}
	}
	if json.Valid(b) {
		return json.RawMessage(b), 0
	}
	js, _ := json.Marshal(fieldText(b))
	return js, 0
}

// decode decodes body with schema id, reading the registry again once
// for an id it does not know yet (registered after the command started).
func (d *avroDecoder) decode(id uint32, body []byte) (any, error) {
	sch, ok := d.parsed[id]
	if !ok {
		text, err := d.reg.SchemaByID(id)
		if errors.Is(err, schema.ErrUnknownSchema) && !d.reloaded[id] {
			d.reloaded[id] = true
			if reg, rerr := schema.OpenRegistry(d.ctx, readOnlyStore{d.l}); rerr == nil {
				d.reg = reg
				text, err = reg.SchemaByID(id)
			}
		}
		if err != nil {
			return nil, err
		}
		if sch, err = avro.Parse(text); err != nil {
			return nil, err
		}
		d.parsed[id] = sch
	}
	var v any
	if err := avro.Unmarshal(sch, body, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// jsonValue turns a decoded Avro value into what JSON shows: times as RFC
// 3339, decimals as exact decimal strings, bytes as Avro's JSON encoding
// (one code point per byte).
func jsonValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case time.Duration:
		return x.String()
	case *big.Rat:
		return decimalText(x)
	case []byte:
		return avroBytes(x)
	case [16]byte:
		return avroBytes(x[:])
	}
	return v
}

// decimalText writes r exactly: with the digits its power-of-ten
// denominator needs, else as a fraction.
func decimalText(r *big.Rat) string {
	den := new(big.Int).Set(r.Denom())
	ten, zero := big.NewInt(10), big.NewInt(0)
	digits := 0
	for den.Cmp(big.NewInt(1)) > 0 {
		q, m := new(big.Int).QuoRem(den, ten, new(big.Int))
		if m.Cmp(zero) != 0 {
			return r.RatString()
		}
		den, digits = q, digits+1
	}
	return r.FloatString(digits)
}

// avroBytes is Avro's JSON encoding of bytes: each byte a code point.
func avroBytes(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		s.WriteRune(rune(c))
	}
	return s.String()
}

// fieldText shows bytes as text when they are printable UTF-8, else as
// base64 prefixed "base64:".
func fieldText(b []byte) string {
	s := string(b)
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && !unicode.IsSpace(r) }) {
		return s
	}
	return "base64:" + base64.StdEncoding.EncodeToString(b)
}

// headerText shows a header's value as text when printable, else as hex
// (cdcd's positions are sortable byte strings).
func headerText(b []byte) string {
	s := string(b)
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return s
	}
	return "0x" + hex.EncodeToString(b)
}
