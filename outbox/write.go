package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Dialect is the SQL a Writer speaks.
type Dialect int

const (
	// PostgreSQL: $n placeholders, "quoted" names, jsonb payloads; logical
	// decoding messages.
	PostgreSQL Dialect = iota
	// MySQL and MariaDB: ? placeholders, `quoted` names, JSON payloads.
	MySQL
)

// Writer writes events into the outbox inside a service's transaction:
// as rows of the outbox table, or as transactional logical decoding
// messages (PostgreSQL's pg_logical_emit_message), which leave no row
// behind. The zero value writes rows of PostgreSQL's public.outbox with
// Debezium's column names.
type Writer struct {
	// Table is the outbox table, "schema.table" (PostgreSQL; a bare name
	// is public.name) or "database.table" / "table" (MySQL); default
	// "outbox". Must be the table outbox.table names in cdcd's config.
	Table string
	// MessagePrefix, when set, writes each event as a logical decoding
	// message with this prefix instead of a row (outbox.message_prefix in
	// cdcd's config). PostgreSQL only.
	MessagePrefix string
	// Columns names the table's columns; zero fields take Debezium's
	// names. Must match outbox.columns in cdcd's config.
	Columns Columns
	// Delete removes the rows again in the same transaction, right after
	// inserting them: the table stays empty (no bloat, no clean-up job),
	// and the relay still sees the inserts.
	Delete bool
	// Dialect is PostgreSQL (default) or MySQL.
	Dialect Dialect
}

// Write writes events into the default outbox (Writer's zero value:
// rows of public.outbox with Debezium's columns) in tx. tx is a pgx.Tx
// or a *sql.Tx: the events commit or roll back with the service's own
// changes.
func Write(ctx context.Context, tx any, events ...Event) error {
	return Writer{}.Write(ctx, tx, events...)
}

// execer runs one statement in a transaction.
type execer func(ctx context.Context, query string, args ...any) error

func execerOf(tx any) (execer, error) {
	switch t := tx.(type) {
	case pgx.Tx:
		return func(ctx context.Context, q string, args ...any) error { _, err := t.Exec(ctx, q, args...); return err }, nil
	case *sql.Tx:
		return func(ctx context.Context, q string, args ...any) error {
			_, err := t.ExecContext(ctx, q, args...)
			return err
		}, nil
	}
	return nil, fmt.Errorf("outbox: Write needs the service's transaction, a pgx.Tx or a *sql.Tx; got %T", tx)
}

// Write writes events in tx (a pgx.Tx or a *sql.Tx), in order: the relay
// delivers them in this order per aggregate.
func (w Writer) Write(ctx context.Context, tx any, events ...Event) error {
	exec, err := execerOf(tx)
	if err != nil {
		return err
	}
	for i := range events {
		if err := events[i].check(); err != nil {
			return err
		}
	}
	if len(events) == 0 {
		return nil
	}
	cols := w.Columns.WithDefaults()
	if w.MessagePrefix != "" {
		if w.Dialect != PostgreSQL {
			return fmt.Errorf("outbox: logical decoding messages (MessagePrefix) are PostgreSQL's; write rows of a table on MySQL")
		}
		for i := range events {
			content, err := events[i].message(cols)
			if err != nil {
				return fmt.Errorf("outbox: encode event %s: %w", events[i].ID, err)
			}
			if err := exec(ctx, "SELECT pg_logical_emit_message(true, $1::text, $2::text)", w.MessagePrefix, string(content)); err != nil {
				return fmt.Errorf("outbox: emit event %s as a logical decoding message: %w", events[i].ID, err)
			}
		}
		return nil
	}
	// A bound on parameters per statement (PostgreSQL's limit is 65535).
	const maxParams = 30000
	names := w.columnNames(cols, events)
	per := max(1, maxParams/len(names))
	for start := 0; start < len(events); start += per {
		chunk := events[start:min(len(events), start+per)]
		q, args := w.insert(cols, names, chunk)
		if err := exec(ctx, q, args...); err != nil {
			return fmt.Errorf("outbox: insert %d events into %s: %w", len(chunk), w.table(), err)
		}
		if w.Delete {
			q, args := w.delete(cols, chunk)
			if err := exec(ctx, q, args...); err != nil {
				return fmt.Errorf("outbox: delete the %d events just inserted into %s: %w", len(chunk), w.table(), err)
			}
		}
	}
	return nil
}

// columnNames lists the columns an insert sets: the five event columns,
// then every Extra key of any event, sorted.
func (w Writer) columnNames(cols Columns, events []Event) []string {
	names := []string{cols.ID, cols.AggregateType, cols.AggregateID, cols.Type, cols.Payload}
	var extra []string
	for i := range events {
		for k := range events[i].Extra {
			if !slices.Contains(extra, k) && !slices.Contains(names, k) {
				extra = append(extra, k)
			}
		}
	}
	slices.Sort(extra)
	return append(names, extra...)
}

func (w Writer) insert(cols Columns, names []string, events []Event) (string, []any) {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(w.table())
	b.WriteString(" (")
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(w.quote(n))
	}
	b.WriteString(") VALUES ")
	args := make([]any, 0, len(names)*len(events))
	for i := range events {
		ev := &events[i]
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for j, n := range names {
			if j > 0 {
				b.WriteString(", ")
			}
			var v any
			switch j {
			case 0:
				v = ev.ID
			case 1:
				v = ev.AggregateType
			case 2:
				v = ev.AggregateID
			case 3:
				v = ev.Type
			case 4:
				v = ev.payloadText()
			default:
				v = ev.Extra[n]
			}
			args = append(args, v)
			b.WriteString(w.placeholder(len(args)))
		}
		b.WriteByte(')')
	}
	return b.String(), args
}

func (w Writer) delete(cols Columns, events []Event) (string, []any) {
	var b strings.Builder
	b.WriteString("DELETE FROM ")
	b.WriteString(w.table())
	b.WriteString(" WHERE ")
	b.WriteString(w.quote(cols.ID))
	b.WriteString(" IN (")
	args := make([]any, len(events))
	for i := range events {
		if i > 0 {
			b.WriteString(", ")
		}
		args[i] = events[i].ID
		b.WriteString(w.placeholder(i + 1))
	}
	b.WriteByte(')')
	return b.String(), args
}

func (w Writer) placeholder(n int) string {
	if w.Dialect == MySQL {
		return "?"
	}
	return "$" + strconv.Itoa(n)
}

// table is the outbox table's name, quoted.
func (w Writer) table() string {
	t := w.Table
	if t == "" {
		t = "outbox"
	}
	parts := strings.SplitN(t, ".", 2)
	if len(parts) == 1 && w.Dialect == PostgreSQL {
		parts = []string{"public", parts[0]}
	}
	for i, p := range parts {
		parts[i] = w.quote(unquote(p))
	}
	return strings.Join(parts, ".")
}

// quote quotes an identifier for the dialect.
func (w Writer) quote(name string) string {
	if w.Dialect == MySQL {
		return "`" + strings.ReplaceAll(name, "`", "``") + "`"
	}
	return pgx.Identifier{name}.Sanitize()
}

// unquote strips one level of SQL double quotes ("Order Items").
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"' || s[0] == '`' && s[len(s)-1] == '`') {
		return strings.ReplaceAll(s[1:len(s)-1], s[:1]+s[:1], s[:1])
	}
	return s
}

// DDL returns the statement that creates the outbox table the Writer
// writes, with Debezium's columns (or the Writer's names): the event id as
// the primary key, the aggregate type and id, the event type and a JSON
// payload. Extra columns are the service's to add.
func (w Writer) DDL() string {
	c := w.Columns.WithDefaults()
	q := w.quote
	if w.Dialect == MySQL {
		return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n  %s CHAR(36) NOT NULL PRIMARY KEY,\n  %s VARCHAR(255) NOT NULL,\n"+
			"  %s VARCHAR(255) NOT NULL,\n  %s VARCHAR(255) NOT NULL,\n  %s JSON\n)", w.table(), q(c.ID), q(c.AggregateType),
			q(c.AggregateID), q(c.Type), q(c.Payload))
	}
	return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n  %s uuid PRIMARY KEY,\n  %s text NOT NULL,\n"+
		"  %s text NOT NULL,\n  %s text NOT NULL,\n  %s jsonb\n)", w.table(), q(c.ID), q(c.AggregateType),
		q(c.AggregateID), q(c.Type), q(c.Payload))
}
