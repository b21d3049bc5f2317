package schema

import (
	"encoding/binary"
	"fmt"
)

// EnvelopeInfo is what a consumer can learn from an envelope without
// decoding its rows: enough to route, order and fold changes, deferring
// the rows until (and unless) they are needed.
type EnvelopeInfo struct {
	Op                  byte
	HasBefore, HasAfter bool
	// Unchanged counts the columns listed as not sent by the source.
	Unchanged int
	TsMs      int64 // source commit time
	TxID, LSN uint64
	// Position aliases the scanned buffer.
	Position []byte
	// After is the after-image's Avro bytes (its union branch, then the
	// row record), aliasing the scanned buffer, so a reader can decode the
	// row without the rest of the envelope; nil without an after-image and
	// in cdcd's legacy layout (whose fields are all unions).
	After []byte
	// SnapshotEnd: source.snapshot says the row is the last of its table's
	// snapshot or of the whole snapshot (SnapshotLastInColl, SnapshotLast).
	SnapshotEnd bool
}

// ScanEnvelope reads an envelope of t like DecodeEnvelope, but skips the
// rows' values instead of materializing them: it allocates nothing.
func ScanEnvelope(t *Table, buf []byte) (EnvelopeInfo, error) {
	r := newReader(buf)
	var e EnvelopeInfo
	if t.envelope == layoutLegacy {
		r.scanLegacy(t, &e)
	} else {
		r.scan(t, &e)
	}
	if r.err == nil && r.left() != 0 {
		r.fail(fmt.Errorf("schema: %d trailing bytes after envelope", r.left()))
	}
	if r.err != nil {
		return EnvelopeInfo{}, fmt.Errorf("schema: scan %s envelope: %w", t.QualifiedName(), r.err)
	}
	return e, nil
}

// scan reads Debezium's layout.
func (r *reader) scan(t *Table, e *EnvelopeInfo) {
	e.HasBefore = r.skipRow(t, false)
	after := r.pos
	if e.HasAfter = r.skipRow(t, false); e.HasAfter && r.err == nil {
		e.After = r.buf[after:r.pos]
	}
	r.bytes() // version
	r.bytes() // connector
	r.bytes() // name
	e.TsMs = r.long()
	switch r.long() { // snapshot: [string, null]
	case 0:
		s := r.bytes()
		e.SnapshotEnd = string(s) == SnapshotLastInColl || string(s) == SnapshotLast
	case 1:
	default:
		r.fail(fmt.Errorf("schema: snapshot: bad union index"))
	}
	r.bytes()        // db
	r.skipOptBytes() // sequence
	r.optLong()      // ts_us
	r.optLong()      // ts_ns
	if t.envelope == layoutMySQL {
		r.skipOptBytes() // table
		r.long()         // server_id
		r.skipOptBytes() // gtid
		r.bytes()        // file
		r.long()         // pos
		r.int()          // row
		r.optLong()      // thread
		r.skipOptBytes() // query
	} else {
		r.bytes() // schema
		r.bytes() // table
		tx, _ := r.optLong()
		e.TxID = uint64(tx)
		lsn, _ := r.optLong()
		e.LSN = uint64(lsn)
		r.optLong() // xmin
	}
	switch r.long() { // transaction
	case 0:
	case 1:
		r.bytes()
		r.long()
		r.long()
	default:
		r.fail(fmt.Errorf("schema: transaction: bad union index"))
	}
	e.Op = r.op()
	r.optLong() // ts_ms
	r.optLong() // ts_us
	r.optLong() // ts_ns
	e.Unchanged = r.countNames()
	r.countNames() // absent
	e.Position = r.bytes()
}

// countNames skips an array of strings and counts them.
func (r *reader) countNames() int {
	n := 0
	r.names(func(string) bool { n++; return true })
	return n
}

func (r *reader) skipOptBytes() {
	switch r.long() {
	case 0:
	case 1:
		r.bytes()
	default:
		r.fail(fmt.Errorf("schema: bad union index"))
	}
}

// skipRow skips a nullable row record; it reports whether one was there.
// legacy: every field is a union.
//
// The sink's fetcher scans every record, so the common encodings take a
// fast path over a local copy of the unread bytes (buf, at r.pos): a union
// branch in one byte, a varint, a value shorter than 64 bytes (a one-byte
// length). Anything else (a longer length, a non-minimal branch, a kind
// without a skipper, the end of the buffer) goes through the reader's
// checked calls, which fail as they always did.
func (r *reader) skipRow(t *Table, legacy bool) bool {
	switch r.long() {
	case 0:
		return false
	case 1:
	default:
		r.fail(fmt.Errorf("schema: bad union index"))
		return false
	}
	if r.err != nil {
		return false
	}
	buf := r.buf[r.pos:] // the reader is moved to buf's start before a checked call, and buf taken from it after
	for i := range t.Columns {
		c := &t.Columns[i] // not copied: a Column is about 100 bytes, a row scan's main cost once
		if legacy || c.Nullable {
			if len(buf) > 0 && buf[0] == 0 { // branch 0: null
				buf = buf[1:]
				continue
			}
			if len(buf) > 0 && buf[0] == 2 { // branch 1: the value
				buf = buf[1:]
			} else {
				r.pos = len(r.buf) - len(buf)
				switch r.long() {
				case 0:
					buf = r.buf[r.pos:]
					continue
				case 1:
				default:
					r.fail(fmt.Errorf("schema: column %q: bad union index", c.Name))
					return false
				}
				if r.err != nil {
					return false
				}
				buf = r.buf[r.pos:]
			}
		}
		if n := skipFast(buf, c.Kind); n > 0 {
			buf = buf[n:]
			continue
		}
		r.pos = len(r.buf) - len(buf)
		r.skipValue(c)
		if r.err != nil {
			return false
		}
		buf = r.buf[r.pos:]
	}
	r.pos = len(r.buf) - len(buf)
	return true
}

// skipFast returns the length of the value of kind k at the start of buf
// when it is one of the common encodings, else 0 (the caller then reads
// it the checked way).
func skipFast(buf []byte, k Kind) int {
	switch k {
	case Int16, Int32, Int64, Date, Time, Timestamp, TimestampTZ:
		for i := 0; i < len(buf) && i < binary.MaxVarintLen64-1; i++ { // a tenth byte may overflow: checked way
			if buf[i] < 0x80 {
				return i + 1
			}
		}
	case String, JSON, Bytes, Decimal, UUID:
		if len(buf) > 0 && buf[0] < 0x80 && buf[0]&1 == 0 { // a length of 0 to 63, zigzag
			if n := 1 + int(buf[0]>>1); n <= len(buf) {
				return n
			}
		}
	case Float64:
		if len(buf) >= 8 {
			return 8
		}
	case Float32:
		if len(buf) >= 4 {
			return 4
		}
	case Bool:
		if len(buf) >= 1 {
			return 1
		}
	}
	return 0
}

// skipValue skips one non-null value of column c.
func (r *reader) skipValue(c *Column) {
	switch c.Kind {
	case Bool:
		r.take(1)
	case Int16, Int32, Int64, Date, Time, Timestamp, TimestampTZ:
		r.long()
	case Float32:
		r.take(4)
	case Float64:
		r.take(8)
	case String, JSON, Bytes, Decimal, UUID:
		r.bytes()
	default:
		r.value(*c) // kinds without a skipper: decode and drop
	}
}
