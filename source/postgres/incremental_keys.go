package postgres

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Keys between the stream and the incremental snapshot engine: a key's
// values as decoded (int64, [16]byte, []byte, bool, string) and as text
// the server reads back as a literal of the column's type.

// keyText writes key values as text; false for a value of another kind
// (or a NULL, which a key never has).
func keyText(kinds []schema.Kind, vals []any) (snapshot.Key, bool) {
	if len(vals) != len(kinds) {
		return nil, false
	}
	out := make(snapshot.Key, len(vals))
	for i, v := range vals {
		switch v := v.(type) {
		case int64:
			out[i] = strconv.FormatInt(v, 10)
		case [16]byte:
			out[i] = formatUUID(v)
		case []byte:
			out[i] = `\x` + hex.EncodeToString(v)
		case bool:
			out[i] = strconv.FormatBool(v)
		case string:
			out[i] = v
		default:
			return nil, false
		}
	}
	return out, true
}

func formatUUID(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// parseKey reads text key values back (the inverse of keyText).
func parseKey(kinds []schema.Kind, k snapshot.Key) ([]any, bool) {
	if len(k) != len(kinds) {
		return nil, false
	}
	out := make([]any, len(k))
	for i, s := range k {
		v, err := parseKeyValue(kinds[i], s)
		if err != nil {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

func parseKeyValue(kind schema.Kind, s string) (any, error) {
	switch kind {
	case schema.Int16, schema.Int32, schema.Int64:
		return strconv.ParseInt(s, 10, 64)
	case schema.UUID:
		b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
		if err != nil || len(b) != 16 {
			return nil, fmt.Errorf("bad uuid %q", s)
		}
		return [16]byte(b), nil
	case schema.Bytes:
		return hex.DecodeString(strings.TrimPrefix(s, `\x`))
	case schema.Bool:
		return s == "true" || s == "t", nil
	case schema.String, schema.Decimal:
		return s, nil
	}
	return nil, fmt.Errorf("no key text for %s", kind)
}

// compareKeys orders key values as PostgreSQL orders the key (the caller
// checked the kinds and collations with keyFuncs and keyOrdered).
func compareKeys(kinds []schema.Kind, a, b []any) int {
	for i := range kinds {
		if c := compareValue(a[i], b[i]); c != 0 {
			return c
		}
	}
	return 0
}

func compareValue(a, b any) int {
	switch a := a.(type) {
	case int64:
		if b, ok := b.(int64); ok {
			return cmp.Compare(a, b)
		}
	case [16]byte:
		if b, ok := b.([16]byte); ok {
			return bytes.Compare(a[:], b[:])
		}
	case []byte:
		if b, ok := b.([]byte); ok {
			return bytes.Compare(a, b)
		}
	case bool:
		if b, ok := b.(bool); ok {
			switch {
			case a == b:
				return 0
			case !a:
				return -1
			}
			return 1
		}
	case string:
		if b, ok := b.(string); ok {
			return strings.Compare(a, b)
		}
	}
	return 0
}

// dbOrder orders keys by asking the database, for keys whose order only it
// knows (text under a linguistic collation, numeric): one query a
// comparison, on a connection of its own (opened at the first one). It is
// used only while a replacing snapshot runs, for updates that carry an
// unchanged value.
type dbOrder struct {
	dsn   string
	sql   string // $1..$n the first key's text, $n+1..$2n the second's
	kinds []schema.Kind

	mu   sync.Mutex
	conn *pgx.Conn
}

func newDBOrder(dsn string, ct *catalogTable, t *schema.Table, collate []string) *dbOrder {
	n := len(ct.key)
	side := func(base int) string {
		parts := make([]string, n)
		for i, k := range ct.key {
			parts[i] = fmt.Sprintf("$%d::%s%s", base+i+1, ct.column(k).typeName, collate[i])
		}
		return "(" + strings.Join(parts, ", ") + ")"
	}
	a, b := side(0), side(n)
	return &dbOrder{dsn: dsn, kinds: keyKinds(t),
		sql: "SELECT CASE WHEN " + a + " < " + b + " THEN -1 WHEN " + a + " = " + b + " THEN 0 ELSE 1 END"}
}

// compare orders key values a and b as the database orders the key.
func (o *dbOrder) compare(a, b []any) (int, error) {
	ta, ok1 := keyText(o.kinds, a)
	tb, ok2 := keyText(o.kinds, b)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("postgres: a key value without text")
	}
	args := make([]any, 0, 2*len(ta))
	for _, s := range ta {
		args = append(args, s)
	}
	for _, s := range tb {
		args = append(args, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conn == nil {
		conn, err := pgx.Connect(ctx, o.dsn)
		if err != nil {
			return 0, err
		}
		o.conn = conn
	}
	var c int
	if err := o.conn.QueryRow(ctx, o.sql, args...).Scan(&c); err != nil {
		o.conn.Close(context.Background())
		o.conn = nil
		return 0, err
	}
	return c, nil
}

func (o *dbOrder) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conn != nil {
		o.conn.Close(context.Background())
		o.conn = nil
	}
}
