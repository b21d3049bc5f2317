package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// The pieces of the incremental, lock-free load (DBLog) that need a MySQL
// server: chunks selected by primary-key range with their bounds computed
// in SQL, and watermarks written to a table whose rows the stream
// recognises (watermark.go). The shared engine in package source drives
// them.

// Chunk is one primary-key range of a table, read in key order.
type Chunk struct {
	// Rows in key order, in the table model (the table's current
	// description, Table).
	Rows [][]any
	// Last is the key of the last row; nil when the range was empty (the
	// table is done).
	Last []any
}

// chunkSQL is the SELECT of the rows after key `after` (none: from the
// start), at most limit of them, in key order. The chunk's upper bound is
// computed by the server within the same statement (ORDER BY key LIMIT),
// so no bound is read first and then used in a second query.
func chunkSQL(d *tableDesc, after bool) string {
	var b strings.Builder
	b.WriteString("SELECT ")
	for i := range d.cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(selectExpr(&d.cols[i], quoteIdent(d.cols[i].Name)))
	}
	b.WriteString(" FROM ")
	b.WriteString(quoteIdent(d.db) + "." + quoteIdent(d.name))
	keys := make([]string, len(d.table.Key))
	marks := make([]string, len(d.table.Key))
	for i, k := range d.table.Key {
		keys[i] = quoteIdent(d.cols[k].Name)
		marks[i] = "?"
	}
	if after {
		// A row comparison: (a, b) > (?, ?) in key order.
		fmt.Fprintf(&b, " WHERE (%s) > (%s)", strings.Join(keys, ", "), strings.Join(marks, ", "))
	}
	fmt.Fprintf(&b, " ORDER BY %s LIMIT ?", strings.Join(keys, ", "))
	return b.String()
}

// keyArg converts a key value of the table model back to a query argument.
func keyArg(t *colType, v any) any {
	switch v := v.(type) {
	case []byte:
		return v
	case string:
		return v
	}
	switch t.Base {
	case "date", "datetime", "timestamp", "time":
		return renderTemporal(t, v)
	}
	return v
}

// readChunk reads the rows of d after key after (nil: from the start), at
// most limit, in key order.
func readChunk(ctx context.Context, db *sql.DB, d *tableDesc, after []any, limit int) (Chunk, error) {
	args := make([]any, 0, len(after)+1)
	for i, v := range after {
		args = append(args, keyArg(&d.cols[d.table.Key[i]], v))
	}
	args = append(args, limit)
	rows, err := db.QueryContext(ctx, chunkSQL(d, after != nil), args...)
	if err != nil {
		return Chunk{}, fmt.Errorf("mysql: read a chunk of %s: %w", d.qualified(), err)
	}
	defer rows.Close()
	var ch Chunk
	raw := make([]sql.RawBytes, len(d.cols))
	ptrs := make([]any, len(raw))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return Chunk{}, fmt.Errorf("mysql: read a chunk of %s: %w", d.qualified(), err)
		}
		row := make([]any, len(raw))
		for i, b := range raw {
			v, err := fromText(&d.cols[i], b)
			if err != nil {
				return Chunk{}, &ValueError{Table: d.qualified(), Column: d.cols[i].Name, Type: d.cols[i].SourceType, Err: err}
			}
			row[i] = v
		}
		ch.Rows = append(ch.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return Chunk{}, fmt.Errorf("mysql: read a chunk of %s: %w", d.qualified(), err)
	}
	if n := len(ch.Rows); n > 0 {
		last := ch.Rows[n-1]
		for _, k := range d.table.Key {
			ch.Last = append(ch.Last, last[k])
		}
	}
	return ch, nil
}
