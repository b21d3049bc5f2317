package postgres

import (
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
)

// A loaded row's Avro from its COPY fields (session 20).
//
// An Emitter that prepares rows (source.Preparer) encoded each loaded row
// from its decoded values: schema.AppendKey and AppendEnvelopeHead, two
// type switches and a type assertion a column, the numeric's text parsed
// back into its unscaled integer. The load's worker now writes those
// bytes from the COPY fields (pgdecode.AvroFunc, column by column) into
// the batch's arena and hands them over in Change.Avro; Prepare copies
// them. A column of a type without an AvroFunc is encoded from its
// decoded value (schema.AppendField). A row with a value an AvroFunc
// refuses (NULL in a NOT NULL column, a constrained numeric's NaN or a
// value past int64, a value the decode refuses) or with a fault carries
// none and is encoded from After as before.

// rowTranscoder writes the Avro of one relation's rows.
type rowTranscoder struct {
	table *schema.Table
	// avro is a column's AvroFunc; nil for a column encoded from its
	// decoded value (a type without one).
	avro []pgdecode.AvroFunc
	// nullable is a column's Nullable: read a row's every column, from
	// here rather than from the table's large Column structs.
	nullable []bool
	types    []*pgdecode.Type
	// full: every column has an AvroFunc (a row needs no decoded value).
	full bool
}

// transcoder returns r's row transcoder; nil when no column has an
// AvroFunc, or text must be checked to be UTF-8 (decode does that). A
// column whose table column is not its type's (a version that differs)
// is encoded from its value.
func (r *relation) transcoder() *rowTranscoder {
	if r.checkUTF8 || len(r.types) != len(r.table.Columns) || len(r.table.Key) == 0 {
		return nil
	}
	x := &rowTranscoder{table: r.table, avro: make([]pgdecode.AvroFunc, len(r.types)), nullable: make([]bool, len(r.types))}
	x.types = r.types
	some, full := false, true
	for i, t := range r.types {
		c := &r.table.Columns[i]
		x.nullable[i] = c.Nullable
		if t.Avro == nil || t.Text || c.Kind != t.Col.Kind || c.Precision != t.Col.Precision || c.Scale != t.Col.Scale ||
			c.Elem != nil || t.Col.Elem != nil {
			full = false
			continue
		}
		x.avro[i], some = t.Avro, true
	}
	if !some {
		return nil
	}
	x.full = full
	return x
}

// size is source.RowBytes of the values of a row appendRow wrote (all of
// its columns with an AvroFunc).
func (x *rowTranscoder) size(fields [][]byte) int {
	n := 0
	for i, f := range fields {
		if f == nil {
			n += 64
		} else {
			n += x.types[i].DecodedSize(f)
		}
	}
	return n
}

// presize gives a batch's Avro arena room for the batch, sized from its
// row at [at, len(out)) once: an arena grown by appending was copied again
// and again (session 20).
func (x *rowTranscoder) presize(out []byte, at, rows int) []byte {
	if want := (len(out) - at) * rows * 5 / 4; cap(out) < want {
		out = append(make([]byte, 0, want), out...)
	}
	return out
}

// appendRow appends the key record's body and the envelope's before
// (null) and after of the row whose COPY fields (nil: NULL) are fields and
// whose decoded values are row, and returns where the after part starts;
// ok false, and dst cut back, when some value cannot be written exactly as
// schema.AppendKey and AppendEnvelopeHead write row.
func (x *rowTranscoder) appendRow(dst []byte, fields [][]byte, row []any) (_ []byte, mid int, ok bool) {
	start := len(dst)
	if len(fields) != len(x.avro) || (row != nil || !x.full) && len(row) != len(x.avro) {
		return dst, 0, false
	}
	for _, i := range x.table.Key {
		if dst, ok = x.appendColumn(dst, i, fields[i], row); !ok {
			return dst[:start], 0, false
		}
	}
	mid = len(dst)
	dst = append(dst, 0, 2) // before: null; after: the record's branch
	for i, f := range fields {
		if dst, ok = x.appendColumn(dst, i, f, row); !ok {
			return dst[:start], 0, false
		}
	}
	return dst, mid - start, true
}

// appendColumn writes column i's value (f from the COPY, v decoded) as
// schema's encoding does for a key or row field: a union with null when
// the column is nullable.
func (x *rowTranscoder) appendColumn(dst []byte, i int, f []byte, row []any) ([]byte, bool) {
	avro, nullable := x.avro[i], x.nullable[i]
	if avro == nil {
		v := row[i]
		if schema.IsUnchanged(v) {
			return dst, false
		}
		dst, err := schema.AppendField(dst, &x.table.Columns[i], v)
		return dst, err == nil
	}
	switch {
	case f == nil:
		return append(dst, 0), nullable // NOT NULL without a value: the encoding's error
	case len(f) > source.MaxChangeBytes:
		return dst, false // decode refuses it before copying
	case nullable:
		dst = append(dst, 2)
	}
	return avro(dst, f)
}
