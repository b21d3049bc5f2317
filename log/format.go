package log

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"time"
)

// File kinds of the embedded log. Frozen: changing a name orphans existing
// data directories.
const (
	lockFileName      = "LOCK"        // exclusive flock, holder PID inside
	logIDFileName     = "log.id"      // the log directory's identity
	quarantineDirName = "quarantine"  // copies of damaged segments, with notes
	syncMarkName      = "synced.pos"  // per partition: where its synced bytes end
	lostRangesName    = "lost.ranges" // per partition: offsets lost to damage
	topicsDirName     = "topics"      // one directory per topic below it
	topicMetaName     = "topic.json"  // a topic's TopicConfig
	segmentSuffix     = ".log"        // record batches
	offsetIndexSuffix = ".index"      // sparse offset → position index
	timeIndexSuffix   = ".timeindex"  // sparse time → offset index
	cleanedSuffix     = ".cleaned"    // compaction output before its swap
	tmpPrefix         = ".tmp-"       // anything being written atomically
	deletedPrefix     = ".deleted-"   // a topic being removed
	segmentNameDigits = 20            // zero-padded base offset width
)

// Batch layout (see the package doc). Frozen.
const (
	batchVersion    = 1
	batchHeaderLen  = 42
	batchLenField   = 4 // bytes of the length field itself
	offCRC          = 4
	offVersion      = 8
	offFlags        = 9
	offBaseOffset   = 10
	offLastDelta    = 18
	offCount        = 22
	offFirstTs      = 26
	offMaxTs        = 34
	minRecordLen    = 5                                             // five one-byte varints
	minBatchLen     = batchHeaderLen - batchLenField + minRecordLen // header + smallest record
	maxBatchLen     = 64 << 20                                      // largest length field accepted
	crcCoveredStart = 8

	// flagSyncPoint marks the last batch of a group commit that the writer
	// fsyncs before writing anything else: a good batch found after it
	// proves it durable (see Recovery in the package doc).
	flagSyncPoint = 0x01
	// flagCompressed marks a batch whose records section is one S2 block
	// (klauspost/compress/s2; see "Compressed batches" in the package
	// doc). The CRC covers the bytes as stored.
	flagCompressed = 0x02
	knownFlags     = flagSyncPoint | flagCompressed
)

// MaxRecordBytes is the largest encoded record (key, value, headers and a
// few bytes of framing) the embedded log accepts.
const MaxRecordBytes = maxBatchLen - batchHeaderLen

// softBatchBytes is where Produce starts a new batch for the same
// partition; smaller batches make Fetch's MaxBytes finer-grained.
const softBatchBytes = 1 << 20

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// batchHeader is the fixed part of a batch.
type batchHeader struct {
	Length    uint32 // bytes after the length field
	CRC       uint32
	Base      int64
	LastDelta uint32
	Count     uint32
	FirstTs   int64
	MaxTs     int64
	Flags     uint8
}

// Size is the whole batch's size in bytes.
func (h batchHeader) Size() int64 { return int64(h.Length) + batchLenField }

// Last is the offset of the batch's last record.
func (h batchHeader) Last() int64 { return h.Base + int64(h.LastDelta) }

// parseBatchHeader decodes and sanity-checks the fixed header at the start
// of buf. It does not check the CRC (the body may not be in buf).
func parseBatchHeader(buf []byte) (batchHeader, error) {
	if len(buf) < batchHeaderLen {
		return batchHeader{}, errShort
	}
	h := batchHeader{
		Length:    binary.LittleEndian.Uint32(buf),
		CRC:       binary.LittleEndian.Uint32(buf[offCRC:]),
		Base:      int64(binary.LittleEndian.Uint64(buf[offBaseOffset:])),
		LastDelta: binary.LittleEndian.Uint32(buf[offLastDelta:]),
		Count:     binary.LittleEndian.Uint32(buf[offCount:]),
		FirstTs:   int64(binary.LittleEndian.Uint64(buf[offFirstTs:])),
		MaxTs:     int64(binary.LittleEndian.Uint64(buf[offMaxTs:])),
		Flags:     buf[offFlags],
	}
	switch {
	case h.Length < minBatchLen || h.Length > maxBatchLen:
		return h, errBadLength
	case buf[offVersion] != batchVersion:
		return h, errBadVersion
	case h.Flags&^knownFlags != 0:
		return h, errBadHeader
	case h.Base < 0 || h.Count == 0 || h.LastDelta < h.Count-1 || h.Base > math.MaxInt64-int64(h.LastDelta):
		return h, errBadHeader
	case h.Flags&flagCompressed == 0 && int64(h.Count)*minRecordLen > int64(h.Length)-(batchHeaderLen-batchLenField):
		return h, errBadHeader // more records than bytes could hold (checked after decoding when compressed)
	}
	return h, nil
}

// checkBatch parses the header at the start of buf and verifies the CRC of
// the whole batch, which must be in buf.
func checkBatch(buf []byte) (batchHeader, error) {
	h, err := parseBatchHeader(buf)
	if err != nil {
		return h, err
	}
	if int64(len(buf)) < h.Size() {
		return h, errShort
	}
	if crc32.Checksum(buf[crcCoveredStart:h.Size()], crcTable) != h.CRC {
		return h, errBadCRC
	}
	return h, nil
}

// decodeBatch verifies the batch at the start of buf and decodes its
// records. Keys, values and header values alias buf. It returns the
// records and the batch size.
func decodeBatch(buf []byte, partition int32) ([]Record, int, error) {
	h, err := checkBatch(buf)
	if err != nil {
		return nil, 0, err
	}
	recs := make([]Record, 0, h.Count)
	err = walkRecords(buf[:h.Size()], h, nil, func(r Record) bool {
		r.Partition = partition
		recs = append(recs, r)
		return true
	})
	if err != nil {
		return nil, 0, err
	}
	return recs, int(h.Size()), nil
}

// walkRecords decodes the records of a verified batch in order, calling fn
// for each until it returns false. It checks every length and the offset
// deltas, so a batch that passed its CRC but was written wrongly is still
// rejected rather than misread.
//
// With fb (a fetch's FetchBuffers) the records' headers are cut from fb's
// slab, which the next batch of the fetch continues, and a compressed
// batch's records are decoded into a buffer from fb.Window (so that the
// reader's window accounting covers what the records alias); without it
// into a new buffer.
func walkRecords(batch []byte, h batchHeader, fb *FetchBuffers, fn func(Record) bool) error {
	body := batch[batchHeaderLen:h.Size()]
	if h.Flags&flagCompressed != 0 {
		var alloc func(int) []byte
		if fb != nil {
			alloc = fb.Window
		}
		var err error
		if body, err = decompressRecords(body, h, alloc); err != nil {
			return err
		}
	}
	d := decoder{buf: body}
	if fb != nil {
		d.hdrs, d.keys, d.nkeys, d.keep = fb.headers, fb.keys, fb.nkeys, true
	}
	err := d.walk(h, fn)
	if fb != nil {
		fb.headers, fb.keys, fb.nkeys = d.hdrs, d.keys, d.nkeys
	}
	return err
}

func (d *decoder) walk(h batchHeader, fn func(Record) bool) error {
	prev := int64(-1)
	for i := uint32(0); i < h.Count; i++ {
		d.left = h.Count - i
		r, delta, err := d.record(h)
		if err != nil {
			return err
		}
		if int64(delta) <= prev || delta > uint64(h.LastDelta) {
			return errBadOffsets
		}
		prev = int64(delta)
		if !fn(r) {
			return nil
		}
	}
	if prev != int64(h.LastDelta) || d.pos != len(d.buf) {
		return errBadOffsets
	}
	return nil
}

// decoder reads records from the body of a batch. The records' headers
// are cut from one slab a batch (hdrs) and their keys, which repeat from
// record to record, are made once a batch (keys): a fetch allocated a
// slice and a string per header of every record, three allocations a
// change record.
//
// A fetch with FetchBuffers keeps its slab and keys from batch to batch and
// from fetch to fetch (keep): a new slab is then at least twice the last,
// so the one kept grows until a whole fetch's headers fit in it, and a
// fetch of a load's records allocates none (they were 70 bytes a row).
//
// It moves an offset (pos) through the batch rather than re-slicing buf:
// a slice stored through the decoder's pointer is a write barrier while
// the collector marks.
type decoder struct {
	buf   []byte // the batch's records
	pos   int
	left  uint32 // records left in the batch, this one included
	hdrs  []Header
	keys  [8]string
	nkeys int
	keep  bool
}

// maxHeaderSlab is the most headers one slab holds (40 bytes each);
// maxKeptHeaders the most a kept one (FetchBuffers) grows to.
const (
	maxHeaderSlab  = 4096
	maxKeptHeaders = 1 << 16
)

// headers returns n headers cut from the slab, sized at first for the
// batch's records left with as many each.
func (d *decoder) headers(n int) []Header {
	if cap(d.hdrs)-len(d.hdrs) < n {
		size := min(n*int(max(d.left, 1)), maxHeaderSlab)
		if d.keep {
			size = min(max(size, 2*cap(d.hdrs)), maxKeptHeaders)
		}
		d.hdrs = make([]Header, 0, max(n, size))
	}
	h := d.hdrs[len(d.hdrs) : len(d.hdrs)+n : len(d.hdrs)+n]
	d.hdrs = d.hdrs[:len(d.hdrs)+n]
	return h
}

// key returns k as a string, the same string for the same key within a
// batch.
func (d *decoder) key(k []byte) string {
	for _, s := range d.keys[:d.nkeys] {
		if s == string(k) {
			return s
		}
	}
	s := string(k)
	if d.nkeys < len(d.keys) {
		d.keys[d.nkeys] = s
		d.nkeys++
	}
	return s
}

func (d *decoder) record(h batchHeader) (Record, uint64, error) {
	delta, err := d.uvarint()
	if err != nil {
		return Record{}, 0, err
	}
	tsDelta, err := d.varint()
	if err != nil {
		return Record{}, 0, err
	}
	var r Record
	r.Offset = h.Base + int64(delta)
	r.Timestamp = time.UnixMilli(h.FirstTs + tsDelta)
	if r.Key, err = d.bytes(); err != nil {
		return r, 0, err
	}
	if r.Value, err = d.bytes(); err != nil {
		return r, 0, err
	}
	n, err := d.uvarint()
	if err != nil {
		return r, 0, err
	}
	if n > uint64(len(d.buf)-d.pos) { // each header takes at least 2 bytes
		return r, 0, errBadRecord
	}
	if n > 0 {
		r.Headers = d.headers(int(n))
		for i := range r.Headers {
			k, err := d.bytes()
			if err != nil || k == nil {
				return r, 0, errBadRecord
			}
			r.Headers[i].Key = d.key(k)
			if r.Headers[i].Value, err = d.bytes(); err != nil {
				return r, 0, err
			}
		}
	}
	return r, delta, nil
}

func (d *decoder) uvarint() (uint64, error) {
	v, n := binary.Uvarint(d.buf[d.pos:])
	if n <= 0 {
		return 0, errBadRecord
	}
	d.pos += n
	return v, nil
}

func (d *decoder) varint() (int64, error) {
	v, n := binary.Varint(d.buf[d.pos:])
	if n <= 0 {
		return 0, errBadRecord
	}
	d.pos += n
	return v, nil
}

// bytes reads a length-prefixed byte string; length -1 is nil.
func (d *decoder) bytes() ([]byte, error) {
	n, err := d.varint()
	switch {
	case err != nil:
		return nil, err
	case n == -1:
		return nil, nil
	case n < -1 || n > int64(len(d.buf)-d.pos):
		return nil, errBadRecord
	}
	b := d.buf[d.pos : d.pos+int(n) : d.pos+int(n)]
	d.pos += int(n)
	return b, nil
}

// batchBuilder encodes records into one batch. Offsets are given as deltas
// from the base, which finishBatch patches in later.
type batchBuilder struct {
	buf     []byte
	count   uint32
	last    uint32
	firstTs int64
	maxTs   int64
}

// reset starts a new batch in buf (reusing its capacity).
func (b *batchBuilder) reset(buf []byte) {
	*b = batchBuilder{buf: append(buf[:0], make([]byte, batchHeaderLen)...)}
}

// add appends one record with the given offset delta (strictly larger than
// the previous one) and timestamp in Unix milliseconds.
func (b *batchBuilder) add(r *Record, delta uint32, tsMs int64) {
	if b.count == 0 {
		b.firstTs, b.maxTs = tsMs, tsMs
	}
	b.maxTs = max(b.maxTs, tsMs)
	// Appended to a local slice, stored once: a slice stored through b is
	// a write barrier while the collector marks, which a load paid for
	// every field of every record (the largest source of them left).
	buf := b.buf
	buf = binary.AppendUvarint(buf, uint64(delta))
	buf = binary.AppendVarint(buf, tsMs-b.firstTs)
	buf = appendBytes(buf, r.Key)
	buf = appendBytes(buf, r.Value)
	buf = binary.AppendUvarint(buf, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		buf = binary.AppendVarint(buf, int64(len(h.Key)))
		buf = append(buf, h.Key...)
		buf = appendBytes(buf, h.Value)
	}
	b.buf = buf
	b.count++
	b.last = delta
}

// finish fills in the header except base offset and CRC, and returns the
// batch bytes; finishBatch completes them.
func (b *batchBuilder) finish() []byte {
	buf := b.buf
	binary.LittleEndian.PutUint32(buf, uint32(len(buf)-batchLenField))
	buf[offVersion] = batchVersion
	buf[offFlags] = 0
	binary.LittleEndian.PutUint32(buf[offLastDelta:], b.last)
	binary.LittleEndian.PutUint32(buf[offCount:], b.count)
	binary.LittleEndian.PutUint64(buf[offFirstTs:], uint64(b.firstTs))
	binary.LittleEndian.PutUint64(buf[offMaxTs:], uint64(b.maxTs))
	return buf
}

// finishBatch writes the base offset into a built batch and seals it with
// its CRC.
func finishBatch(batch []byte, base int64) {
	binary.LittleEndian.PutUint64(batch[offBaseOffset:], uint64(base))
	binary.LittleEndian.PutUint32(batch[offCRC:], crc32.Checksum(batch[crcCoveredStart:], crcTable))
}

func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

// encodedSize is an upper bound of a record's encoded size.
func encodedSize(r *Record) int {
	n := 3*binary.MaxVarintLen64 + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += 2*binary.MaxVarintLen64 + len(h.Key) + len(h.Value)
	}
	return n
}

// batchedSize is an upper bound of a record's size in a batch that is
// closer than encodedSize (which batch buffers were sized with: a load's
// 330-byte rows with two headers were estimated at 420 bytes, encoded in
// 345): the length fields take their real size, the offset and timestamp
// deltas their largest.
func batchedSize(r *Record) int {
	n := binary.MaxVarintLen32 + binary.MaxVarintLen64 + bytesLen(r.Key) + bytesLen(r.Value) + uvarintLen(uint64(len(r.Headers)))
	for _, h := range r.Headers {
		n += uvarintLen(uint64(len(h.Key))<<1) + len(h.Key) + bytesLen(h.Value)
	}
	return n
}

// bytesLen is the size of b as appendBytes encodes it.
func bytesLen(b []byte) int {
	if b == nil {
		return 1 // varint -1
	}
	return uvarintLen(uint64(len(b))<<1) + len(b) // zigzag of a length
}

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// recordSize is the payload size of a record as Fetch's MaxBytes counts it.
func recordSize(r *Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// Reasons a batch is rejected. They become the Reason of a CorruptionError
// or a recovery report.
var (
	errShort      = corruptReason("short batch")
	errBadLength  = corruptReason("bad length")
	errBadVersion = corruptReason("unknown batch version")
	errBadHeader  = corruptReason("bad batch header")
	errBadCRC     = corruptReason("bad crc")
	errBadOffsets = corruptReason("bad record offsets")
	errBadRecord  = corruptReason("bad record encoding")
	errNotAfter   = corruptReason("non-monotonic offset")
	errBadBlock   = corruptReason("bad compressed records")
)

// corruptReason is a short description of what check failed.
type corruptReason string

func (c corruptReason) Error() string { return string(c) }

// segmentName is the file name of a segment (or its index) by base offset.
func segmentName(base int64, suffix string) string {
	return fmt.Sprintf("%0*d%s", segmentNameDigits, base, suffix)
}
