// Package schema is cdcd's table model: columns with logical types and keys,
// the Go representation of each type's values, the Avro schemas derived from
// a table, and the registry that assigns those schemas ids.
//
// Every stage speaks this model: sources translate their database's types
// into it, the log carries it as Avro, and sinks translate it into theirs.
package schema

import (
	"fmt"
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
	// values may also be "NaN", "Infinity" or "-Infinity".
	Decimal     // string
	String      // string
	Bytes       // []byte
	JSON        // string (the document's text, byte-exact)
	UUID        // [16]byte
	Date        // int32 days since 1970-01-01
	Time        // int64 microseconds since midnight
	Timestamp   // int64 microseconds since 1970-01-01 00:00:00, no zone
	TimestampTZ // int64 microseconds since 1970-01-01 00:00:00 UTC
)

var kindNames = [...]string{
	KindInvalid: "invalid", Bool: "bool", Int16: "int16", Int32: "int32", Int64: "int64",
	Float32: "float32", Float64: "float64", Decimal: "decimal", String: "string", Bytes: "bytes",
	JSON: "json", UUID: "uuid", Date: "date", Time: "time", Timestamp: "timestamp",
	TimestampTZ: "timestamptz",
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
}

// Table is one version of a source table's shape.
type Table struct {
	// Namespace is the PostgreSQL schema or the MySQL database.
	Namespace string
	Name      string
	Columns   []Column
	// Key holds indexes into Columns of the primary-key columns, in key order.
	Key []int
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
		if t.Columns[i] != o.Columns[i] {
			return false
		}
	}
	for i := range t.Key {
		if t.Key[i] != o.Key[i] {
			return false
		}
	}
	return true
}

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
		b.WriteString(c.Kind.String())
		if c.Kind == Decimal && c.Precision > 0 {
			fmt.Fprintf(&b, "(%d,%d)", c.Precision, c.Scale)
		}
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
