// Package mask transforms captured rows before they are encoded, so that
// masked values never reach the log, the Iceberg tables or any other file
// cdcd writes. Per table, a column is excluded (absent from the schema and
// every row), hashed (the lowercase hex HMAC-SHA256 of its value's text,
// keyed with a salt: a string column whose equal values stay equal), or
// redacted (a string column whose non-NULL values are "***").
//
// A Masker maps each version of a table (*schema.Table) to its masked
// version once and keeps the mapping, so the masked version is a stable
// pointer too: downstream caches keyed by table version keep working, and
// the Avro schemas registered for it describe the masked columns.
package mask

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// Redacted is the value of a redacted column.
const Redacted = "***"

// ErrRule: a masking rule does not fit the table it names (an unknown
// column, or a key column excluded or redacted). The wrapping error names
// the table, the column and what to do.
var ErrRule = errors.New("mask: rule does not fit the table")

// Rules are the masking rules of one table.
type Rules struct {
	// Exclude, Hash and Redact name columns; a column is in one list only.
	Exclude, Hash, Redact []string
}

// action is what happens to one column.
type action uint8

const (
	keep action = iota
	exclude
	hashed
	redact
)

// version is one table version and its masked counterpart.
type version struct {
	out  *schema.Table
	src  []int    // out column -> source column
	acts []action // per out column
}

// Masker applies rules per table. It is safe for concurrent use.
type Masker struct {
	rules map[string]Rules // "schema.table"

	mu       sync.Mutex
	mac      hash.Hash
	versions map[*schema.Table]*version // nil value: the table is not masked
}

// New returns a Masker for rules keyed by "schema.table". salt keys the
// HMAC of hashed columns.
func New(salt []byte, rules map[string]Rules) *Masker {
	return &Masker{rules: rules, mac: hmac.New(sha256.New, salt), versions: map[*schema.Table]*version{}}
}

// Table returns the masked version of t (t itself when t is not masked).
func (m *Masker) Table(t *schema.Table) (*schema.Table, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, err := m.versionLocked(t)
	if err != nil || v == nil {
		return t, err
	}
	return v.out, nil
}

// Change returns c masked: c itself when its table is not masked, else a
// copy with the masked table version and new rows (c is not modified).
func (m *Masker) Change(c *source.Change) (*source.Change, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, err := m.versionLocked(c.Table)
	if err != nil || v == nil {
		return c, err
	}
	out := *c
	out.Table = v.out
	out.Before = m.rowLocked(v, c.Before)
	out.After = m.rowLocked(v, c.After)
	return &out, nil
}

// Masks reports whether rules exclude, hash or redact column of table
// ("schema.table").
func (m *Masker) Masks(table, column string) bool {
	r := m.rules[table]
	return slices.Contains(r.Exclude, column) || slices.Contains(r.Hash, column) || slices.Contains(r.Redact, column)
}

func (m *Masker) versionLocked(t *schema.Table) (*version, error) {
	if v, ok := m.versions[t]; ok {
		return v, nil
	}
	r, ok := m.rules[t.QualifiedName()]
	if !ok {
		m.versions[t] = nil
		return nil, nil
	}
	v, err := plan(t, r)
	if err != nil {
		return nil, err
	}
	m.versions[t] = v
	return v, nil
}

// plan builds the masked version of t.
func plan(t *schema.Table, r Rules) (*version, error) {
	acts := make([]action, len(t.Columns))
	for _, l := range []struct {
		cols []string
		act  action
		verb string
	}{{r.Exclude, exclude, "excluded"}, {r.Hash, hashed, "hashed"}, {r.Redact, redact, "redacted"}} {
		for _, name := range l.cols {
			i := t.ColumnIndex(name)
			if i < 0 {
				return nil, fmt.Errorf("%w: %s has no column %q to be %s; fix the name in masking (cdcd stops rather than write a column it was told to mask)", ErrRule, t.QualifiedName(), name, l.verb)
			}
			acts[i] = l.act
		}
	}
	for _, k := range t.Key {
		if a := acts[k]; a == exclude || a == redact {
			verb := map[action]string{exclude: "excluded", redact: "redacted"}[a]
			return nil, fmt.Errorf("%w: %s: the primary-key column %q cannot be %s (rows are placed and merged by their key); hash it instead", ErrRule, t.QualifiedName(), t.Columns[k].Name, verb)
		}
	}
	v := &version{out: &schema.Table{Namespace: t.Namespace, Name: t.Name}}
	newIndex := make([]int, len(t.Columns))
	for i, col := range t.Columns {
		newIndex[i] = -1
		switch acts[i] {
		case exclude:
			continue
		case hashed:
			col = schema.Column{Name: col.Name, Kind: schema.String, Nullable: col.Nullable, SourceType: "hmac_sha256(" + col.SourceType + ")"}
		case redact:
			col = schema.Column{Name: col.Name, Kind: schema.String, Nullable: col.Nullable, SourceType: "redacted(" + col.SourceType + ")"}
		}
		newIndex[i] = len(v.out.Columns)
		v.out.Columns = append(v.out.Columns, col)
		v.src = append(v.src, i)
		v.acts = append(v.acts, acts[i])
	}
	for _, k := range t.Key {
		v.out.Key = append(v.out.Key, newIndex[k])
	}
	return v, nil
}

// rowLocked masks one row; nil stays nil.
func (m *Masker) rowLocked(v *version, row []any) []any {
	if row == nil {
		return nil
	}
	out := make([]any, len(v.src))
	for i, si := range v.src {
		val := row[si]
		if val == nil || schema.IsUnchanged(val) {
			out[i] = val // NULL stays NULL; unchanged TOAST is taken from the masked table
			continue
		}
		switch v.acts[i] {
		case hashed:
			out[i] = m.hashLocked(val)
		case redact:
			out[i] = Redacted
		default:
			out[i] = val
		}
	}
	return out
}

func (m *Masker) hashLocked(val any) string {
	m.mac.Reset()
	switch x := val.(type) {
	case []byte:
		m.mac.Write(x)
	default:
		m.mac.Write([]byte(Text(val)))
	}
	return hex.EncodeToString(m.mac.Sum(nil))
}

// Hash returns what a hashed column holds for a value whose text is text
// (the HMAC-SHA256 of text keyed with salt, in lowercase hex), for checks
// and for computing the same hash elsewhere.
func Hash(salt []byte, text []byte) string {
	mac := hmac.New(sha256.New, salt)
	mac.Write(text)
	return hex.EncodeToString(mac.Sum(nil))
}

// Text is the text of a value that Hash keys: strings (text, decimals,
// JSON) as they are, integers in decimal, floats in the shortest form that
// reads back, booleans as true/false, UUIDs in canonical form. Bytes are
// hashed raw. Values of other Go types use fmt's %v.
func Text(val any) string {
	switch x := val.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case float64:
		return formatFloat(x, 64)
	case float32:
		return formatFloat(float64(x), 32)
	case bool:
		return strconv.FormatBool(x)
	case [16]byte:
		return schema.FormatUUID(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprint(val)
}

func formatFloat(f float64, bits int) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return fmt.Sprint(f)
	}
	return strconv.FormatFloat(f, 'g', -1, bits)
}
