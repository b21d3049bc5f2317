package reconcile

import (
	"fmt"
	"strings"

	"github.com/apache/iceberg-go"
)

// Table is a source table described for a reconcile: the columns compared,
// in the source's column order, and its key.
type Table struct {
	// Name is the table as the source names it ("schema.table" or
	// "db.table"); SQL is its quoted form.
	Name, SQL string
	// From, when set, is the table in a query's FROM (PostgreSQL: ONLY
	// the table's own rows, as cdcd captures them); else SQL.
	From string
	// Columns are the compared columns; Key indexes the key columns among
	// them, in key order.
	Columns []*Column
	Key     []int
	// Skipped are the source's columns that are not compared, and why.
	Skipped []Skipped
	// ColumnHash says a row's hash mixes its columns' hashes (PostgreSQL,
	// rowhash.go) instead of hashing the row's canonical text with
	// Source.RowHash (MySQL).
	ColumnHash bool
	// Ordered says cdcd orders keys as the database does (compareKeys),
	// so a key read from the mirror falls into the range the source read
	// it in. Without it every range that differs is read key by key, and
	// the mirror's files are never pruned by key.
	Ordered bool
}

// Column is one compared column.
type Column struct {
	Name  string
	Canon canonKind
	Scale int     // cDecimal
	Elem  *Column // cList: the elements (a list of lists nests)
	// SQL is the source's expression of the canonical text (NULL when the
	// value is NULL); Lit, for a key column, its text as the source reads
	// it back as a literal of Type.
	SQL, Lit, Type string
	// Show is the source's SQL of the value as the report shows it
	// (MySQL; PostgreSQL prints its own text).
	Show string
	// Hash is how the value enters a PostgreSQL row hash (rowhash.go);
	// Expr is the value's SQL, Text (cText) its text without the length
	// that SQL's canonical text has.
	Hash       colHash
	Expr, Text string
	// canonAt is the SQL of the canonical text of a value of the column
	// given as expr (PostgreSQL).
	canonAt func(expr string) string
	// Mirror is the column's index among the mirror's columns.
	Mirror int
	// Collated: a text key whose order is the database's collation, not
	// byte order.
	Collated bool
}

// Skipped is a source column the reconcile does not compare.
type Skipped struct {
	Column string `json:"column"`
	Why    string `json:"why"`
}

// MirrorColumn is a column of the Iceberg table.
type MirrorColumn struct {
	Name string
	Type iceberg.Type
}

// canonFor is the canonical kind of values of Iceberg type t: how cdcd
// reads them back (sink/iceberg's fromParquet). Lists give their element.
func canonFor(t iceberg.Type) (canonKind, int, iceberg.Type, error) {
	switch t := t.(type) {
	case iceberg.Int32Type, iceberg.Int64Type:
		return cInt, 0, nil, nil
	case iceberg.BooleanType:
		return cBool, 0, nil, nil
	case iceberg.Float32Type:
		return cFloat32, 0, nil, nil
	case iceberg.Float64Type:
		return cFloat64, 0, nil, nil
	case iceberg.DecimalType:
		return cDecimal, t.Scale(), nil, nil
	case iceberg.StringType:
		return cText, 0, nil, nil
	case iceberg.BinaryType:
		return cBytes, 0, nil, nil
	case iceberg.UUIDType:
		return cUUID, 0, nil, nil
	case iceberg.DateType:
		return cDate, 0, nil, nil
	case iceberg.TimeType:
		return cTime, 0, nil, nil
	case iceberg.TimestampType, iceberg.TimestampTzType:
		return cTimestamp, 0, nil, nil
	case *iceberg.ListType:
		return cList, 0, t.Element, nil
	}
	return 0, 0, nil, fmt.Errorf("the Iceberg type %s has no comparison", t)
}

// mirrorIndex finds column name among the mirror's columns; -1 if absent.
func mirrorIndex(cols []MirrorColumn, name string) int {
	for i, c := range cols {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// KeyNames lists the key columns.
func (t *Table) KeyNames() []string {
	out := make([]string, len(t.Key))
	for i, k := range t.Key {
		out[i] = t.Columns[k].Name
	}
	return out
}

// ColumnNames lists the compared columns.
func (t *Table) ColumnNames() []string {
	out := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		out[i] = c.Name
	}
	return out
}

func (t *Table) String() string {
	return fmt.Sprintf("%s (key %s)", t.Name, strings.Join(t.KeyNames(), ", "))
}

// from is t in a query's FROM.
func (t *Table) from() string {
	if t.From != "" {
		return t.From
	}
	return t.SQL
}
