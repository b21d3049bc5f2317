package daemon

import (
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// The largest change cdcd carries is the largest record of its log: a
// change is one record (its key, Debezium envelope with the row before and
// after, headers), at most log.MaxRecordBytes (64 MiB). PostgreSQL allows
// values up to 1 GB; a change whose row does not fit stops its table like
// any value cdcd cannot carry (a fault: fault.go, pause.go), and its fault
// record holds the row without its large values. The limit is also what
// bounds memory: a value passes through a few copies on its way from the
// replication connection into the log and several more (decoding, Parquet
// pages, compression) on its way into a data file.

// maxRowBytes bounds the row values of one change (before and after, as
// source.Change.Bytes counts them): what a record holds besides them (the
// envelope's other fields, the source block, the key and the headers) fits
// in the rest of a log record. The readers refuse a larger value before
// they copy it (source.TooLargeError).
const maxRowBytes = source.MaxChangeBytes

// The limit leaves 64 KiB of a log record for the rest (compile-time).
const _ = uint(log.MaxRecordBytes - maxRowBytes - 64<<10)

// maxKeptArena bounds the encoding arena the emitter keeps for the next
// batch: a batch with a large value grows it, and its bytes would stay.
const maxKeptArena = 2 * source.BatchBytes

// shownValueBytes: a fault record of a change too large for the log keeps
// the values of at most this many bytes (the key's always).
const shownValueBytes = 1 << 10

// recordLimit is a log whose records are smaller than the embedded log's
// (Kafka: the producer's and the brokers' message size limits).
type recordLimit interface{ MaxRecordBytes() int }

// maxRow is the most row data one change may carry into e's log.
func (e *emitter) maxRow() int {
	if l, ok := e.lg.(recordLimit); ok {
		return min(maxRowBytes, l.MaxRecordBytes()-64<<10)
	}
	return maxRowBytes
}

// oversized returns c when its rows fit in a record of e's log; otherwise
// a copy carrying a fault that names the table, key and largest columns,
// without the values over shownValueBytes.
func (e *emitter) oversized(c *source.Change) *source.Change {
	if c.Fault != nil {
		return c
	}
	size, limit := c.Bytes(), e.maxRow()
	if size <= limit {
		return c
	}
	out := *c
	cols := map[int]int{} // column -> bytes of its largest value
	trim := func(row []any) []any {
		if row == nil {
			return nil
		}
		row = append([]any(nil), row...)
		for i, v := range row {
			n := source.ValueBytes(v)
			if n <= shownValueBytes || isKeyColumn(c.Table, i) {
				continue
			}
			switch v := v.(type) { // the value's own size, for the message
			case string:
				n = len(v)
			case []byte:
				n = len(v)
			}
			cols[i] = max(cols[i], n)
			row[i] = nil
		}
		return row
	}
	out.Before, out.After = trim(c.Before), trim(c.After)
	out.Fault = tooLarge(c, size, limit, cols)
	return &out
}

// tooLarge is the fault of change c whose rows take size bytes, more than
// limit; cols are the columns of its values left out of the fault record,
// with their sizes.
func tooLarge(c *source.Change, size, limit int, cols map[int]int) *source.Fault {
	order := make([]int, 0, len(cols))
	for i := range cols {
		order = append(order, i)
	}
	sort.Slice(order, func(a, b int) bool { return cols[order[a]] > cols[order[b]] })
	var parts []string
	for _, i := range order {
		parts = append(parts, fmt.Sprintf("column %s holds %d bytes", c.Table.Columns[i].Name, cols[i]))
	}
	f := &source.Fault{
		Reason: fmt.Sprintf("table %s: the change at position %s (key %s) is about %d bytes, more than a change can be in cdcd's log (%d bytes): %s",
			c.Table.QualifiedName(), hex.EncodeToString(c.Pos), keyText(c), size, limit, strings.Join(parts, ", ")),
		Fix: source.ValueFix(c.Table.QualifiedName(), fmt.Sprintf("make its values smaller, %d bytes a row at most, or exclude or hash the large column with masking", limit)),
	}
	if len(order) > 0 {
		f.Column = c.Table.Columns[order[0]].Name
		f.Value = fmt.Sprintf("(%d bytes, left out)", cols[order[0]])
	}
	return f
}

func isKeyColumn(t *schema.Table, i int) bool {
	for _, k := range t.Key {
		if k == i {
			return true
		}
	}
	return false
}
