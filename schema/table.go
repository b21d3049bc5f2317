// Package schema is cdcd's table model: columns with logical types and keys,
// the Go representation of each type's values, the Avro schemas derived from
// a table, and the registry that assigns those schemas ids.
//
// Every stage speaks this model: sources translate their database's types
// into it, the log carries it as Avro, and sinks translate it into theirs.
package schema

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Kind is a column's logical type. The Go type a value of each kind has in a
// row ([]any) is given next to it; nil is SQL NULL everywhere.
type Kind uint8

const (
	KindInvalid Kind = iota
	Bool             // bool
	Int16            // int64 (range of int16)
	Int32            // int64 (range of int32)
	Int64            // int64
	Float32          // float32
	Float64          // float64
	// Decimal is exact decimal text ("-12.30"); Precision and Scale are set
	// for numeric(p,s). With Precision 0 the column is unconstrained and its
	// values may also be "NaN", "Infinity" or "-Infinity"; a constrained
	// column may hold "NaN" (PostgreSQL allows it in numeric(p,s)).
	Decimal     // string
	String      // string
	Bytes       // []byte
	JSON        // string (the document's text, byte-exact)
	UUID        // [16]byte
	Date        // int32 days since 1970-01-01
	Time        // int64 microseconds since midnight
	Timestamp   // int64 microseconds since 1970-01-01 00:00:00, no zone
	TimestampTZ // int64 microseconds since 1970-01-01 00:00:00 UTC
	// Interval is a calendar interval whose three parts don't convert into
	// each other (a month has no fixed number of days, nor a day of
	// microseconds across a DST change).
	Interval // IntervalValue
	// List is an array of values of the kind of Column.Elem, in order; an
	// element is nil when NULL. A List column's value is never a nil slice
	// when the array is empty: []any{}.
	List // []any
)

// Date, Timestamp and TimestampTZ values keep PostgreSQL's infinities as
// the extreme values of their Go type, never as NULL or zero.
const (
	DateInfinity           = int32(math.MaxInt32)
	DateMinusInfinity      = int32(math.MinInt32)
	TimestampInfinity      = int64(math.MaxInt64)
	TimestampMinusInfinity = int64(math.MinInt64)
)

var kindNames = [...]string{
	KindInvalid: "invalid", Bool: "bool", Int16: "int16", Int32: "int32", Int64: "int64",
	Float32: "float32", Float64: "float64", Decimal: "decimal", String: "string", Bytes: "bytes",
	JSON: "json", UUID: "uuid", Date: "date", Time: "time", Timestamp: "timestamp",
	TimestampTZ: "timestamptz", Interval: "interval", List: "list",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind is the inverse of Kind.String.
func ParseKind(s string) (Kind, bool) {
	for k, n := range kindNames {
		if n == s && k != int(KindInvalid) {
			return Kind(k), true
		}
	}
	return KindInvalid, false
}

// unchanged is the type of Unchanged.
type unchanged struct{}

func (unchanged) String() string { return "<unchanged>" }

// Unchanged is the value of a column whose value the source did not send
// because it did not change (PostgreSQL's unchanged TOASTed values). Sinks
// take the column's current value; it is never NULL and never a placeholder.
var Unchanged any = unchanged{}

// IsUnchanged reports whether v is Unchanged.
func IsUnchanged(v any) bool { _, ok := v.(unchanged); return ok }

// Column is one column of a table.
type Column struct {
	Name string
	Kind Kind
	// Precision and Scale of a Decimal; Precision 0 means unconstrained.
	Precision, Scale int
	Nullable         bool
	// SourceType is the type as the source database names it, for messages
	// and for consumers that want it ("numeric(12,2)", "varchar(40)").
	SourceType string
	// Elem describes the elements of a List: their Kind (with Precision and
	// Scale, or a further Elem for a list of lists) and, in Nullable,
	// whether an element may be NULL. Nil for every other kind.
	Elem *Column
	// Default is the value rows that predate the column hold (default.go);
	// nil when there is none or it is not known. It is a value of Kind in
	// the Go representation above, of a kind DefaultKind accepts.
	Default any
}

// Equal reports whether two columns are the same, comparing Elem by value.
func (c Column) Equal(o Column) bool {
	if c.Name != o.Name || c.Kind != o.Kind || c.Precision != o.Precision || c.Scale != o.Scale ||
		c.Nullable != o.Nullable || c.SourceType != o.SourceType || (c.Elem == nil) != (o.Elem == nil) || c.Default != o.Default {
		return false
	}
	return c.Elem == nil || c.Elem.Equal(*o.Elem)
}

// TypeString renders the kind with its parameters: "decimal(10,2)",
// "list<int32>".
func (c Column) TypeString() string {
	switch {
	case c.Kind == Decimal && c.Precision > 0:
		return fmt.Sprintf("decimal(%d,%d)", c.Precision, c.Scale)
	case c.Kind == List && c.Elem != nil:
		return "list<" + c.Elem.TypeString() + ">"
	}
	return c.Kind.String()
}

// Table is one version of a source table's shape.
type Table struct {
	// Namespace is the PostgreSQL schema or the MySQL database.
	Namespace string
	Name      string
	Columns   []Column
	// Key holds indexes into Columns of the primary-key columns, in key order.
	Key []int
	// Dropped names the columns earlier versions had and this one lacks
	// because they were dropped at the source: a sink that keeps them gives
	// this version's rows NULL there, not the value rows that predate a
	// column hold (Column.Default). A column missing from a version and not
	// named here was added after it.
	Dropped []string
	// envelope is the layout of the records of the value schema the table
	// was rebuilt from (TableFromValueSchema); the zero value is the layout
	// AppendEnvelope writes with PostgreSQL's source record.
	envelope envelopeLayout
}

// QualifiedName is "namespace.name".
func (t *Table) QualifiedName() string { return t.Namespace + "." + t.Name }

// ColumnIndex returns the index of the column named name, or -1.
func (t *Table) ColumnIndex(name string) int {
	for i := range t.Columns {
		if t.Columns[i].Name == name {
			return i
		}
	}
	return -1
}

// KeyColumns returns the primary-key columns in key order.
func (t *Table) KeyColumns() []Column {
	cols := make([]Column, len(t.Key))
	for i, k := range t.Key {
		cols[i] = t.Columns[k]
	}
	return cols
}

// Equal reports whether two versions have the same shape.
func (t *Table) Equal(o *Table) bool {
	if t.Namespace != o.Namespace || t.Name != o.Name || len(t.Columns) != len(o.Columns) || len(t.Key) != len(o.Key) {
		return false
	}
	for i := range t.Columns {
		if !t.Columns[i].Equal(o.Columns[i]) {
			return false
		}
	}
	for i := range t.Key {
		if t.Key[i] != o.Key[i] {
			return false
		}
	}
	return slices.Equal(t.Dropped, o.Dropped)
}

// WasDropped reports whether column name is one of t.Dropped.
func (t *Table) WasDropped(name string) bool { return slices.Contains(t.Dropped, name) }

// String renders the shape for messages: "public.orders(id int64 key, note string null)".
func (t *Table) String() string {
	var b strings.Builder
	b.WriteString(t.QualifiedName())
	b.WriteByte('(')
	for i, c := range t.Columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.Name)
		b.WriteByte(' ')
		b.WriteString(c.TypeString())
		for _, k := range t.Key {
			if k == i {
				b.WriteString(" key")
			}
		}
		if c.Nullable {
			b.WriteString(" null")
		}
	}
	b.WriteByte(')')
	return b.String()
}

// IntervalValue is the value of an Interval column. PostgreSQL keeps the three
// parts apart and so does cdcd: 1 month is not 30 days, 1 day is not 24
// hours.
type IntervalValue struct {
	Months int32
	Days   int32
	Micros int64
}

// String renders the interval in ISO 8601 the way PostgreSQL does under
// intervalstyle iso_8601 ("P1Y2M3DT4H5M6.5S", "PT0S"; every part carries
// its own sign, as in "P-1M2DT-3H").
func (iv IntervalValue) String() string {
	years, months := iv.Months/12, iv.Months%12
	hours := iv.Micros / 3_600_000_000
	rest := iv.Micros % 3_600_000_000
	mins := rest / 60_000_000
	rest %= 60_000_000
	secs, fsec := rest/1_000_000, rest%1_000_000
	if iv.Months == 0 && iv.Days == 0 && iv.Micros == 0 {
		return "PT0S"
	}
	b := []byte{'P'}
	part := func(v int64, unit byte) {
		if v != 0 {
			b = fmt.Appendf(b, "%d%c", v, unit)
		}
	}
	part(int64(years), 'Y')
	part(int64(months), 'M')
	part(int64(iv.Days), 'D')
	if hours != 0 || mins != 0 || secs != 0 || fsec != 0 {
		b = append(b, 'T')
	}
	part(hours, 'H')
	part(mins, 'M')
	if secs != 0 || fsec != 0 {
		if secs < 0 || fsec < 0 {
			b = append(b, '-')
		}
		b = fmt.Appendf(b, "%d", abs64(secs))
		if fsec != 0 {
			frac := fmt.Sprintf("%06d", abs64(fsec))
			b = append(b, '.')
			b = append(b, strings.TrimRight(frac, "0")...)
		}
		b = append(b, 'S')
	}
	return string(b)
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
