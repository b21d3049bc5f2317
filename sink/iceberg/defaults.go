package iceberg

import (
	"encoding/json"
	"slices"

	"github.com/apache/iceberg-go"
	"github.com/google/uuid"

	"github.com/cdcd-dev/cdcd/schema"
)

// Columns added with a default (schema.Column.Default): rows that existed
// before the column hold the default in the source, and no change is ever
// sent for them. On format 3 the column is added with the default as its
// initial-default, which readers give every row of a data file written
// before the column existed; the sink's own readers (compaction, unchanged
// values) and rows of an older table version written after the column was
// added take it the same way. Format 2 has no initial-default: the source
// reads the table's rows again instead (source/postgres defaults.go).
//
// Only defaults whose JSON form in the table metadata every reader agrees
// on are given: booleans, integers that survive a float64 (iceberg-go
// reads metadata numbers as float64), finite floats, text and UUIDs. A
// decimal, date, time or timestamp default is not (iceberg-go v0.7.0
// writes and reads them in other forms than the spec's), nor is it on
// format 2: those tables are read again.

// maxExactInt is the largest integer a float64 holds exactly.
const maxExactInt = 1 << 53

// HoldsDefault reports whether a table of format version formatVersion
// gives c.Default to rows written before c existed.
func HoldsDefault(formatVersion int, c schema.Column) bool {
	return formatVersion >= 3 && defaultLiteral(c) != nil
}

// defaultLiteral is c.Default as the literal of c's Iceberg type, nil when
// the sink does not give it as an initial-default.
func defaultLiteral(c schema.Column) iceberg.Literal {
	if c.Default == nil || !schema.FiniteDefault(c.Default) {
		return nil
	}
	switch c.Kind {
	case schema.Bool:
		return iceberg.NewLiteral(c.Default.(bool))
	case schema.Int16, schema.Int32:
		return iceberg.NewLiteral(int32(c.Default.(int64)))
	case schema.Int64:
		if n := c.Default.(int64); n <= maxExactInt && n >= -maxExactInt {
			return iceberg.NewLiteral(n)
		}
	case schema.Float32:
		return iceberg.NewLiteral(c.Default.(float32))
	case schema.Float64:
		return iceberg.NewLiteral(c.Default.(float64))
	case schema.String, schema.JSON:
		return iceberg.NewLiteral(c.Default.(string))
	case schema.Decimal:
		if c.Precision == 0 || c.Precision > 38 { // exact text (icebergType)
			return iceberg.NewLiteral(c.Default.(string))
		}
	case schema.UUID:
		return iceberg.NewLiteral(uuid.UUID(c.Default.([16]byte)))
	}
	return nil
}

// initialValue is f's initial-default as the sink's readers give values of
// f's type (fromParquet), nil when it has none or one of a form the sink
// does not read (such a column reads as NULL in files that lack it). The
// metadata may hold it as iceberg-go put it (typed) or as JSON decoded it.
func initialValue(f iceberg.NestedField) any {
	v := f.InitialDefault
	if v == nil {
		return nil
	}
	num := func() (float64, bool) {
		switch n := v.(type) {
		case float64:
			return n, true
		case float32:
			return float64(n), true
		case int32:
			return float64(n), true
		case int64:
			return float64(n), true
		case json.Number:
			x, err := n.Float64()
			return x, err == nil
		}
		return 0, false
	}
	switch f.Type.(type) {
	case iceberg.BooleanType:
		if b, ok := v.(bool); ok {
			return b
		}
	case iceberg.Int32Type:
		if n, ok := num(); ok {
			return int64(n)
		}
	case iceberg.Int64Type:
		if n, ok := v.(int64); ok {
			return n
		}
		if n, ok := num(); ok {
			return int64(n)
		}
	case iceberg.Float32Type:
		if n, ok := num(); ok {
			return float32(n)
		}
	case iceberg.Float64Type:
		if n, ok := num(); ok {
			return n
		}
	case iceberg.StringType:
		if s, ok := v.(string); ok {
			return s
		}
	case iceberg.UUIDType:
		switch u := v.(type) {
		case uuid.UUID:
			return [16]byte(u)
		case string:
			if p, err := uuid.Parse(u); err == nil {
				return [16]byte(p)
			}
		}
	}
	return nil
}

// rowDefaults is what rows of version t hold in the fields t lacks, given
// initial (initialValues of fields): the initial-default of a column added
// after t (the rows predate it at the source), NULL in a column t's source
// dropped (Table.Dropped), where a reader would otherwise fill in the
// initial-default of a file lacking it. initial itself when t dropped none.
func rowDefaults(t *schema.Table, fields []iceberg.NestedField, initial []any) []any {
	if len(t.Dropped) == 0 {
		return initial
	}
	out := slices.Clone(initial)
	for i, f := range fields {
		if t.WasDropped(f.Name) {
			out[i] = nil
		}
	}
	return out
}

// initialValues is initialValue of each field.
func initialValues(fields []iceberg.NestedField) []any {
	out := make([]any, len(fields))
	for i, f := range fields {
		out[i] = initialValue(f)
	}
	return out
}
