// Package mirror compares a PostgreSQL table with its Iceberg mirror (an
// upsert table) row by row: the source read with SQL, the mirror read with
// iceberg-go's own scan, both rendered to text by one rule per type and
// matched by primary key. Tests use it to decide whether a pipeline ended in
// a correct mirror; it reads whole tables into memory.
package mirror

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"
)

// Null renders SQL NULL on both sides.
const Null = "∅"

// Rows maps a rendered primary key to its row (column name → rendered value).
type Rows map[string]map[string]string

// Diff is what differs between a source table and its mirror.
type Diff struct {
	Table        string
	SourceRows   int
	IcebergRows  int
	Missing      []string // keys in the source, not in Iceberg
	Extra        []string // keys in Iceberg, not in the source
	Differ       []string // "key k column c: Iceberg has …, the source …"
	Duplicates   []string // keys Iceberg holds more than once
	MissingCols  []string // source columns the Iceberg table lacks
	ComparedCols []string
}

// Equal reports whether the mirror equals the source.
func (d *Diff) Equal() bool {
	return len(d.Missing)+len(d.Extra)+len(d.Differ)+len(d.Duplicates)+len(d.MissingCols) == 0
}

// String summarises d: counts, then up to 10 examples of each kind.
func (d *Diff) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: source %d rows, Iceberg %d rows: %d missing in Iceberg, %d extra, %d differing values, %d duplicate keys",
		d.Table, d.SourceRows, d.IcebergRows, len(d.Missing), len(d.Extra), len(d.Differ), len(d.Duplicates))
	list := func(what string, s []string) {
		for i, v := range s {
			if i == 10 {
				fmt.Fprintf(&b, "\n  … %d more %s", len(s)-10, what)
				break
			}
			fmt.Fprintf(&b, "\n  %s: %s", what, v)
		}
	}
	list("missing column", d.MissingCols)
	list("missing key", d.Missing)
	list("extra key", d.Extra)
	list("duplicate key", d.Duplicates)
	list("differs", d.Differ)
	return b.String()
}

// Compare reads sourceTable ("schema.table", quoted as needed by the
// caller) through conn and tbl through iceberg-go's scan, and returns what
// differs in the source's current columns (the mirror may keep dropped
// columns; they are not compared). The source table needs a primary key.
func Compare(ctx context.Context, conn *pgx.Conn, sourceTable string, tbl *table.Table) (*Diff, error) {
	want, cols, keys, err := SourceRows(ctx, conn, sourceTable)
	if err != nil {
		return nil, err
	}
	return compareRows(ctx, sourceTable, want, cols, keys, tbl)
}

// compareRows compares source rows (want, with its columns and key
// columns) with tbl read through iceberg-go's scan.
func compareRows(ctx context.Context, sourceTable string, want Rows, cols, keys []string, tbl *table.Table) (*Diff, error) {
	got, icols, dups, n, err := IcebergRows(ctx, tbl, keys)
	if err != nil {
		return nil, err
	}
	d := &Diff{Table: sourceTable, SourceRows: len(want), IcebergRows: n, Duplicates: dups, ComparedCols: cols}
	have := map[string]bool{}
	for _, c := range icols {
		have[c] = true
	}
	var present []string
	for _, c := range cols {
		if have[c] {
			present = append(present, c)
		} else {
			d.MissingCols = append(d.MissingCols, c)
		}
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			d.Missing = append(d.Missing, k)
			continue
		}
		for _, c := range present {
			if g[c] != w[c] {
				d.Differ = append(d.Differ, fmt.Sprintf("key %s column %s: Iceberg has %q, the source %q", k, c, Abbrev(g[c]), Abbrev(w[c])))
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d.Extra = append(d.Extra, k)
		}
	}
	sort.Strings(d.Missing)
	sort.Strings(d.Extra)
	sort.Strings(d.Differ)
	return d, nil
}

// Abbrev shortens long values for messages.
func Abbrev(s string) string {
	if len(s) > 80 {
		return fmt.Sprintf("%s…(%d bytes)", s[:60], len(s))
	}
	return s
}

// keySep joins the rendered values of a composite key.
const keySep = "|"

// SourceRows reads tbl ("schema.table") with every column rendered as
// Render renders the Iceberg value, keyed by its primary key. It returns
// the rows, the column names in order and the key columns.
func SourceRows(ctx context.Context, conn *pgx.Conn, tbl string) (Rows, []string, []string, error) {
	rows, err := conn.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typcategory, coalesce(i.indisprimary, false)
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary AND a.attnum = ANY(i.indkey)
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, tbl)
	if err != nil {
		return nil, nil, nil, err
	}
	var cols, exprs, keys []string
	for rows.Next() {
		var name, typ, cat string
		var pk bool
		if err := rows.Scan(&name, &typ, &cat, &pk); err != nil {
			return nil, nil, nil, err
		}
		cols = append(cols, name)
		if pk {
			keys = append(keys, name)
		}
		exprs = append(exprs, sourceExpr(pgx.Identifier{name}.Sanitize(), typ, cat))
	}
	if err := rows.Err(); err != nil {
		return nil, nil, nil, err
	}
	if len(cols) == 0 {
		return nil, nil, nil, fmt.Errorf("mirror: %s has no columns (does it exist?)", tbl)
	}
	if len(keys) == 0 {
		return nil, nil, nil, fmt.Errorf("mirror: %s has no primary key", tbl)
	}
	// Intervals as cdcd writes them (ISO 8601), whatever the session's style.
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL intervalstyle = iso_8601; SET LOCAL TimeZone = 'UTC'"); err != nil {
		return nil, nil, nil, err
	}
	rows, err = tx.Query(ctx, "SELECT "+strings.Join(exprs, ", ")+" FROM "+tbl)
	if err != nil {
		return nil, nil, nil, err
	}
	defer rows.Close()
	out := Rows{}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, nil, nil, err
		}
		row := make(map[string]string, len(cols))
		for i, v := range vals {
			switch v := v.(type) {
			case nil:
				row[cols[i]] = Null
			case string:
				row[cols[i]] = v
			case float64:
				row[cols[i]] = strconv.FormatFloat(v, 'g', -1, 64)
			case float32:
				row[cols[i]] = strconv.FormatFloat(float64(v), 'g', -1, 32)
			default:
				return nil, nil, nil, fmt.Errorf("mirror: %s.%s: unexpected %T", tbl, cols[i], v)
			}
		}
		out[keyOf(row, keys)] = row
	}
	return out, cols, keys, rows.Err()
}

// sourceExpr renders one column in SQL the way Render renders its Iceberg
// value (docs/types.md has the mapping).
func sourceExpr(col, typ, cat string) string {
	switch {
	case typ == "timestamp with time zone" || typ == "timestamp without time zone" ||
		strings.HasPrefix(typ, "timestamp(") || typ == "time without time zone":
		return fmt.Sprintf("(extract(epoch FROM %s) * 1000000)::numeric(30,0)::text", col)
	case typ == "date":
		return fmt.Sprintf("(%s - date '1970-01-01')::text", col)
	case typ == "bytea":
		return fmt.Sprintf("encode(%s, 'hex')", col)
	case typ == "double precision" || typ == "real":
		return col // rendered from the float
	case cat == "A": // arrays: JSON on both sides
		return fmt.Sprintf("to_json(%s)::text", col)
	}
	return col + "::text"
}

func keyOf(row map[string]string, keys []string) string {
	if len(keys) == 1 {
		return row[keys[0]]
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = row[k]
	}
	return strings.Join(parts, keySep)
}

// IcebergRows reads tbl with iceberg-go's scan and keys its rows by keys.
// It returns the rows, the table's columns, the keys seen more than once
// and the number of rows read.
func IcebergRows(ctx context.Context, tbl *table.Table, keys []string) (Rows, []string, []string, int, error) {
	at, err := tbl.Scan().ToArrowTable(ctx)
	if err != nil {
		return nil, nil, nil, 0, fmt.Errorf("mirror: scan %s: %w", strings.Join(tbl.Identifier(), "."), err)
	}
	defer at.Release()
	var cols []string
	for _, f := range at.Schema().Fields() {
		cols = append(cols, f.Name)
	}
	out := Rows{}
	var dups []string
	n := 0
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			row := make(map[string]string, len(cols))
			for j, name := range cols {
				row[name] = Render(rec.Column(j), i)
			}
			n++
			k := keyOf(row, keys)
			if _, dup := out[k]; dup {
				dups = append(dups, k)
			}
			out[k] = row
		}
	}
	return out, cols, dups, n, nil
}

// Render renders one Arrow value the way SourceRows renders PostgreSQL's.
func Render(a arrow.Array, i int) string {
	if a.IsNull(i) {
		return Null
	}
	switch a := a.(type) {
	case *array.Int16:
		return strconv.FormatInt(int64(a.Value(i)), 10)
	case *array.Int32:
		return strconv.FormatInt(int64(a.Value(i)), 10)
	case *array.Int64:
		return strconv.FormatInt(a.Value(i), 10)
	case *array.String:
		return a.Value(i)
	case *array.LargeString:
		return a.Value(i)
	case *array.Boolean:
		return strconv.FormatBool(a.Value(i))
	case *array.Float32:
		return strconv.FormatFloat(float64(a.Value(i)), 'g', -1, 32)
	case *array.Float64:
		return strconv.FormatFloat(a.Value(i), 'g', -1, 64)
	case *array.Decimal128:
		return a.Value(i).ToString(a.DataType().(*arrow.Decimal128Type).Scale)
	case *array.Date32:
		return strconv.FormatInt(int64(a.Value(i)), 10)
	case *array.Time64:
		return strconv.FormatInt(int64(a.Value(i)), 10)
	case *array.Timestamp:
		if u := a.DataType().(*arrow.TimestampType).Unit; u != arrow.Microsecond {
			return fmt.Sprintf("<timestamp in %s>", u)
		}
		return strconv.FormatInt(int64(a.Value(i)), 10)
	case *array.Binary:
		return hex.EncodeToString(a.Value(i))
	case *array.LargeBinary:
		return hex.EncodeToString(a.Value(i))
	case array.ListLike:
		return renderList(a, i)
	case array.ExtensionArray: // uuid
		return a.ValueStr(i)
	}
	return fmt.Sprintf("<%T>", a)
}

// renderList renders a list as to_json renders a PostgreSQL array.
func renderList(a array.ListLike, i int) string {
	start, end := a.ValueOffsets(i)
	vals := a.ListValues()
	elems := make([]json.RawMessage, 0, end-start)
	for j := start; j < end; j++ {
		elems = append(elems, jsonValue(vals, int(j)))
	}
	b, _ := json.Marshal(elems)
	return string(b)
}

func jsonValue(a arrow.Array, i int) json.RawMessage {
	if a.IsNull(i) {
		return json.RawMessage("null")
	}
	var v any
	switch a := a.(type) {
	case *array.String:
		v = a.Value(i)
	case *array.LargeString:
		v = a.Value(i)
	case *array.Boolean:
		v = a.Value(i)
	case array.ListLike:
		return json.RawMessage(renderList(a, i))
	default:
		return json.RawMessage(Render(a, i))
	}
	b, _ := json.Marshal(v)
	return b
}
