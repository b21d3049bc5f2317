package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
)

// A value cdcd cannot carry exactly — a timestamp past year 294247, an
// array of other dimensions than its column declares, text that is not
// UTF-8 in a SQL_ASCII database — does not stop the reader: its change is
// emitted with a source.Fault naming the table, key, column and value,
// and the emitter pauses that table alone. The value's text comes from the
// server (a cast of its binary form to text), as PostgreSQL prints it.

// errInvalidUTF8: a text value is not UTF-8; Iceberg and Avro strings
// must be.
var errInvalidUTF8 = errors.New("postgres: text is not valid UTF-8 (the database's encoding is SQL_ASCII, which stores bytes unchecked); Iceberg strings must be UTF-8")

// validText reports whether every string in v (a decoded value; lists
// recursively) is valid UTF-8.
func validText(v any) bool {
	switch v := v.(type) {
	case string:
		return utf8.ValidString(v)
	case []any:
		for _, e := range v {
			if !validText(e) {
				return false
			}
		}
	}
	return true
}

// valueRenderer prints faulty values through the server, on a connection
// of its own (the load's are busy copying); at most maxRenders per
// session, then a value is shown as hex.
type valueRenderer struct {
	dsn  string
	mu   sync.Mutex
	conn *pgx.Conn
	left int
}

const maxRenders = 1000

func newValueRenderer(dsn string) *valueRenderer { return &valueRenderer{dsn: dsn, left: maxRenders} }

// text prints the binary value raw of type oid as PostgreSQL does.
func (v *valueRenderer) text(ctx context.Context, oid uint32, raw []byte) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	hexed := fmt.Sprintf(`\x%x (binary form of type oid %d)`, raw, oid)
	if v.left <= 0 {
		return hexed
	}
	v.left--
	if v.conn == nil {
		conn, err := pgx.Connect(ctx, v.dsn)
		if err != nil {
			return hexed
		}
		v.conn = conn
	}
	res := v.conn.PgConn().ExecParams(ctx, "SELECT $1::text", [][]byte{raw}, []uint32{oid}, []int16{1}, []int16{0}).Read()
	if res.Err != nil || len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
		return hexed
	}
	return source.Printable(string(res.Rows[0][0]))
}

func (v *valueRenderer) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.conn != nil {
		_ = v.conn.Close(context.Background())
		v.conn = nil
	}
}

// fault is the source.Fault of a change of rel whose value ve cdcd cannot
// carry.
func (r *Reader) fault(ctx context.Context, rel *relation, ve *ValueError) *source.Fault {
	var tooLarge *source.TooLargeError
	value := source.Printable(string(ve.Raw))
	if errors.As(ve.Err, &tooLarge) {
		value = fmt.Sprintf("(%d bytes, left out)", tooLarge.Bytes)
	} else if !rel.types[ve.Index].Text && !errors.Is(ve.Err, errInvalidUTF8) {
		value = r.render.text(ctx, rel.oids[ve.Index], ve.Raw)
	}
	hint := ""
	switch {
	case tooLarge != nil:
		hint = fmt.Sprintf("make the value smaller, %d MiB at most, or exclude or hash the column with masking", source.MaxChangeBytes>>20)
	case errors.Is(ve.Err, pgdecode.ErrTimestampRange):
		hint = "a time after 294247-01-10 has no microseconds since 1970 in a 64-bit integer: set it to 'infinity' or an earlier time"
	case errors.Is(ve.Err, pgdecode.ErrArrayShape):
		hint = "declare the column with the value's dimensions, or reshape the value"
	case errors.Is(ve.Err, errInvalidUTF8):
		hint = "convert the column's text to UTF-8 in the source"
	}
	return &source.Fault{
		Reason: fmt.Sprintf("table %s: column %q (%s) holds %s, which cdcd cannot carry exactly: %v", ve.Table, ve.Column, ve.Type, value, ve.Err),
		Column: ve.Column, Value: value, Fix: source.ValueFix(ve.Table, hint),
	}
}

// asValueError returns err's *ValueError, if it is one. A nil err returns
// at once: the stream asks for every row, and errors.As's target escapes
// (an allocation a call, two or three a change).
func asValueError(err error) *ValueError {
	if err == nil {
		return nil
	}
	var ve *ValueError
	if errors.As(err, &ve) {
		return ve
	}
	return nil
}
