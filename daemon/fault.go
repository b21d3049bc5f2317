package daemon

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// A change that cannot reach its table's topic — the source could not
// read one of its values, or its row cannot be encoded (a NaN in a
// numeric(p,s)) — stops its table (pause.go) and is held as a fault
// record: JSON a person can read, since it has no Avro form.
//
//	key:     the change's key as JSON ({"id": 7}), null when unknown
//	value:   faultDoc as JSON (table, op, position, reason, column, value, fix, rows)
//	headers: cdcd.pos, cdcd.txid, cdcd.fault (faultInfo as JSON)
//
// `cdcd table skip` moves it, unchanged, to the dead-letter topic
// _cdcd_dead.<topic> (read it with cdcd log consume), and the table's
// changes after it flow again.

// deadTopic is where skipped fault records go.
func deadTopic(topic string) string { return "_cdcd_dead." + topic }

// faultInfo is a fault record's cdcd.fault header and what a value pause
// shows.
type faultInfo struct {
	Reason   string `json:"reason"`
	Fix      string `json:"fix"`
	Key      string `json:"key,omitempty"`
	Column   string `json:"column,omitempty"`
	Value    string `json:"value,omitempty"`
	Position string `json:"position"`
}

// faultDoc is a fault record's value.
type faultDoc struct {
	Table      string          `json:"table"`
	Op         string          `json:"op"`
	Position   string          `json:"position"`
	LSN        string          `json:"lsn,omitempty"`
	TxID       uint64          `json:"txid,omitempty"`
	CommitTime time.Time       `json:"commit_time,omitzero"`
	Reason     string          `json:"reason"`
	Column     string          `json:"column,omitempty"`
	Value      string          `json:"value,omitempty"`
	Fix        string          `json:"fix"`
	Before     json.RawMessage `json:"before,omitempty"`
	After      json.RawMessage `json:"after,omitempty"`
}

// valueFault is the fault of a change whose row its encoding refused
// (err from schema.AppendEnvelope or AppendKey); nil when err is not about
// a value.
func valueFault(c *source.Change, err error) *source.Fault {
	if err == nil {
		return nil // every change asks: errors.As's target would be an allocation each
	}
	var ce *schema.ColumnError
	if !errors.As(err, &ce) {
		return nil
	}
	value := valueText(ce.Value)
	return &source.Fault{
		Reason: fmt.Sprintf("table %s: the change at position %s (key %s) cannot be written: %v",
			c.Table.QualifiedName(), hex.EncodeToString(c.Pos), keyText(c), ce.Err),
		Column: ce.Column, Value: value,
		Fix: valueFix(c.Table.QualifiedName()),
	}
}

// valueFix is what resolves a table stopped by a value.
func valueFix(table string) string { return source.ValueFix(table, "") }

// faultRecord encodes c, stopped by f, as a fault record of the holding
// topic (partition 0).
func (e *emitter) faultRecord(c *source.Change, f *source.Fault) (log.Record, error) {
	info := faultInfo{Reason: f.Reason, Fix: f.Fix, Column: f.Column, Value: f.Value, Position: hex.EncodeToString(c.Pos)}
	doc := faultDoc{Table: c.Table.QualifiedName(), Op: string(c.Op), Position: info.Position, TxID: c.TxID, CommitTime: c.CommitTime,
		Reason: f.Reason, Column: f.Column, Value: f.Value, Fix: f.Fix}
	if c.LSN != 0 {
		doc.LSN = formatLSN(c.LSN)
	}
	var key []byte
	if row := rowOf(c); row != nil {
		key = rowJSON(c.Table, row, c.Table.Key)
		info.Key = string(key)
		doc.Before, doc.After = rowJSON(c.Table, c.Before, nil), rowJSON(c.Table, c.After, nil)
	}
	value, err := json.Marshal(doc)
	if err != nil {
		return log.Record{}, err
	}
	h, err := json.Marshal(info)
	if err != nil {
		return log.Record{}, err
	}
	headers := append(e.headers(c), log.Header{Key: schema.HeaderFault, Value: h})
	return log.Record{Key: key, Value: value, Headers: headers, Timestamp: c.CommitTime, Partition: 0}, nil
}

// keyText renders a change's key for messages.
func keyText(c *source.Change) string {
	row := rowOf(c)
	if row == nil {
		return "none"
	}
	return string(rowJSON(c.Table, row, c.Table.Key))
}

// rowJSON renders the columns cols (all when nil) of row as a JSON
// object; nil for a nil row.
func rowJSON(t *schema.Table, row []any, cols []int) json.RawMessage {
	if row == nil {
		return nil
	}
	if cols == nil {
		cols = make([]int, len(row))
		for i := range cols {
			cols[i] = i
		}
	}
	b := []byte{'{'}
	for n, i := range cols {
		if i >= len(row) || i >= len(t.Columns) {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, t.Columns[i].Name)
		b = append(b, ':')
		b = appendJSONValue(b, row[i])
	}
	return append(b, '}')
}

// appendJSONValue writes a decoded value as JSON: numbers as numbers
// (NaN and infinities as strings), bytes as PostgreSQL's \x hex, uuids
// and intervals as text, unchanged TOAST as the string "(unchanged)".
func appendJSONValue(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, v)
	case int64:
		return strconv.AppendInt(b, v, 10)
	case int32:
		return strconv.AppendInt(b, int64(v), 10)
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return strconv.AppendQuote(b, strconv.FormatFloat(v, 'g', -1, 64))
		}
		return strconv.AppendFloat(b, v, 'g', -1, 64)
	case float32:
		return appendJSONValue(b, float64(v))
	case string:
		return appendJSONString(b, v)
	case []byte:
		return strconv.AppendQuote(b, `\x`+hex.EncodeToString(v))
	case [16]byte:
		return strconv.AppendQuote(b, schema.FormatUUID(v))
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONValue(b, e)
		}
		return append(b, ']')
	}
	if schema.IsUnchanged(v) {
		return append(b, `"(unchanged)"`...)
	}
	return appendJSONString(b, fmt.Sprint(v))
}

// appendJSONString writes s as a JSON string; each byte of s that is not
// valid UTF-8 is written as the four characters \xNN, so the text stays
// valid JSON, readable and exact.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(source.Printable(s))
	return append(b, q...)
}

// valueText renders a value for a message (strings as they are).
func valueText(v any) string {
	if s, ok := v.(string); ok {
		// Cloned: the initial load's texts are in a slab it reuses for its
		// next batches, and a pause keeps the value.
		return strings.Clone(source.Printable(s))
	}
	return string(appendJSONValue(nil, v))
}
