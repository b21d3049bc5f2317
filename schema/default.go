package schema

import (
	"fmt"
	"math"
	"strconv"
)

// A column's Default is the value the rows that existed before the column
// was added hold although no change was ever sent for them: PostgreSQL's
// fast default (pg_attribute.attmissingval, filled in by ALTER TABLE … ADD
// COLUMN … DEFAULT without rewriting the table), MariaDB's instant ADD
// COLUMN. A sink that can give the column this value for rows written
// before it existed (Iceberg's initial-default, format 3) keeps such rows
// right without reading them again.
//
// In the Avro schemas it travels as the field property
// "cdcd.initial_default", the value's text (DefaultText): the Avro
// "default" of a nullable field must stay null.

const propInitialDefault = "cdcd.initial_default"

// DefaultKind reports whether a column of kind k may carry a Default: the
// scalar kinds, whose Go values compare with ==.
func DefaultKind(k Kind) bool {
	switch k {
	case Bool, Int16, Int32, Int64, Float32, Float64, Decimal, String, JSON, UUID, Date, Time, Timestamp, TimestampTZ:
		return true
	}
	return false
}

// DefaultText renders v, a value of c's kind, as the property's text:
// integers (dates as days, times and timestamps as microseconds) and
// floats in decimal, a UUID in its canonical form, text as is.
func DefaultText(c Column, v any) (string, error) {
	bad := fmt.Errorf("schema: column %q: default %v (%T) is not a %s value", c.Name, v, v, c.Kind)
	switch x := v.(type) {
	case bool:
		if c.Kind == Bool {
			return strconv.FormatBool(x), nil
		}
	case int64:
		switch c.Kind {
		case Int16, Int32, Int64, Time, Timestamp, TimestampTZ:
			return strconv.FormatInt(x, 10), nil
		}
	case int32:
		if c.Kind == Date {
			return strconv.FormatInt(int64(x), 10), nil
		}
	case float32:
		if c.Kind == Float32 {
			return strconv.FormatFloat(float64(x), 'g', -1, 32), nil
		}
	case float64:
		if c.Kind == Float64 {
			return strconv.FormatFloat(x, 'g', -1, 64), nil
		}
	case string:
		switch c.Kind {
		case Decimal, String, JSON:
			return x, nil
		}
	case [16]byte:
		if c.Kind == UUID {
			return FormatUUID(x), nil
		}
	}
	return "", bad
}

// ParseDefault is DefaultText's inverse for a column of c's kind.
func ParseDefault(c Column, s string) (any, error) {
	var v any
	var err error
	switch c.Kind {
	case Bool:
		v, err = strconv.ParseBool(s)
	case Int16, Int32, Int64, Time, Timestamp, TimestampTZ:
		v, err = strconv.ParseInt(s, 10, 64)
	case Date:
		var n int64
		n, err = strconv.ParseInt(s, 10, 32)
		v = int32(n)
	case Float32:
		var f float64
		f, err = strconv.ParseFloat(s, 32)
		v = float32(f)
	case Float64:
		v, err = strconv.ParseFloat(s, 64)
	case Decimal, String, JSON:
		v = s
	case UUID:
		u, ok := parseUUID([]byte(s))
		if !ok {
			err = fmt.Errorf("not a UUID")
		}
		v = u
	default:
		err = fmt.Errorf("a %s column has no default", c.Kind)
	}
	if err != nil {
		return nil, fmt.Errorf("schema: column %q: %s %q: %w", c.Name, propInitialDefault, s, err)
	}
	return v, nil
}

// FiniteDefault reports whether v is not a float NaN or infinity, which
// JSON (and so a table format's metadata) cannot hold.
func FiniteDefault(v any) bool {
	switch f := v.(type) {
	case float32:
		return !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0)
	case float64:
		return !math.IsNaN(f) && !math.IsInf(f, 0)
	}
	return true
}
