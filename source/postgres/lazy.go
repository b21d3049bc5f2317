package postgres

import (
	"encoding/binary"
	"fmt"

	"github.com/cdcd-dev/cdcd/source"
)

// A loaded row handed over without its values (session 20).
//
// A row whose every value an AvroFunc writes needs no decoded value on
// the way to the log: its key, partition and envelope come from its Avro
// (Change.Avro). For an Emitter that takes such rows (source.LazyTaker)
// the worker leaves After nil and keeps the row's COPY fields in its
// batch buffer; the Emitter decodes them (lazyRow.Decode) only for a row
// it must encode from its values (a held table's, a table version that
// changed, a masked pipeline's). The decode, boxing each value into the
// slab and the numeric's text, was half of a worker's cost a row.

// lazyRow is one such row: its fields, length-prefixed as COPY writes
// them (int32, -1 for NULL), and the slot its values are decoded into.
type lazyRow struct {
	buf *loadBuf
	raw []byte
	row []any
}

var _ source.RowDecoder = (*lazyRow)(nil)

// appendRaw appends fields to raw in COPY's layout and returns the result
// and the row's part of it.
func appendRaw(raw []byte, fields [][]byte) ([]byte, []byte) {
	at := len(raw)
	for _, f := range fields {
		if f == nil {
			raw = binary.BigEndian.AppendUint32(raw, ^uint32(0))
			continue
		}
		raw = append(binary.BigEndian.AppendUint32(raw, uint32(len(f))), f...)
	}
	return raw, raw[at:len(raw):len(raw)]
}

// Decode decodes the row's values into c.After (source.RowDecoder). The
// row's buffer is the Emitter's until its batch is handed back, so its
// slab is free for these values.
func (l *lazyRow) Decode(c *source.Change) error {
	rel := l.buf.rel
	fields := make([][]byte, 0, len(rel.types))
	for b := l.raw; len(b) >= 4; {
		n := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		if n < 0 {
			fields = append(fields, nil)
			continue
		}
		fields, b = append(fields, b[:n:n]), b[n:]
	}
	if err := decodeFieldsInto(rel, fields, l.row, l.buf.slab); err != nil {
		// Every value transcoded, so the decode takes it too.
		return fmt.Errorf("postgres: decode a loaded row of %s: %w", rel.table.QualifiedName(), err)
	}
	c.After = l.row
	return nil
}
