package iceberg

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/google/uuid"
)

// cdcd's own Iceberg manifest writer.
//
// iceberg-go v0.7.0's NewManifestWriter builds the manifest entry's Avro
// schema (partition type, data_file struct, field-id maps, the schema's JSON)
// for every manifest, and writes the container with a deflate codec that
// makes a new flate.Writer (600 KB–1.2 MB of state) per block. A sink commit
// writes one to three manifests, so both were paid per commit. This writer
// writes the same files (in meaning: the same schema text, file metadata,
// field ids and values, readable by iceberg-go's ReadManifest and by any
// spec reader) with:
//
//   - the container header built once per table, format version, content,
//     partition spec and schema (manifestLayouts): it is taken from the
//     header iceberg-go's own writer emits, so the schema text and the
//     metadata keys (schema, schema-id, partition-spec, partition-spec-id,
//     format-version, content) are iceberg-go's byte for byte, with
//     avro.codec dropped;
//   - the null codec (the spec allows any Avro codec; manifests are small
//     and read back rarely, and an uncompressed one costs no compressor);
//   - entries encoded by hand into the layout the header names (status,
//     snapshot_id, sequence_number, file_sequence_number, data_file{content,
//     file_path, file_format, record_count, file_size_in_bytes, the six
//     statistics maps, key_metadata, split_offsets, equality_ids,
//     sort_order_id, v3: first_row_id, referenced_data_file, content_offset,
//     content_size_in_bytes; partition last}), blocks cut at 64 KiB as
//     twmb/avro's writer cuts them.
//
// Values null where iceberg-go writes null: a nil map or slice is a null
// union branch, an empty one an empty array. Map entries are written in key
// order (iceberg-go's follow Go's map order; readers build maps from them).
//
// TestManifestWriterMatchesIcebergGo holds every field of every entry, and
// the ManifestFile each returns, equal to iceberg-go's for v2 and v3, data
// and delete manifests, each entry status and a spec with every transform.

// ocfMagic opens every Avro object container file.
var ocfMagic = [4]byte{'O', 'b', 'j', 1}

// manifestBlockBytes is where a block is cut (twmb/avro's default).
const manifestBlockBytes = 64 << 10

// manifestLayoutKey names what a manifest's header and partition layout
// depend on.
type manifestLayoutKey struct {
	table    uuid.UUID
	version  int
	content  iceberg.ManifestContent
	specID   int
	schemaID int
}

// manifestLayout is what every manifest of one key shares.
type manifestLayout struct {
	header  []byte // magic and metadata map, without the sync marker
	version int
	content iceberg.ManifestContent
	specID  int32
	parts   []partCodec // the partition struct's fields, in order
}

// manifestLayouts caches layouts; safe for concurrent use (a commit in
// flight writes its manifests beside the loop).
type manifestLayouts struct {
	mu    sync.Mutex
	m     map[manifestLayoutKey]*manifestLayout
	lists map[int]string // manifest list schema text by format version
}

func (c *manifestLayouts) get(tableID uuid.UUID, version int, content iceberg.ManifestContent, spec iceberg.PartitionSpec, sc *iceberg.Schema) (*manifestLayout, error) {
	key := manifestLayoutKey{table: tableID, version: version, content: content, specID: spec.ID(), schemaID: sc.ID}
	c.mu.Lock()
	l := c.m[key]
	c.mu.Unlock()
	if l != nil {
		return l, nil
	}
	l, err := newManifestLayout(version, content, spec, sc)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[manifestLayoutKey]*manifestLayout)
	}
	if len(c.m) >= 64 { // schemas evolve; old layouts are not needed again
		clear(c.m)
	}
	c.m[key] = l
	return l, nil
}

// newManifestLayout takes the header iceberg-go's writer emits for these
// parameters and the partition type's codecs.
func newManifestLayout(version int, content iceberg.ManifestContent, spec iceberg.PartitionSpec, sc *iceberg.Schema) (*manifestLayout, error) {
	if version != 2 && version != 3 {
		return nil, fmt.Errorf("iceberg: manifest format version %d is not supported", version)
	}
	var buf bytes.Buffer
	mw, err := iceberg.NewManifestWriter(version, &buf, spec, sc, 0, iceberg.WithManifestWriterContent(content))
	if err != nil {
		return nil, err
	}
	_ = mw.Close() // empty: it says so; the header is written
	meta, err := parseOCFHeader(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("iceberg: manifest header: %w", err)
	}
	hdr := append([]byte(nil), ocfMagic[:]...)
	kept := meta[:0]
	for _, kv := range meta {
		if kv[0] != "avro.codec" {
			kept = append(kept, kv)
		}
	}
	hdr = appendLong(hdr, int64(len(kept)))
	for _, kv := range kept {
		hdr = appendString(hdr, kv[0])
		hdr = appendString(hdr, kv[1])
	}
	hdr = appendLong(hdr, 0)
	l := &manifestLayout{header: hdr, version: version, content: content, specID: int32(spec.ID())}
	for _, f := range spec.PartitionType(sc).FieldList {
		pc, err := newPartCodec(f)
		if err != nil {
			return nil, err
		}
		l.parts = append(l.parts, pc)
	}
	return l, nil
}

// parseOCFHeader returns the metadata of an Avro container's header, in
// order.
func parseOCFHeader(b []byte) ([][2]string, error) {
	if len(b) < 4 || !bytes.Equal(b[:4], ocfMagic[:]) {
		return nil, errors.New("not an Avro container")
	}
	b = b[4:]
	var out [][2]string
	for {
		n, k := binary.Varint(b)
		if k <= 0 {
			return nil, errors.New("bad metadata block count")
		}
		b = b[k:]
		if n == 0 {
			return out, nil
		}
		if n < 0 {
			n = -n
			if _, k = binary.Varint(b); k <= 0 {
				return nil, errors.New("bad metadata block size")
			}
			b = b[k:]
		}
		for range n {
			var kv [2]string
			for i := range kv {
				l, k := binary.Varint(b)
				if k <= 0 || l < 0 || int64(len(b)-k) < l {
					return nil, errors.New("bad metadata entry")
				}
				kv[i] = string(b[k : k+int(l)])
				b = b[k+int(l):]
			}
			out = append(out, kv)
		}
	}
}

// manifestWriter writes one manifest.
type manifestWriter struct {
	l      *manifestLayout
	out    io.Writer
	snapID int64
	sync   [16]byte
	buf    []byte // the current block's entries
	count  int64  // entries in buf
	err    error

	nAdded, nExisting, nDeleted      int32
	addedRows, existingRows, delRows int64
	minSeq                           int64
	stats                            []partStats
	closed                           bool
}

// newManifestWriter starts a manifest of layout l on out, for the snapshot
// snapID.
func newManifestWriter(l *manifestLayout, out io.Writer, snapID int64) (*manifestWriter, error) {
	w := &manifestWriter{l: l, out: out, snapID: snapID, minSeq: -1, stats: make([]partStats, len(l.parts)), sync: newSyncMarker()}
	hdr := make([]byte, 0, len(l.header)+16)
	hdr = append(append(hdr, l.header...), w.sync[:]...)
	if _, err := out.Write(hdr); err != nil {
		return nil, err
	}
	w.buf = make([]byte, 0, 4096)
	return w, nil
}

// add writes e as ADDED by this snapshot (iceberg-go's ManifestWriter.Add).
func (w *manifestWriter) add(e iceberg.ManifestEntry) error {
	snap := w.snapID
	return w.write(iceberg.EntryStatusADDED, &snap, e.SequenceNum(), nil, e)
}

// existing writes e as EXISTING with its snapshot and sequence numbers.
func (w *manifestWriter) existing(e iceberg.ManifestEntry) error {
	snap := e.SnapshotID()
	return w.write(iceberg.EntryStatusEXISTING, &snap, e.SequenceNum(), e.FileSequenceNum(), e)
}

// delete writes e as DELETED by this snapshot.
func (w *manifestWriter) delete(e iceberg.ManifestEntry) error {
	snap := w.snapID
	return w.write(iceberg.EntryStatusDELETED, &snap, e.SequenceNum(), e.FileSequenceNum(), e)
}

func (w *manifestWriter) write(status iceberg.ManifestEntryStatus, snap *int64, seq int64, fileSeq *int64, e iceberg.ManifestEntry) error {
	if w.closed {
		return errors.New("iceberg: manifest writer is closed")
	}
	if w.err != nil {
		return w.err
	}
	df := e.DataFile()
	switch df.ContentType() {
	case iceberg.EntryContentData:
		if w.l.content != iceberg.ManifestContentData {
			return fmt.Errorf("%w: data file cannot be written to a delete manifest", iceberg.ErrInvalidArgument)
		}
	case iceberg.EntryContentPosDeletes, iceberg.EntryContentEqDeletes:
		if w.l.content != iceberg.ManifestContentDeletes {
			return fmt.Errorf("%w: delete file cannot be written to a data manifest", iceberg.ErrInvalidArgument)
		}
	default:
		return fmt.Errorf("%w: invalid manifest entry content: %d", iceberg.ErrInvalidArgument, df.ContentType())
	}
	if seq == -1 {
		if *snap != w.snapID {
			return fmt.Errorf("found unassigned sequence number for entry from snapshot: %d", *snap)
		}
		if status != iceberg.EntryStatusADDED {
			return errors.New("only entries with status ADDED can be missing a sequence number")
		}
	}
	start := len(w.buf)
	b := appendLong(w.buf, int64(status))
	b = appendOptLong(b, snap)
	if seq == -1 {
		b = append(b, 0)
	} else {
		b = appendOptLong(b, &seq)
	}
	b = appendOptLong(b, fileSeq)
	b, err := w.appendDataFile(b, df)
	if err != nil {
		w.buf = w.buf[:start]
		return err
	}
	w.buf = b
	w.count++
	count := df.Count()
	switch status {
	case iceberg.EntryStatusADDED:
		w.nAdded++
		w.addedRows += count
	case iceberg.EntryStatusEXISTING:
		w.nExisting++
		w.existingRows += count
	default:
		w.nDeleted++
		w.delRows += count
	}
	if status != iceberg.EntryStatusDELETED && seq >= 0 && (w.minSeq < 0 || seq < w.minSeq) {
		w.minSeq = seq
	}
	if len(w.buf) >= manifestBlockBytes {
		return w.flush()
	}
	return nil
}

func (w *manifestWriter) appendDataFile(b []byte, df iceberg.DataFile) ([]byte, error) {
	b = appendLong(b, int64(df.ContentType()))
	b = appendString(b, df.FilePath())
	b = appendString(b, string(df.FileFormat()))
	b = appendLong(b, df.Count())
	b = appendLong(b, df.FileSizeBytes())
	b = appendCountMap(b, df.ColumnSizes())
	b = appendCountMap(b, df.ValueCounts())
	b = appendCountMap(b, df.NullValueCounts())
	b = appendCountMap(b, df.NaNValueCounts())
	b = appendBoundMap(b, df.LowerBoundValues())
	b = appendBoundMap(b, df.UpperBoundValues())
	if km := df.KeyMetadata(); km == nil {
		b = append(b, 0)
	} else {
		b = appendBytes(append(b, 2), km)
	}
	b = appendOptLongs(b, df.SplitOffsets())
	b = appendOptLongs(b, df.EqualityFieldIDs())
	if so := df.SortOrderID(); so == nil {
		b = append(b, 0)
	} else {
		b = appendLong(append(b, 2), int64(*so))
	}
	if w.l.version >= 3 {
		b = appendOptLong(b, df.FirstRowID())
		if ref := df.ReferencedDataFile(); ref == nil {
			b = append(b, 0)
		} else {
			b = appendString(append(b, 2), *ref)
		}
		b = appendOptLong(b, df.ContentOffset())
		b = appendOptLong(b, df.ContentSizeInBytes())
	}
	if len(w.l.parts) == 0 {
		return b, nil
	}
	part := df.Partition()
	for i, pc := range w.l.parts {
		var err error
		if b, err = pc.append(b, part[pc.id], &w.stats[i]); err != nil {
			return nil, fmt.Errorf("iceberg: partition field %s of %s: %w", pc.name, df.FilePath(), err)
		}
	}
	return b, nil
}

func (w *manifestWriter) flush() error {
	if w.count == 0 {
		return nil
	}
	var head [2 * binary.MaxVarintLen64]byte
	h := appendLong(appendLong(head[:0], w.count), int64(len(w.buf)))
	for _, p := range [][]byte{h, w.buf, w.sync[:]} {
		if _, err := w.out.Write(p); err != nil {
			w.err = err
			return err
		}
	}
	w.buf, w.count = w.buf[:0], 0
	return nil
}

// close writes the last block. A manifest with no entries is an error
// (iceberg.ErrEmptyManifest), as iceberg-go's writer says.
func (w *manifestWriter) close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.err == nil {
		w.err = w.flush()
	}
	if w.err == nil && w.nAdded+w.nExisting+w.nDeleted == 0 {
		w.err = iceberg.ErrEmptyManifest
	}
	return w.err
}

// manifestFile is the written manifest's entry for the manifest list, as
// iceberg-go's ToManifestFile gives it (sequence numbers unassigned unless
// an entry carried one; first_row_id left to the list writer).
// REQUIRES: close returned nil; length is the file's length after it.
func (w *manifestWriter) manifestFile(path string, length int64) (iceberg.ManifestFile, error) {
	if err := w.close(); err != nil {
		return nil, err
	}
	parts := make([]iceberg.FieldSummary, len(w.l.parts))
	for i, pc := range w.l.parts {
		parts[i] = w.stats[i].summary(pc)
	}
	return iceberg.NewManifestFile(w.l.version, path, length, w.l.specID, w.snapID).
		Content(w.l.content).
		SequenceNum(-1, w.minSeq).
		AddedFiles(w.nAdded).ExistingFiles(w.nExisting).DeletedFiles(w.nDeleted).
		AddedRows(w.addedRows).ExistingRows(w.existingRows).DeletedRows(w.delRows).
		Partitions(parts).
		Build(), nil
}

// Avro binary encoding.

func appendLong(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

func appendString(b []byte, s string) []byte {
	return append(appendLong(b, int64(len(s))), s...)
}

func appendBytes(b []byte, p []byte) []byte {
	return append(appendLong(b, int64(len(p))), p...)
}

// appendOptLong writes a ["null","long"] union.
func appendOptLong(b []byte, v *int64) []byte {
	if v == nil {
		return append(b, 0)
	}
	return appendLong(append(b, 2), *v)
}

// appendOptLongs writes a nullable array of longs (or ints: the same
// encoding).
func appendOptLongs[T int | int64](b []byte, xs []T) []byte {
	if xs == nil {
		return append(b, 0)
	}
	b = append(b, 2)
	if len(xs) > 0 {
		b = appendLong(b, int64(len(xs)))
		for _, x := range xs {
			b = appendLong(b, int64(x))
		}
	}
	return append(b, 0)
}

// newSyncMarker is a container file's random sync marker.
func newSyncMarker() (m [16]byte) {
	binary.LittleEndian.PutUint64(m[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(m[8:], rand.Uint64())
	return m
}

// appendCountMap writes a nullable array of {int key, long value} records
// in key order.
func appendCountMap(b []byte, m map[int]int64) []byte {
	if m == nil {
		return append(b, 0)
	}
	b = append(b, 2)
	if len(m) > 0 {
		b = appendLong(b, int64(len(m)))
		for _, k := range sortedKeys(m) {
			b = appendLong(appendLong(b, int64(k)), m[k])
		}
	}
	return append(b, 0)
}

// appendBoundMap writes a nullable array of {int key, bytes value} records
// in key order.
func appendBoundMap(b []byte, m map[int][]byte) []byte {
	if m == nil {
		return append(b, 0)
	}
	b = append(b, 2)
	if len(m) > 0 {
		b = appendLong(b, int64(len(m)))
		for _, k := range sortedKeys(m) {
			b = appendBytes(appendLong(b, int64(k)), m[k])
		}
	}
	return append(b, 0)
}

func sortedKeys[V any](m map[int]V) []int {
	var small [32]int
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Partition values.

// partKind is how a partition field's values are encoded and compared.
type partKind uint8

const (
	pkUnknown partKind = iota // Avro null, not a union
	pkBool                    // boolean
	pkInt                     // int: int, date
	pkLong                    // long: long, time, timestamps
	pkFloat                   // float
	pkDouble                  // double
	pkString                  // string
	pkBytes                   // bytes: binary
	pkFixed                   // fixed: fixed[n], uuid
	pkDecimal                 // fixed: two's complement, sign-extended to n
)

// partCodec encodes one partition field.
type partCodec struct {
	id   int
	name string
	typ  iceberg.Type
	kind partKind
	size int // fixed and decimal: bytes
}

func newPartCodec(f iceberg.NestedField) (partCodec, error) {
	pc := partCodec{id: f.ID, name: f.Name, typ: f.Type}
	switch t := f.Type.(type) {
	case iceberg.UnknownType:
		pc.kind = pkUnknown
	case iceberg.BooleanType:
		pc.kind = pkBool
	case iceberg.Int32Type, iceberg.DateType:
		pc.kind = pkInt
	case iceberg.Int64Type, iceberg.TimeType, iceberg.TimestampType, iceberg.TimestampTzType,
		iceberg.TimestampNsType, iceberg.TimestampTzNsType:
		pc.kind = pkLong
	case iceberg.Float32Type:
		pc.kind = pkFloat
	case iceberg.Float64Type:
		pc.kind = pkDouble
	case iceberg.StringType:
		pc.kind = pkString
	case iceberg.BinaryType:
		pc.kind = pkBytes
	case iceberg.FixedType:
		pc.kind, pc.size = pkFixed, t.Len()
	case iceberg.UUIDType:
		pc.kind, pc.size = pkFixed, 16
	case iceberg.DecimalType:
		pc.kind, pc.size = pkDecimal, decimalFixedBytes(t.Precision())
		if pc.size < 0 {
			return pc, fmt.Errorf("iceberg: partition field %s: decimal precision %d", f.Name, t.Precision())
		}
	default:
		return pc, fmt.Errorf("iceberg: unsupported partition type: %s", f.Type)
	}
	return pc, nil
}

// decimalFixedBytes is the fixed size holding a decimal of precision p (the
// spec's table; iceberg-go's internal.DecimalRequiredBytes).
func decimalFixedBytes(p int) int {
	if p <= 0 || p >= 40 {
		return -1
	}
	return decimalLengths[p]
}

var decimalLengths = [...]int{
	1, 1, 1, 2, 2, 3, 3, 4, 4, 4, 5, 5,
	6, 6, 6, 7, 7, 8, 8, 9, 9, 9, 10, 10, 11, 11, 11, 12, 12,
	13, 13, 13, 14, 14, 15, 15, 16, 16, 16, 17,
}

// partStats is one partition field's summary for the manifest list.
type partStats struct {
	null, nan bool
	min, max  any
}

// append writes v (nil: null) and counts it in st.
func (pc partCodec) append(b []byte, v any, st *partStats) ([]byte, error) {
	if pc.kind == pkUnknown {
		st.null = true
		return b, nil
	}
	if v == nil {
		st.null = true
		return append(b, 0), nil
	}
	cv, ok := pc.convert(v)
	if !ok {
		return nil, fmt.Errorf("a %T is not a %s", v, pc.typ)
	}
	v = cv
	b = append(b, 2)
	switch pc.kind {
	case pkBool:
		if v.(bool) {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	case pkInt:
		b = appendLong(b, int64(v.(int32)))
	case pkLong:
		b = appendLong(b, v.(int64))
	case pkFloat:
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v.(float32)))
	case pkDouble:
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v.(float64)))
	case pkString:
		b = appendString(b, v.(string))
	case pkBytes:
		b = appendBytes(b, v.([]byte))
	case pkFixed:
		p := v.([]byte)
		if len(p) != pc.size {
			return nil, fmt.Errorf("%d bytes for a fixed[%d]", len(p), pc.size)
		}
		b = append(b, p...)
	case pkDecimal:
		p, err := iceberg.DecimalLiteral(v.(iceberg.Decimal)).MarshalBinary()
		if err != nil {
			return nil, err
		}
		if p, err = fitDecimal(p, pc.size); err != nil {
			return nil, err
		}
		b = append(b, p...)
	}
	st.update(pc, v)
	return b, nil
}

// convert gives v as the field's Go value: bool, int32, int64, float32,
// float64, string, []byte (binary, fixed, uuid) or iceberg.Decimal —
// accepting what iceberg-go's writer accepts (Go numbers of any kind,
// iceberg's named types, literals).
func (pc partCodec) convert(v any) (any, bool) {
	if lit, ok := v.(iceberg.Literal); ok {
		switch lit.(type) {
		case iceberg.AboveMaxLiteral, iceberg.BelowMinLiteral:
			return nil, false
		}
		v = lit.Any()
	}
	switch pc.kind {
	case pkBool:
		x, ok := v.(bool)
		return x, ok
	case pkInt:
		if x, ok := asInt64(v); ok {
			return int32(x), true
		}
		if x, ok := asFloat64(v); ok {
			return int32(x), true
		}
	case pkLong:
		if x, ok := asInt64(v); ok {
			return x, true
		}
		if x, ok := asFloat64(v); ok {
			return int64(x), true
		}
	case pkFloat:
		if x, ok := v.(float32); ok {
			return x, true
		}
		if x, ok := asFloat64(v); ok {
			return float32(x), true
		}
		if x, ok := asInt64(v); ok {
			return float32(x), true
		}
	case pkDouble:
		if x, ok := asFloat64(v); ok {
			return x, true
		}
		if x, ok := asInt64(v); ok {
			return float64(x), true
		}
	case pkString:
		switch x := v.(type) {
		case string:
			return x, true
		case []byte:
			return string(x), true
		}
	case pkBytes, pkFixed:
		switch x := v.(type) {
		case []byte:
			return x, true
		case string:
			return []byte(x), true
		case uuid.UUID:
			return x[:], true
		case [16]byte:
			return x[:], true
		}
	case pkDecimal:
		x, ok := v.(iceberg.Decimal)
		return x, ok
	}
	return nil, false
}

func asInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint:
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), true
	case iceberg.Date:
		return int64(x), true
	case iceberg.Time:
		return int64(x), true
	case iceberg.Timestamp:
		return int64(x), true
	case iceberg.TimestampNano:
		return int64(x), true
	case time.Duration:
		return int64(x), true
	}
	return 0, false
}

func asFloat64(v any) (float64, bool) {
	switch x := v.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// fitDecimal sign-extends or trims a two's complement big-endian value to
// size bytes.
func fitDecimal(p []byte, size int) ([]byte, error) {
	if len(p) == size {
		return p, nil
	}
	sign := byte(0)
	if len(p) > 0 && p[0]&0x80 != 0 {
		sign = 0xff
	}
	if len(p) < size {
		out := make([]byte, size)
		for i := range size - len(p) {
			out[i] = sign
		}
		copy(out[size-len(p):], p)
		return out, nil
	}
	kept := p[len(p)-size:]
	sign = 0
	if kept[0]&0x80 != 0 {
		sign = 0xff
	}
	for _, c := range p[:len(p)-size] {
		if c != sign {
			return nil, fmt.Errorf("decimal value of %d bytes does not fit fixed size %d", len(p), size)
		}
	}
	return kept, nil
}

func (st *partStats) update(pc partCodec, v any) {
	switch x := v.(type) {
	case float32:
		if x != x {
			st.nan = true
			return
		}
	case float64:
		if x != x {
			st.nan = true
			return
		}
	}
	if st.min == nil {
		v = cloneValue(v)
		st.min, st.max = v, v
		return
	}
	lo, hi := comparePart(pc, v, st.min) < 0, comparePart(pc, v, st.max) > 0
	if lo || hi {
		v = cloneValue(v)
	}
	if lo {
		st.min = v
	}
	if hi {
		st.max = v
	}
}

func cloneValue(v any) any {
	if p, ok := v.([]byte); ok {
		return slices.Clone(p)
	}
	return v
}

// comparePart orders two converted values of pc's field as iceberg-go's
// literal comparators do.
func comparePart(pc partCodec, a, b any) int {
	switch x := a.(type) {
	case bool:
		y := b.(bool)
		switch {
		case x == y:
			return 0
		case !x:
			return -1
		}
		return 1
	case int32:
		return cmp.Compare(x, b.(int32))
	case int64:
		return cmp.Compare(x, b.(int64))
	case float32:
		return cmp.Compare(x, b.(float32))
	case float64:
		return cmp.Compare(x, b.(float64))
	case string:
		return cmp.Compare(x, b.(string))
	case []byte:
		return bytes.Compare(x, b.([]byte))
	case iceberg.Decimal:
		return iceberg.DecimalLiteral(x).Comparator()(x, b.(iceberg.Decimal))
	}
	return 0
}

// summary is the field's summary as iceberg-go's writer gives it: bounds in
// the spec's single-value serialization of the partition type.
func (st *partStats) summary(pc partCodec) iceberg.FieldSummary {
	nan := st.nan
	fs := iceberg.FieldSummary{ContainsNull: st.null, ContainsNaN: &nan}
	if pc.kind == pkUnknown || st.min == nil {
		return fs
	}
	lo, hi := boundBytes(pc, st.min), boundBytes(pc, st.max)
	fs.LowerBound, fs.UpperBound = &lo, &hi
	return fs
}

func boundBytes(pc partCodec, v any) []byte {
	var lit iceberg.Literal
	switch x := v.(type) {
	case bool:
		lit = iceberg.NewLiteral(x)
	case int32:
		if _, ok := pc.typ.(iceberg.DateType); ok {
			lit = iceberg.NewLiteral(iceberg.Date(x))
		} else {
			lit = iceberg.NewLiteral(x)
		}
	case int64:
		lit = iceberg.NewLiteral(x)
	case float32:
		lit = iceberg.NewLiteral(x)
	case float64:
		lit = iceberg.NewLiteral(x)
	case string:
		lit = iceberg.NewLiteral(x)
	case []byte:
		if _, ok := pc.typ.(iceberg.UUIDType); ok {
			return slices.Clone(x)
		}
		lit = iceberg.NewLiteral(x)
	case iceberg.Decimal:
		lit = iceberg.NewLiteral(x)
	default:
		return nil
	}
	p, _ := lit.MarshalBinary()
	return p
}

// The manifest list.
//
// iceberg-go's list writers take a prebuilt schema but encode each
// ManifestFile by reflection and deflate the file, a new compressor per
// list; a commit's list holds every live manifest of the table, so that
// cost grows with the table's history until maintenance merges them. This
// writer writes the same list (iceberg-go's schema text, its metadata keys:
// format-version, snapshot-id, sequence-number, first-row-id (v3),
// parent-snapshot-id) with the null codec, and assigns sequence numbers and
// v3 first row ids as ManifestListWriter.AddManifests does.

// listSchema returns iceberg-go's manifest list schema text for version.
func (c *manifestLayouts) listSchema(version int) (string, error) {
	c.mu.Lock()
	s, ok := c.lists[version]
	c.mu.Unlock()
	if ok {
		return s, nil
	}
	var buf bytes.Buffer
	var err error
	switch version {
	case 2:
		_, err = iceberg.NewManifestListWriterV2(&buf, 1, 1, nil)
	case 3:
		_, err = iceberg.NewManifestListWriterV3(&buf, 1, 1, 0, nil)
	default:
		return "", fmt.Errorf("iceberg: format version %d is not supported", version)
	}
	if err != nil {
		return "", err
	}
	meta, err := parseOCFHeader(buf.Bytes())
	if err != nil {
		return "", fmt.Errorf("iceberg: manifest list header: %w", err)
	}
	for _, kv := range meta {
		if kv[0] == "avro.schema" {
			s, ok = kv[1], true
		}
	}
	if !ok {
		return "", errors.New("iceberg: manifest list header has no schema")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lists == nil {
		c.lists = make(map[int]string)
	}
	c.lists[version] = s
	return s, nil
}

// writeList writes the manifest list of snapshot snapID (sequence number
// seq, parent or nil; v3: rows get ids from firstRowID on) to out, and
// returns the next unassigned row id (v3; firstRowID in v2).
func (c *manifestLayouts) writeList(out io.Writer, version int, snapID, seq, firstRowID int64, parent *int64, manifests []iceberg.ManifestFile) (nextRowID int64, err error) {
	schema, err := c.listSchema(version)
	if err != nil {
		return 0, err
	}
	if version >= 3 && firstRowID < 0 {
		return 0, fmt.Errorf("%w: first row ID must be non-negative: %d", iceberg.ErrInvalidArgument, firstRowID)
	}
	parentText := "null"
	if parent != nil {
		parentText = fmt.Sprint(*parent)
	}
	meta := [][2]string{
		{"avro.schema", schema},
		{"format-version", fmt.Sprint(version)},
		{"snapshot-id", fmt.Sprint(snapID)},
		{"sequence-number", fmt.Sprint(seq)},
	}
	if version >= 3 {
		meta = append(meta, [2]string{"first-row-id", fmt.Sprint(firstRowID)})
	}
	meta = append(meta, [2]string{"parent-snapshot-id", parentText})
	sync := newSyncMarker()
	b := make([]byte, 0, len(schema)+256+160*len(manifests))
	b = append(b, ocfMagic[:]...)
	b = appendLong(b, int64(len(meta)))
	for _, kv := range meta {
		b = appendString(appendString(b, kv[0]), kv[1])
	}
	b = append(appendLong(b, 0), sync[:]...)
	nextRowID = firstRowID
	var block []byte
	count := 0
	for _, m := range manifests {
		if m.Version() > version {
			return 0, fmt.Errorf("%w: manifest list v%d cannot reference v%d manifest files", iceberg.ErrInvalidArgument, version, m.Version())
		}
		mseq, minSeq := m.SequenceNum(), m.MinSequenceNum()
		if mseq == -1 || minSeq == -1 {
			if m.SnapshotID() != snapID {
				return 0, fmt.Errorf("found unassigned sequence number for a manifest from snapshot %d != %d", snapID, m.SnapshotID())
			}
			if mseq == -1 {
				mseq = seq
			}
			if minSeq == -1 {
				minSeq = seq
			}
		}
		block = appendString(block, m.FilePath())
		block = appendLong(block, m.Length())
		block = appendLong(block, int64(m.PartitionSpecID()))
		block = appendLong(block, int64(m.ManifestContent()))
		block = appendLong(block, mseq)
		block = appendLong(block, minSeq)
		block = appendLong(block, m.SnapshotID())
		block = appendLong(block, int64(m.AddedDataFiles()))
		block = appendLong(block, int64(m.ExistingDataFiles()))
		block = appendLong(block, int64(m.DeletedDataFiles()))
		block = appendSummaries(block, m.Partitions())
		block = appendLong(block, m.AddedRows())
		block = appendLong(block, m.ExistingRows())
		block = appendLong(block, m.DeletedRows())
		if km := m.KeyMetadata(); km == nil {
			block = append(block, 0)
		} else {
			block = appendBytes(append(block, 2), km)
		}
		if version >= 3 {
			first := m.FirstRowID()
			if first == nil && m.ManifestContent() == iceberg.ManifestContentData {
				existing, added := m.ExistingRows(), m.AddedRows()
				if existing < 0 || added < 0 || existing > math.MaxInt64-nextRowID || added > math.MaxInt64-nextRowID-existing {
					return 0, fmt.Errorf("manifest %q: %w: cannot assign row ids from %d to %d existing and %d added rows", m.FilePath(), iceberg.ErrInvalidArgument, nextRowID, existing, added)
				}
				id := nextRowID
				first = &id
				nextRowID += existing + added
			}
			block = appendOptLong(block, first)
		}
		count++
	}
	if count > 0 {
		b = appendLong(appendLong(b, int64(count)), int64(len(block)))
		b = append(append(b, block...), sync[:]...)
	}
	if _, err := out.Write(b); err != nil {
		return 0, err
	}
	return nextRowID, nil
}

// appendSummaries writes a manifest's partition field summaries (a nullable
// array of r508 records).
func appendSummaries(b []byte, parts []iceberg.FieldSummary) []byte {
	if parts == nil {
		return append(b, 0)
	}
	b = append(b, 2)
	if len(parts) > 0 {
		b = appendLong(b, int64(len(parts)))
		for _, p := range parts {
			if p.ContainsNull {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
			switch {
			case p.ContainsNaN == nil:
				b = append(b, 0)
			case *p.ContainsNaN:
				b = append(b, 2, 1)
			default:
				b = append(b, 2, 0)
			}
			for _, bound := range []*[]byte{p.LowerBound, p.UpperBound} {
				if bound == nil {
					b = append(b, 0)
				} else {
					b = appendBytes(append(b, 2), *bound)
				}
			}
		}
	}
	return append(b, 0)
}
