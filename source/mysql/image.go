package mysql

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
	"unsafe"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
)

// The stream's row images are decoded here, from the binlog's bytes
// straight into table-model values, instead of by go-mysql: its decoding
// boxes every value into an interface, rebuilds the table map's
// UnsignedMap for every row and formats dates, times and decimals as text
// that fromBinlog parses again (a tenth of the streaming daemon's CPU).
//
// go-mysql's BinlogSyncer calls rowsHook for every row event, in its own
// goroutine: it decodes the event's header (table id, flags, column
// bitmaps) and leaves the images as rowsBody, the event's own bytes, as
// the event's only "row". The streamer, which knows the table's version
// (tables.go), reads them with imageReader and converts each column with
// fromImage. Text values are substrings of those bytes (a
// change's strings keep its event's bytes alive, as go-mysql's did);
// bytes values are copies.
//
// Events whose tables have a column this decoder does not read (MySQL's
// binary JSON, types cdcd does not map) and partial JSON updates are
// decoded by go-mysql as before, and fromBinlog converts them.
//
// A row image is (Rows_log_event, sql/log_event.cc): a NULL bitmap of one
// bit per column present in the event's column bitmap, then each present,
// non-NULL column's value in its binlog form. An update's event holds
// before and after images in turn, each with its own column bitmap.

// rowsBody is the undecoded row images of a row event (after its header).
type rowsBody string

// rowsHook is the BinlogSyncer's RowsEventDecodeFunc. The images are the
// event's own bytes, not a copy: the BinlogSyncer reads every event into a
// buffer of its own (packet.Conn.ReadPacket allocates one a packet, a
// compressed transaction's events share one fresh buffer) and never writes
// it again, so the strings cut from it are as immutable as copies.
// TestImageDecoder reads a whole binlog before it compares the values.
func rowsHook(e *replication.RowsEvent, data []byte) error {
	pos, err := e.DecodeHeader(data)
	if err != nil {
		return err
	}
	if e.Type() == replication.EnumRowsEventTypeUnknown || !imageTypes(e.Table) {
		return e.DecodeData(pos, data)
	}
	var body rowsBody
	if pos < len(data) {
		body = rowsBody(unsafe.String(&data[pos], len(data)-pos))
	}
	e.Rows = [][]any{{body}}
	return nil
}

// bodyOf returns the undecoded images of a row event that rowsHook left,
// decompressed.
func bodyOf(h *replication.EventHeader, e *replication.RowsEvent) (rowsBody, bool, error) {
	if len(e.Rows) != 1 || len(e.Rows[0]) != 1 {
		return "", false, nil
	}
	body, ok := e.Rows[0][0].(rowsBody)
	if !ok {
		return "", false, nil
	}
	switch h.EventType {
	case replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1, replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1,
		replication.MARIADB_DELETE_ROWS_COMPRESSED_EVENT_V1:
		b, err := gomysql.DecompressMariadbData([]byte(body))
		if err != nil {
			return "", false, fmt.Errorf("mysql: a compressed row event: %w", err)
		}
		body = rowsBody(b)
	}
	return body, true, nil
}

// imageTypes reports whether every column of a table map has a binlog
// form imageReader and fromImage read.
func imageTypes(tm *replication.TableMapEvent) bool {
	for _, typ := range tm.ColumnType {
		switch typ {
		case gomysql.MYSQL_TYPE_TINY, gomysql.MYSQL_TYPE_SHORT, gomysql.MYSQL_TYPE_INT24, gomysql.MYSQL_TYPE_LONG,
			gomysql.MYSQL_TYPE_LONGLONG, gomysql.MYSQL_TYPE_NEWDECIMAL, gomysql.MYSQL_TYPE_FLOAT, gomysql.MYSQL_TYPE_DOUBLE,
			gomysql.MYSQL_TYPE_BIT, gomysql.MYSQL_TYPE_YEAR, gomysql.MYSQL_TYPE_DATE, gomysql.MYSQL_TYPE_TIME,
			gomysql.MYSQL_TYPE_TIME2, gomysql.MYSQL_TYPE_DATETIME, gomysql.MYSQL_TYPE_DATETIME2, gomysql.MYSQL_TYPE_TIMESTAMP,
			gomysql.MYSQL_TYPE_TIMESTAMP2, gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING, gomysql.MYSQL_TYPE_STRING,
			gomysql.MYSQL_TYPE_BLOB, gomysql.MYSQL_TYPE_GEOMETRY:
		default:
			return false
		}
	}
	return true
}

// errImage is wrapped by every row image that cannot be split.
var errImage = errors.New("mysql: bad row image")

// field is one column of a row image: absent (a partial image), NULL, or
// its value's bytes (a string's or blob's without their length).
type field struct {
	b              string
	absent, isNull bool
}

// imageReader splits the row images of one row event.
type imageReader struct {
	tm      *replication.TableMapEvent
	body    rowsBody
	pos     int
	bitmaps [2][]byte // the column bitmaps of the first and (update) second image
	// present counts the columns each bitmap holds (-1: a bitmap shorter
	// than the table map's columns), once an event instead of once an
	// image; full: it holds them all.
	present [2]int
	full    [2]bool
	second  bool // the next image is an update's after image
}

func newImageReader(e *replication.RowsEvent, body rowsBody) *imageReader {
	r := &imageReader{tm: e.Table, body: body, bitmaps: [2][]byte{e.ColumnBitmap1, e.ColumnBitmap2}}
	n := len(r.tm.ColumnType)
	for j, bm := range r.bitmaps {
		if len(bm) < (n+7)/8 {
			r.present[j] = -1
			continue
		}
		for i := range n {
			if bitSet(bm, i) {
				r.present[j]++
			}
		}
		r.full[j] = r.present[j] == n
	}
	return r
}

func (r *imageReader) more() bool { return r.pos < len(r.body) }

// image starts the next image of n columns (the table map's): its column
// bitmap, whether that holds every column, and where its NULL bitmap
// starts; r.pos is then at its first value.
func (r *imageReader) image(n int) (bitmap []byte, full bool, nulls int, err error) {
	j := 0
	if r.second {
		j = 1
	}
	if r.bitmaps[1] != nil {
		r.second = !r.second
	}
	bitmap = r.bitmaps[j]
	if n != len(r.tm.ColumnType) || r.present[j] < 0 {
		return nil, false, 0, fmt.Errorf("%w: %d columns, a bitmap of %d bytes, the table map has %d", errImage, n, len(bitmap), len(r.tm.ColumnType))
	}
	nulls = r.pos
	r.pos += (r.present[j] + 7) / 8
	if r.pos > len(r.body) {
		return nil, false, 0, fmt.Errorf("%w: it ends in its NULL bitmap", errImage)
	}
	return bitmap, r.full[j], nulls, nil
}

// next splits the next image into fields (one per column of the table
// map, reused); partial reports a column absent.
func (r *imageReader) next(fields []field) (partial bool, err error) {
	bitmap, _, nulls, err := r.image(len(fields))
	if err != nil {
		return false, err
	}
	k := 0
	for i := range fields {
		fields[i] = field{}
		if !bitSet(bitmap, i) {
			fields[i].absent, partial = true, true
			continue
		}
		if r.body[nulls+k/8]&(1<<(k%8)) != 0 {
			fields[i].isNull = true
			k++
			continue
		}
		k++
		start, end, err := valueBounds(r.tm.ColumnType[i], r.tm.ColumnMeta[i], r.body[r.pos:])
		if err != nil {
			return false, fmt.Errorf("%w: column %d: %v", errImage, i, err)
		}
		fields[i].b = string(r.body[r.pos+start : r.pos+end])
		r.pos += end
	}
	return partial, nil
}

// decode reads the next image of table version v straight into row (a
// value per column, zeroed; a NULL or absent column stays nil): next and
// decodeImage in one pass, each value converted as soon as it is bounded,
// without the fields between them (a store of each value's bytes, with
// its write barrier while the collector runs, and a load again). A value
// cdcd cannot carry is nil and the returned fault names it, as
// decodeImage does.
func (r *imageReader) decode(v *tableVersion, row []any, vals *pgdecode.Slab) (*source.Fault, error) {
	tm := r.tm
	if len(row) != len(v.cols) {
		return nil, fmt.Errorf("%w: a row of %d columns, the table map has %d", errImage, len(v.cols), len(tm.ColumnType))
	}
	bitmap, full, nulls, err := r.image(len(row))
	if err != nil {
		return nil, err
	}
	var fault *source.Fault
	k := 0
	for i := range row {
		if !full && !bitSet(bitmap, i) {
			continue
		}
		null := r.body[nulls+k>>3]&(1<<(k&7)) != 0
		k++
		if null {
			continue
		}
		typ, meta := tm.ColumnType[i], tm.ColumnMeta[i]
		start, end, err := valueBounds(typ, meta, r.body[r.pos:])
		if err != nil {
			return nil, fmt.Errorf("%w: column %d: %v", errImage, i, err)
		}
		b := string(r.body[r.pos+start : r.pos+end])
		r.pos += end
		val, err := fromImage(&v.cols[i], typ, meta, b, vals)
		if err == nil && val == nil && !v.table.Columns[i].Nullable {
			err = errNullKey
		}
		if err != nil {
			if fault == nil {
				fault = v.fault(i, imageText(typ, meta, b), err)
			}
			continue
		}
		row[i] = val
	}
	return fault, nil
}

func bitSet(bitmap []byte, i int) bool { return bitmap[i/8]&(1<<(i%8)) != 0 }

// valueBounds is where the value of a column of binlog type typ (with its
// table-map metadata) starts and ends in b.
func valueBounds(typ byte, meta uint16, b rowsBody) (start, end int, err error) {
	size := 0
	switch typ {
	case gomysql.MYSQL_TYPE_TINY, gomysql.MYSQL_TYPE_YEAR:
		size = 1
	case gomysql.MYSQL_TYPE_SHORT:
		size = 2
	case gomysql.MYSQL_TYPE_INT24, gomysql.MYSQL_TYPE_DATE, gomysql.MYSQL_TYPE_TIME:
		size = 3
	case gomysql.MYSQL_TYPE_LONG, gomysql.MYSQL_TYPE_FLOAT, gomysql.MYSQL_TYPE_TIMESTAMP:
		size = 4
	case gomysql.MYSQL_TYPE_LONGLONG, gomysql.MYSQL_TYPE_DOUBLE, gomysql.MYSQL_TYPE_DATETIME:
		size = 8
	case gomysql.MYSQL_TYPE_NEWDECIMAL:
		size = decimalSize(int(meta>>8), int(meta&0xff))
	case gomysql.MYSQL_TYPE_BIT:
		size = (int(meta>>8)*8 + int(meta&0xff) + 7) / 8
	case gomysql.MYSQL_TYPE_TIMESTAMP2:
		size = 4 + (int(meta)+1)/2
	case gomysql.MYSQL_TYPE_DATETIME2:
		size = 5 + (int(meta)+1)/2
	case gomysql.MYSQL_TYPE_TIME2:
		size = 3 + (int(meta)+1)/2
	case gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING:
		return lengthPrefixed(b, 1+boolInt(meta >= 256))
	case gomysql.MYSQL_TYPE_STRING:
		real, length := stringMeta(meta)
		switch real {
		case gomysql.MYSQL_TYPE_ENUM, gomysql.MYSQL_TYPE_SET:
			size = length // the enum's 1 or 2, the set's 1–8 bytes
		default:
			return lengthPrefixed(b, 1+boolInt(length >= 256))
		}
	case gomysql.MYSQL_TYPE_BLOB, gomysql.MYSQL_TYPE_GEOMETRY:
		if meta < 1 || meta > 4 {
			return 0, 0, fmt.Errorf("blob length of %d bytes", meta)
		}
		return lengthPrefixed(b, int(meta))
	default:
		return 0, 0, fmt.Errorf("binlog type %d", typ)
	}
	if size > len(b) {
		return 0, 0, fmt.Errorf("%d bytes of %d left", size, len(b))
	}
	return 0, size, nil
}

// lengthPrefixed bounds a value after its little-endian length of w bytes.
func lengthPrefixed(b rowsBody, w int) (start, end int, err error) {
	if w > len(b) {
		return 0, 0, fmt.Errorf("a length of %d bytes, %d left", w, len(b))
	}
	n := 0
	for i := w - 1; i >= 0; i-- {
		n = n<<8 | int(b[i])
	}
	if n > len(b)-w {
		return 0, 0, fmt.Errorf("a value of %d bytes, %d left", n, len(b)-w)
	}
	return w, w + n, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// fromImage converts a column's value in its binlog form (its field's
// bytes; typ and meta from the table map) into the table-model value, the
// one fromText gives for the server's text of it. Numbers, dates and
// texts are put in slab (nil: each boxed alone): a row event's values are
// emitted and dropped together.
func fromImage(t *colType, typ byte, meta uint16, b string, slab *pgdecode.Slab) (any, error) {
	switch typ {
	case gomysql.MYSQL_TYPE_TINY, gomysql.MYSQL_TYPE_SHORT, gomysql.MYSQL_TYPE_INT24, gomysql.MYSQL_TYPE_LONG,
		gomysql.MYSQL_TYPE_LONGLONG:
		return imageInt(t, b, slab), nil
	case gomysql.MYSQL_TYPE_NEWDECIMAL:
		var out [80]byte
		d, err := appendDecimal(out[:0], b, int(meta>>8), int(meta&0xff))
		if err != nil {
			return nil, err
		}
		return slab.Text(d), nil
	case gomysql.MYSQL_TYPE_FLOAT:
		return math.Float32frombits(uint32(le(b))), nil
	case gomysql.MYSQL_TYPE_DOUBLE:
		return slab.Float64(math.Float64frombits(le(b))), nil
	case gomysql.MYSQL_TYPE_BIT:
		if t.Length == 1 {
			return b[0] != 0, nil
		}
		return []byte(b), nil
	case gomysql.MYSQL_TYPE_YEAR:
		if b[0] == 0 {
			return int64(0), nil
		}
		return int64(b[0]) + 1900, nil
	case gomysql.MYSQL_TYPE_DATE, gomysql.MYSQL_TYPE_DATETIME, gomysql.MYSQL_TYPE_DATETIME2,
		gomysql.MYSQL_TYPE_TIMESTAMP, gomysql.MYSQL_TYPE_TIMESTAMP2:
		return civilOf(typ, meta, b).value(typ == gomysql.MYSQL_TYPE_DATE, slab)
	case gomysql.MYSQL_TYPE_TIME, gomysql.MYSQL_TYPE_TIME2:
		return timeOf(typ, meta, b).value()
	case gomysql.MYSQL_TYPE_STRING:
		switch real, _ := stringMeta(meta); real {
		case gomysql.MYSQL_TYPE_ENUM:
			return enumLabel(t, int64(le(b)))
		case gomysql.MYSQL_TYPE_SET:
			return setLabels(t, le(b))
		}
	}
	return imageBytes(t, b, slab)
}

// imageBytes converts a character, binary, JSON (MariaDB's text) or
// geometry value.
func imageBytes(t *colType, b string, slab *pgdecode.Slab) (any, error) {
	switch t.Base {
	case "char", "varchar", "text":
		if !isUTF8Charset(t.Charset) {
			return decodeText(t.Charset, []byte(b))
		}
		if !utf8.ValidString(b) {
			return nil, fmt.Errorf("%w: %s text that is not valid UTF-8", errBadValue, t.Charset)
		}
		return slab.Str(b), nil
	case "json":
		if t.binaryJSON {
			break // go-mysql's (rowsHook)
		}
		return slab.Str(b), nil // MariaDB: the stored text
	case "binary":
		out := make([]byte, max(len(b), t.Length)) // the binlog drops trailing zero bytes
		copy(out, b)
		return out, nil
	case "varbinary", "blob":
		return []byte(b), nil
	case "geometry":
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: geometry of %d bytes", errBadValue, len(b))
		}
		return []byte(b[4:]), nil // drop the SRID: WKB
	}
	return nil, fmt.Errorf("%w: %s from a binlog string", errBadValue, t.Base)
}

// le reads up to 8 bytes little-endian.
func le(b string) uint64 {
	var n uint64
	for i := len(b) - 1; i >= 0; i-- {
		n = n<<8 | uint64(b[i])
	}
	return n
}

// be reads up to 8 bytes big-endian.
func be(b string) uint64 {
	var n uint64
	for i := 0; i < len(b); i++ {
		n = n<<8 | uint64(b[i])
	}
	return n
}

func imageInt(t *colType, b string, slab *pgdecode.Slab) any {
	u := le(b)
	if t.Unsigned {
		if len(b) == 8 {
			return strconv.FormatUint(u, 10) // bigint unsigned: a decimal(20,0)
		}
		return slab.Int64(int64(u))
	}
	shift := 64 - 8*len(b) // sign-extend
	return slab.Int64(int64(u<<shift) >> shift)
}

// decimalSize is the bytes of a binary decimal (decimal.c's
// decimal_bin_size): nine digits in four bytes, the rest of each part in
// dig2bytes.
func decimalSize(precision, scale int) int {
	intg := precision - scale
	return intg/9*4 + dig2bytes[intg%9] + scale/9*4 + dig2bytes[scale%9]
}

var dig2bytes = [9]int{0, 1, 1, 2, 2, 3, 3, 4, 4}

// imageDecimal renders a binary decimal as its canonical text: no leading
// zeros, the scale kept, no sign on zero.
func imageDecimal(b string, precision, scale int) (string, error) {
	var out [80]byte
	d, err := appendDecimal(out[:0], b, precision, scale)
	return string(d), err
}

// appendDecimal appends imageDecimal's text to s (room for 67 bytes
// spares it an allocation).
func appendDecimal(s []byte, b string, precision, scale int) ([]byte, error) {
	if precision > 65 || scale > precision || len(b) != decimalSize(precision, scale) {
		return s, fmt.Errorf("%w: decimal(%d,%d) of %d bytes", errBadValue, precision, scale, len(b))
	}
	if precision <= 18 {
		return appendSmallDecimal(s, b, precision, scale), nil
	}
	return appendDecimalGroups(s, b, precision, scale), nil
}

// appendSmallDecimal is appendDecimal of a decimal of at most 18 digits,
// whose integer part and fraction each fit a uint64: both are read as
// numbers and written once, where appendDecimalGroups writes each group
// of nine digits and drops leading zeros as it goes (a streamed
// DECIMAL(12,2) was a third of a row image's conversion).
func appendSmallDecimal(s []byte, b string, precision, scale int) []byte {
	neg := b[0]&0x80 == 0 // negative: every byte inverted
	var mask uint64
	if neg {
		mask = ^uint64(0)
	}
	intg := precision - scale
	head, frac := dig2bytes[intg%9], dig2bytes[scale%9]
	// group reads n bytes big-endian from from, the sign bit flipped and
	// the inversion undone.
	group := func(from, n int) uint64 {
		var v uint64
		for i := from; i < from+n; i++ {
			c := b[i]
			if i == 0 {
				c ^= 0x80
			}
			v = v<<8 | uint64(c)
		}
		return (v ^ mask) & (1<<(8*n) - 1)
	}
	var ip, fp uint64
	at := 0
	if head > 0 {
		ip, at = group(0, head), head
	}
	for ; at < head+intg/9*4; at += 4 {
		ip = ip*1_000_000_000 + group(at, 4)
	}
	for ; at < len(b)-frac; at += 4 {
		fp = fp*1_000_000_000 + group(at, 4)
	}
	if frac > 0 {
		fp = fp*uint64(pow10[scale%9]) + group(at, frac)
	}
	// The text, written once from its last digit: the fraction's scale
	// digits, the point, the integer part's digits (at least one), the
	// sign (not on zero). Dividing by the constant 10 is a multiply.
	var buf [24]byte // 18 digits, a leading 0, the point and the sign
	i := len(buf)
	sign := neg && (ip != 0 || fp != 0)
	for range scale {
		i--
		buf[i] = byte('0' + fp%10)
		fp /= 10
	}
	if scale > 0 {
		i--
		buf[i] = '.'
	}
	for {
		i--
		buf[i] = byte('0' + ip%10)
		if ip /= 10; ip == 0 {
			break
		}
	}
	if sign {
		i--
		buf[i] = '-'
	}
	return append(s, buf[i:]...)
}

// appendDecimalGroups is appendDecimal group by group, for any precision.
func appendDecimalGroups(s []byte, b string, precision, scale int) []byte {
	var buf [40]byte
	copy(buf[:], b)
	d := buf[:len(b)]
	var mask byte
	if d[0]&0x80 == 0 {
		mask = 0xff // negative: every byte inverted
	}
	d[0] ^= 0x80
	for i := range d {
		d[i] ^= mask
	}
	start := len(s)
	s = append(s, '-') // room for the sign
	intg := precision - scale
	head := dig2bytes[intg%9]
	s = appendGroups(s, d[:head+intg/9*4], head, intg%9, true)
	if len(s) == start+1 {
		s = append(s, '0')
	}
	zero := len(s) == start+2 && s[start+1] == '0'
	if scale > 0 {
		s = append(s, '.')
		f := len(s)
		frac := d[head+intg/9*4:]
		s = appendGroups(s, frac[:scale/9*4], 0, 9, false)
		if tail := dig2bytes[scale%9]; tail > 0 {
			s = appendDigits(s, be(string(d[len(d)-tail:])), scale%9)
		}
		for _, c := range s[f:] {
			zero = zero && c == '0'
		}
	}
	if mask == 0 || zero {
		return append(s[:start], s[start+1:]...) // no sign
	}
	return s
}

// appendGroups appends the digits of a decimal's part: a first group of
// head bytes holding headDigits digits, then four-byte groups of nine
// (only those, when head is 0, up to a partial tail the caller reads).
// leading drops the part's leading zeros.
func appendGroups(s, d []byte, head, headDigits int, leading bool) []byte {
	if head > 0 {
		if v := be(string(d[:head])); v != 0 || !leading {
			s = appendDigits(s, v, headDigits*boolInt(!leading))
			leading = false
		}
		d = d[head:]
	}
	for len(d) >= 4 {
		v := be(string(d[:4]))
		d = d[4:]
		if leading && v == 0 {
			continue
		}
		s = appendDigits(s, v, 9*boolInt(!leading))
		leading = false
	}
	return s
}

// appendDigits appends v in decimal, zero-padded to width digits.
func appendDigits(s []byte, v uint64, width int) []byte {
	var tmp [20]byte
	d := strconv.AppendUint(tmp[:0], v, 10)
	for i := len(d); i < width; i++ {
		s = append(s, '0')
	}
	return append(s, d...)
}

// civil is a date or datetime of a row image, as the server stores it
// (zero parts kept).
type civil struct {
	y, m, d, h, mi, s int
	us                int64
	fsp               int
	epochUS           int64 // a TIMESTAMP: the instant; valid when ts
	ts, zero          bool
}

// civilOf reads a DATE, DATETIME or TIMESTAMP value.
func civilOf(typ byte, meta uint16, b string) civil {
	var c civil
	switch typ {
	case gomysql.MYSQL_TYPE_DATE:
		v := int(le(b))
		c.y, c.m, c.d, c.zero = v/(16*32), v/32%16, v%32, v == 0
	case gomysql.MYSQL_TYPE_DATETIME: // the old format: YYYYMMDDhhmmss as an integer
		v := le(b)
		d, t := int(v/1_000_000), int(v%1_000_000)
		c.y, c.m, c.d, c.h, c.mi, c.s, c.zero = d/10000, d%10000/100, d%100, t/10000, t%10000/100, t%100, v == 0
	case gomysql.MYSQL_TYPE_DATETIME2:
		c.fsp = int(meta)
		c.us = fracMicros(b[5:], c.fsp)
		intPart := int64(be(b[:5])) - 0x8000000000
		c.zero = intPart == 0
		packed := intPart<<24 + c.us // as go-mysql's decodeDatetime2 reads it
		if packed < 0 {
			packed = -packed
		}
		packed >>= 24
		ymd, hms := packed>>17, packed%(1<<17)
		c.y, c.m, c.d = int(ymd>>5/13), int(ymd>>5%13), int(ymd%32)
		c.h, c.mi, c.s = int(hms>>12), int(hms>>6%64), int(hms%64)
	case gomysql.MYSQL_TYPE_TIMESTAMP:
		sec := int64(le(b))
		c.ts, c.zero, c.epochUS = true, sec == 0, sec*1_000_000
	case gomysql.MYSQL_TYPE_TIMESTAMP2:
		c.fsp = int(meta)
		c.us = fracMicros(b[4:], c.fsp)
		sec := int64(be(b[:4]))
		c.ts, c.zero, c.epochUS = true, sec == 0, sec*1_000_000+c.us
	}
	return c
}

// fracMicros reads the fractional seconds of a TIME2, DATETIME2 or
// TIMESTAMP2 value (big-endian, (fsp+1)/2 bytes) as microseconds.
func fracMicros(b string, fsp int) int64 {
	switch fsp {
	case 1, 2:
		return int64(b[0]) * 10000
	case 3, 4:
		return int64(be(b[:2])) * 100
	case 5, 6:
		return int64(be(b[:3]))
	}
	return 0
}

// value is the table model's: days (DATE) or microseconds since the
// epoch; nil for a zero date or one with a zero month or day
// (docs/types.md).
func (c civil) value(date bool, slab *pgdecode.Slab) (any, error) {
	switch {
	case c.zero:
		return nil, nil
	case c.ts:
		return slab.Int64(c.epochUS), nil
	case c.m > 12 || c.y > 9999 || c.h > 23 || c.mi > 59 || c.s > 59:
		return nil, fmt.Errorf("%w: %s", errBadValue, c)
	case c.m == 0 || c.d == 0:
		return nil, nil
	case date:
		return slab.Int32(int32(daysFromCivil(c.y, c.m, c.d))), nil
	}
	return slab.Int64(daysFromCivil(c.y, c.m, c.d)*86_400_000_000 + ((int64(c.h)*60+int64(c.mi))*60+int64(c.s))*1_000_000 + c.us), nil
}

// String is the value as the server prints it (a fault's value).
func (c civil) String() string {
	if c.ts && !c.zero {
		return fmt.Sprint(c.epochUS / 1_000_000)
	}
	s := fmt.Sprintf("%04d-%02d-%02d %02d:%02d:%02d", c.y, c.m, c.d, c.h, c.mi, c.s)
	if c.fsp > 0 {
		s += fmt.Sprintf(".%06d", c.us)[:1+c.fsp]
	}
	return s
}

// clock is a TIME value of a row image: its sign and magnitude.
type clock struct {
	neg      bool
	h, mi, s int64
	us       int64
	fsp      int
}

// timeOf reads a TIME or TIME2 value (sql/my_time.cc
// my_time_packed_from_binary: a fraction of a negative value is stored
// reversed, for binary sort order).
func timeOf(typ byte, meta uint16, b string) clock {
	if typ == gomysql.MYSQL_TYPE_TIME { // the old format: hhmmss as an integer
		v := int64(le(b))
		return clock{h: v / 10000, mi: v % 10000 / 100, s: v % 100}
	}
	fsp := int(meta)
	intPart := int64(be(b[:3])) - 0x800000
	var packed int64 // seconds << 24 | microseconds, signed
	switch fsp {
	case 1, 2:
		frac := int64(b[3])
		if intPart < 0 && frac != 0 {
			intPart++
			frac -= 0x100
		}
		packed = intPart<<24 + frac*10000
	case 3, 4:
		frac := int64(be(b[3:5]))
		if intPart < 0 && frac != 0 {
			intPart++
			frac -= 0x10000
		}
		packed = intPart<<24 + frac*100
	case 5, 6:
		packed = int64(be(b[:6])) - 0x800000000000
	default:
		packed = intPart << 24
	}
	c := clock{fsp: fsp}
	if packed < 0 {
		c.neg, packed = true, -packed
	}
	hms := packed >> 24
	c.h, c.mi, c.s, c.us = hms>>12%1024, hms>>6%64, hms%64, packed%(1<<24)
	c.us -= c.us % pow10[6-min(fsp, 6)] // the digits the column keeps
	return c
}

// value is the table model's interval in microseconds.
func (c clock) value() (any, error) {
	if c.h > 999 || c.mi > 59 || c.s > 59 || c.us > 999_999 {
		return nil, fmt.Errorf("%w: time %s", errBadValue, c)
	}
	us := ((c.h*60+c.mi)*60+c.s)*1_000_000 + c.us
	if c.neg {
		us = -us
	}
	return schema.IntervalValue{Micros: us}, nil
}

// String is the value as the server prints it (a fault's value).
func (c clock) String() string {
	sign := ""
	if c.neg {
		sign = "-"
	}
	return fmt.Sprintf("%s%02d:%02d:%02d.%06d", sign, c.h, c.mi, c.s, c.us)
}

// imageText is a column's binlog value as text, for a fault.
func imageText(typ byte, meta uint16, b string) string {
	switch typ {
	case gomysql.MYSQL_TYPE_DATE:
		return civilOf(typ, meta, b).String()[:10]
	case gomysql.MYSQL_TYPE_DATETIME, gomysql.MYSQL_TYPE_DATETIME2, gomysql.MYSQL_TYPE_TIMESTAMP, gomysql.MYSQL_TYPE_TIMESTAMP2:
		return civilOf(typ, meta, b).String()
	case gomysql.MYSQL_TYPE_TIME, gomysql.MYSQL_TYPE_TIME2:
		return timeOf(typ, meta, b).String()
	case gomysql.MYSQL_TYPE_STRING:
		if real, _ := stringMeta(meta); real == gomysql.MYSQL_TYPE_ENUM || real == gomysql.MYSQL_TYPE_SET {
			return strconv.FormatUint(le(b), 10)
		}
	case gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING, gomysql.MYSQL_TYPE_BLOB, gomysql.MYSQL_TYPE_GEOMETRY:
	default:
		return fmt.Sprintf("%x", b)
	}
	return b
}
