package schema

// Values written where a row field needs one but the source sent none: the
// type's zero in a NOT NULL column (also the field's Avro default), and
// Debezium's placeholder for an unchanged text or bytes value. The
// envelope names those columns (absent, unchanged), so a reader that knows
// the lists never takes these for values.

// zeroUUID is the nil UUID's text.
const zeroUUID = "00000000-0000-0000-0000-000000000000"

// fillDefault is the Avro default (JSON) of c's required field: its type's
// zero, the value appendFill writes.
func fillDefault(c Column) any {
	switch c.Kind {
	case Bool:
		return false
	case Float32, Float64:
		return 0.0
	case Decimal:
		if c.Precision == 0 {
			return "0"
		}
		return "\x00" // bytes: one zero byte, the unscaled 0
	case String, Bytes:
		return ""
	case JSON:
		return "null"
	case UUID:
		return zeroUUID
	case Interval:
		return map[string]any{"months": 0, "days": 0, "micros": 0}
	case List:
		return []any{}
	}
	return 0 // the integers, dates, times and timestamps
}

// appendFill writes the zero of c's type (fillDefault's value).
func appendFill(dst []byte, c *Column) []byte {
	switch c.Kind {
	case Bool:
		return append(dst, 0)
	case Float32:
		return append(dst, 0, 0, 0, 0)
	case Float64:
		return append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	case Decimal:
		if c.Precision == 0 {
			return appendString(dst, "0")
		}
		return appendBytes(dst, []byte{0})
	case String, Bytes:
		return appendLong(dst, 0)
	case JSON:
		return appendString(dst, "null")
	case UUID:
		return appendString(dst, zeroUUID)
	case Interval:
		return append(dst, 0, 0, 0)
	case List:
		return appendLong(dst, 0)
	}
	return appendLong(dst, 0)
}

// standsIn reports whether an unchanged value of c is written as
// UnavailableValue: text, JSON, unconstrained numerics and bytes, as
// Debezium does.
func standsIn(c *Column) bool {
	switch c.Kind {
	case String, JSON, Bytes:
		return true
	case Decimal:
		return c.Precision == 0
	}
	return false
}

// appendStandIn writes what an unchanged value of c holds: Debezium's
// placeholder where it has one, else null (a nullable column) or the zero.
func appendStandIn(dst []byte, c *Column) []byte {
	switch {
	case standsIn(c):
		if c.Nullable {
			dst = appendLong(dst, 1)
		}
		return appendString(dst, UnavailableValue)
	case c.Nullable:
		return appendLong(dst, 0)
	}
	return appendFill(dst, c)
}
