package schema

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
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
	return scanEnvelope(t, buf, true)
}

// scanEnvelope is ScanEnvelope; fast false reads the envelope's tail the
// checked way only (the fuzz test holds the two ways to the same result).
func scanEnvelope(t *Table, buf []byte, fast bool) (EnvelopeInfo, error) {
	return scanEnvelopeWith(nil, t, buf, fast)
}

// An EnvelopeScanner is ScanEnvelope for the records of one reader in
// turn (a table's fetcher): it keeps the last envelope's tail up to its
// position, and an envelope whose tail starts with the same bytes takes
// that tail's values instead of reading them again. Records one batch of
// the emitter encoded for one source transaction or load chunk share that
// part of their tail byte for byte — the source block (the connector, the
// table, the commit or snapshot time, the LSN), the op, the batch's ts_ms
// — and differ in their positions, which end the envelope: an initial
// load's records then cost a comparison of about a hundred bytes where
// their twenty-odd values were read one by one (about 0.16 CPU-µs a row,
// 7% of the daemon's CPU in cdcd bench's load). Identical bytes read from
// the same table's layout give identical values and end at the same
// index, so the result is what ScanEnvelope gives; the position is still
// read, and must end the buffer. A stream's MySQL changes of one row
// event differ before their positions only in the source block's row
// index: the tail is remembered around it, and a tail that repeats the
// bytes on either side with any valid row index between (read and checked
// as scanTailFast reads it; no value is taken from it) is answered too.
// The zero value is ready; not safe for concurrent use.
type EnvelopeScanner struct {
	t    *Table
	tail []byte       // the last full scan's tail before its position (a copy)
	info EnvelopeInfo // that tail's values
	// rowAt and rowEnd bound the MySQL source block's row index in tail
	// (its varint; rowAt -1 in other layouts): the hole a tail of the
	// same row event fills with its own row (repeats).
	rowAt, rowEnd int
	// Hits counts the envelopes whose tail was the last one's (tests).
	Hits int64
}

// Scan is ScanEnvelope(t, buf).
func (s *EnvelopeScanner) Scan(t *Table, buf []byte) (EnvelopeInfo, error) {
	return scanEnvelopeWith(s, t, buf, true)
}

// scanEnvelopeWith is scanEnvelope with s's memory (s may be nil).
func scanEnvelopeWith(s *EnvelopeScanner, t *Table, buf []byte, fast bool) (EnvelopeInfo, error) {
	r := newReader(buf)
	var e EnvelopeInfo
	if t.envelope == layoutLegacy {
		r.scanLegacy(t, &e)
	} else {
		r.scan(t, &e, fast, s)
	}
	if r.err == nil && r.left() != 0 {
		r.fail(fmt.Errorf("schema: %d trailing bytes after envelope", r.left()))
	}
	if r.err != nil {
		return EnvelopeInfo{}, fmt.Errorf("schema: scan %s envelope: %w", t.QualifiedName(), r.err)
	}
	return e, nil
}

// scan reads Debezium's layout; s, when not nil, remembers the tail read
// the fast way and answers a tail that repeats it (EnvelopeScanner).
func (r *reader) scan(t *Table, e *EnvelopeInfo, fast bool, s *EnvelopeScanner) {
	e.HasBefore = r.skipRow(t, false)
	after := r.pos
	if e.HasAfter = r.skipRow(t, false); e.HasAfter && r.err == nil {
		e.After = r.buf[after:r.pos]
	}
	if r.err != nil {
		r.scanTail(t, e) // fails as it always did
		return
	}
	if s != nil && s.t == t && len(s.tail) > 0 {
		rest := r.buf[r.pos:]
		if at, ok := s.repeats(rest); ok {
			if pos, end := bytesAt(rest, at); end == len(rest) {
				e.TsMs, e.SnapshotEnd, e.TxID, e.LSN, e.Op, e.Unchanged = s.info.TsMs, s.info.SnapshotEnd, s.info.TxID, s.info.LSN, s.info.Op, s.info.Unchanged
				e.Position = pos
				r.pos = len(r.buf)
				s.Hits++
				return
			}
		}
	}
	start := r.pos
	if fast {
		if posAt, rowAt, rowEnd, ok := r.scanTailFast(t.envelope == layoutMySQL, e); ok {
			if s != nil && r.pos == len(r.buf) {
				s.t, s.info, s.rowAt, s.rowEnd = t, *e, rowAt, rowEnd
				s.tail = append(s.tail[:0], r.buf[start:start+posAt]...)
			}
			return
		}
	}
	r.scanTail(t, e)
}

// repeats reports whether rest, what follows a record's images, starts
// with the remembered tail — its row index, if it has one, any int a
// varint holds there — and where its position starts.
func (s *EnvelopeScanner) repeats(rest []byte) (int, bool) {
	if s.rowAt < 0 {
		n := len(s.tail)
		return n, len(rest) > n && string(rest[:n]) == string(s.tail)
	}
	if len(rest) <= s.rowAt || string(rest[:s.rowAt]) != string(s.tail[:s.rowAt]) {
		return 0, false
	}
	row, j := longAt(rest, s.rowAt)
	if j < 0 || row < math.MinInt32 || row > math.MaxInt32 {
		return 0, false
	}
	suffix := s.tail[s.rowEnd:]
	if len(rest)-j <= len(suffix) || string(rest[j:j+len(suffix)]) != string(suffix) {
		return 0, false
	}
	return j + len(suffix), true
}

// scanTail reads what follows the images, the checked way.
func (r *reader) scanTail(t *Table, e *EnvelopeInfo) {
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

// scanTailFast reads what follows the images (the source block, the
// transaction, op, the times, the unchanged and absent names, the
// position) over the buffer with a local index, without the reader's
// per-value error checks: about twenty values a change, which the checked
// calls (scanTail) made about two thirds of a scan's cost. It sets e and
// moves the reader only when every value is in its common form; anything
// else (a bad union branch, a short buffer, an overlong varint, an int out
// of range, an op not of one letter) returns false with nothing changed,
// and the checked way reads the tail again and fails as it always did.
// posAt is where the position starts, from where the tail did; rowAt and
// rowEnd bound a MySQL source block's row index likewise (-1 in others).
// FuzzScanEnvelope holds the two ways to the same results.
func (r *reader) scanTailFast(mysql bool, e *EnvelopeInfo) (posAt, rowAt, rowEnd int, ok bool) {
	b, i := r.buf, r.pos
	start := i
	rowAt, rowEnd = -1, -1
	var v EnvelopeInfo
	var n int64
	var x []byte
	i = skipBytesAt(b, i) // version
	i = skipBytesAt(b, i) // connector
	i = skipBytesAt(b, i) // name
	v.TsMs, i = longAt(b, i)
	switch n, i = longAt(b, i); n { // snapshot: [string, null]
	case 0:
		x, i = bytesAt(b, i)
		v.SnapshotEnd = string(x) == SnapshotLastInColl || string(x) == SnapshotLast
	case 1:
	default:
		return 0, 0, 0, false
	}
	i = skipBytesAt(b, i)    // db
	i = skipOptBytesAt(b, i) // sequence
	i = skipOptLongAt(b, i)  // ts_us
	i = skipOptLongAt(b, i)  // ts_ns
	if mysql {
		i = skipOptBytesAt(b, i) // table
		i = skipLongAt(b, i)     // server_id
		i = skipOptBytesAt(b, i) // gtid
		i = skipBytesAt(b, i)    // file
		i = skipLongAt(b, i)     // pos
		at := i
		n, i = longAt(b, i) // row: an int
		if i < 0 || n < math.MinInt32 || n > math.MaxInt32 {
			return 0, 0, 0, false
		}
		rowAt, rowEnd = at-start, i-start
		i = skipOptLongAt(b, i)  // thread
		i = skipOptBytesAt(b, i) // query
	} else {
		i = skipBytesAt(b, i) // schema
		i = skipBytesAt(b, i) // table
		n, i = optLongAt(b, i)
		v.TxID = uint64(n)
		n, i = optLongAt(b, i)
		v.LSN = uint64(n)
		i = skipOptLongAt(b, i) // xmin
	}
	switch n, i = longAt(b, i); n { // transaction
	case 0:
	case 1:
		i = skipBytesAt(b, i)
		i = skipLongAt(b, i)
		i = skipLongAt(b, i)
	default:
		return 0, 0, 0, false
	}
	if x, i = bytesAt(b, i); len(x) != 1 {
		return 0, 0, 0, false
	}
	v.Op = x[0]
	i = skipOptLongAt(b, i) // ts_ms
	i = skipOptLongAt(b, i) // ts_us
	i = skipOptLongAt(b, i) // ts_ns
	v.Unchanged, i = countNamesAt(b, i)
	_, i = countNamesAt(b, i) // absent
	at := i
	v.Position, i = bytesAt(b, i)
	if i < 0 {
		return 0, 0, 0, false
	}
	e.TsMs, e.SnapshotEnd, e.TxID, e.LSN, e.Op, e.Unchanged, e.Position = v.TsMs, v.SnapshotEnd, v.TxID, v.LSN, v.Op, v.Unchanged, v.Position
	r.pos = i
	return at - start, rowAt, rowEnd, true
}

// The fast readers below take a buffer and the index of a value in it and
// return the value and the index after it, or an index of -1 when the
// value is not there in its common form; given an index of -1 they return
// -1, so a sequence of reads is checked once, at its end.

// longAt reads a zigzag varint (Avro's long and int).
func longAt(b []byte, i int) (int64, int) {
	if uint(i) < uint(len(b)) && b[i] < 0x80 { // one byte: most values
		c := b[i]
		return int64(c>>1) ^ -int64(c&1), i + 1
	}
	return longAtSlow(b, i)
}

func longAtSlow(b []byte, i int) (int64, int) {
	if uint(i) >= uint(len(b)) {
		return 0, -1
	}
	u, n := binary.Uvarint(b[i:])
	if n <= 0 {
		return 0, -1
	}
	return int64(u>>1) ^ -int64(u&1), i + n
}

// skipLongAt skips a varint: the first byte under 0x80 of the next eight
// found at once (the times in micro- and nanoseconds are 7 to 9 bytes);
// a longer one is read by longAtSlow, which refuses one over 64 bits.
func skipLongAt(b []byte, i int) int {
	if i >= 0 && len(b)-i >= 8 {
		if stops := ^binary.LittleEndian.Uint64(b[i:]) & 0x8080808080808080; stops != 0 {
			return i + bits.TrailingZeros64(stops)/8 + 1
		}
	}
	_, i = longAtSlow(b, i)
	return i
}

// skipOptLongAt skips a [null, long] union.
func skipOptLongAt(b []byte, i int) int { return skipOptAt(b, i, skipLongAt) }

// skipOptAt skips a [null, T] union whose value skip skips.
func skipOptAt(b []byte, i int, skip func([]byte, int) int) int {
	switch br, j := longAt(b, i); {
	case j < 0:
		return -1
	case br == 0:
		return j
	case br == 1:
		return skip(b, j)
	}
	return -1
}

// bytesAt reads a length-prefixed value (bytes, a string), aliasing b.
func bytesAt(b []byte, i int) ([]byte, int) {
	n, j := longAt(b, i)
	if j < 0 || n < 0 || n > int64(len(b)-j) {
		return nil, -1
	}
	end := j + int(n)
	return b[j:end:end], end
}

func skipBytesAt(b []byte, i int) int {
	_, i = bytesAt(b, i)
	return i
}

// optLongAt reads a [null, long] union.
func optLongAt(b []byte, i int) (int64, int) {
	switch br, j := longAt(b, i); {
	case j < 0:
		return 0, -1
	case br == 0:
		return 0, j
	case br == 1:
		return longAt(b, j)
	}
	return 0, -1
}

// skipOptBytesAt skips a [null, string] union.
func skipOptBytesAt(b []byte, i int) int { return skipOptAt(b, i, skipBytesAt) }

// countNamesAt skips an array of strings and counts them.
func countNamesAt(b []byte, i int) (int, int) {
	count := 0
	for i >= 0 {
		var n int64
		if n, i = longAt(b, i); n == 0 || i < 0 {
			return count, i
		}
		if n < 0 { // a block with a byte size: skip the size
			n = -n
			_, i = longAt(b, i)
		}
		for ; n > 0 && i >= 0; n-- {
			i = skipBytesAt(b, i)
			count++
		}
	}
	return count, i
}
