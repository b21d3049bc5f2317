package log

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"path/filepath"
	"sort"
)

// Index file layout (see the package doc). Frozen.
const (
	indexVersion     = 1
	indexHeaderLen   = 36
	offsetEntryLen   = 12 // offset int64, position uint32
	timeEntryLen     = 16 // max earlier timestamp int64, offset int64
	offsetIndexMagic = "CDXO"
	timeIndexMagic   = "CDXT"
)

// noTimestamp is the max timestamp of an empty range.
const noTimestamp = math.MinInt64

// indexEntry points at the start of a batch inside a segment.
type indexEntry struct {
	off       int64 // base offset of the batch
	pos       int64 // byte position of the batch
	prevMaxTs int64 // largest timestamp of all records before pos (ms)
}

// lookupOffset returns the position of the last indexed batch whose base
// offset is at most off (0 if none): scanning from there finds off.
func lookupOffset(idx []indexEntry, off int64) int64 {
	i := sort.Search(len(idx), func(i int) bool { return idx[i].off > off })
	if i == 0 {
		return 0
	}
	return idx[i-1].pos
}

// lookupTime returns a position before which no record has a timestamp at
// or after ts: the last indexed batch all of whose predecessors are older.
func lookupTime(idx []indexEntry, ts int64) int64 {
	i := sort.Search(len(idx), func(i int) bool { return idx[i].prevMaxTs >= ts })
	if i == 0 {
		return 0
	}
	return idx[i-1].pos
}

// segmentSummary is what an index file records about its segment.
type segmentSummary struct {
	size  int64 // bytes of the segment the index describes
	next  int64 // offset after the segment's last record
	maxTs int64 // largest timestamp in the segment (ms)
}

// writeIndexFiles writes both index files of a closed segment (temp file
// and rename each). They need no fsync: a torn or stale index fails its
// checks on load and is rebuilt from the segment.
func writeIndexFiles(fs FS, dir string, base int64, sum segmentSummary, idx []indexEntry) error {
	off := indexFile(offsetIndexMagic, sum, len(idx), offsetEntryLen)
	tim := indexFile(timeIndexMagic, sum, len(idx), timeEntryLen)
	for _, e := range idx {
		off = binary.LittleEndian.AppendUint64(off, uint64(e.off))
		off = binary.LittleEndian.AppendUint32(off, uint32(e.pos))
		tim = binary.LittleEndian.AppendUint64(tim, uint64(e.prevMaxTs))
		tim = binary.LittleEndian.AppendUint64(tim, uint64(e.off))
	}
	off = binary.LittleEndian.AppendUint32(off, crc32.Checksum(off, crcTable))
	tim = binary.LittleEndian.AppendUint32(tim, crc32.Checksum(tim, crcTable))
	if err := replaceFile(fs, filepath.Join(dir, segmentName(base, offsetIndexSuffix)), off, false); err != nil {
		return err
	}
	return replaceFile(fs, filepath.Join(dir, segmentName(base, timeIndexSuffix)), tim, false)
}

func indexFile(magic string, sum segmentSummary, n, entryLen int) []byte {
	b := make([]byte, 0, indexHeaderLen+n*entryLen+4)
	b = append(b, magic...)
	b = append(b, indexVersion, 0, 0, 0)
	b = binary.LittleEndian.AppendUint64(b, uint64(sum.size))
	b = binary.LittleEndian.AppendUint64(b, uint64(sum.next))
	b = binary.LittleEndian.AppendUint64(b, uint64(sum.maxTs))
	return binary.LittleEndian.AppendUint32(b, uint32(n))
}

// errStaleIndex: an index file does not describe the segment as it is.
var errStaleIndex = errors.New("stale index")

// loadIndexFiles reads both index files of a segment of the given size. Any
// mismatch (missing file, bad CRC, other size, entries out of order or out
// of the segment) returns an error, and the caller rescans the segment.
func loadIndexFiles(fs FS, dir string, base, size int64) (segmentSummary, []indexEntry, error) {
	offs, sum, err := readIndexFile(fs, filepath.Join(dir, segmentName(base, offsetIndexSuffix)), offsetIndexMagic, offsetEntryLen, size)
	if err != nil {
		return sum, nil, err
	}
	tims, sum2, err := readIndexFile(fs, filepath.Join(dir, segmentName(base, timeIndexSuffix)), timeIndexMagic, timeEntryLen, size)
	if err != nil {
		return sum, nil, err
	}
	if sum != sum2 || len(offs)/offsetEntryLen != len(tims)/timeEntryLen || (size > 0 && len(offs) == 0) {
		return sum, nil, errStaleIndex
	}
	n := len(offs) / offsetEntryLen
	idx := make([]indexEntry, n)
	prev := indexEntry{off: base - 1, pos: -1, prevMaxTs: noTimestamp}
	for i := range idx {
		o, t := offs[i*offsetEntryLen:], tims[i*timeEntryLen:]
		e := indexEntry{
			off:       int64(binary.LittleEndian.Uint64(o)),
			pos:       int64(binary.LittleEndian.Uint32(o[8:])),
			prevMaxTs: int64(binary.LittleEndian.Uint64(t)),
		}
		if int64(binary.LittleEndian.Uint64(t[8:])) != e.off || e.off <= prev.off || e.pos <= prev.pos ||
			e.pos >= size || e.prevMaxTs < prev.prevMaxTs || e.off >= sum.next {
			return sum, nil, errStaleIndex
		}
		idx[i], prev = e, e
	}
	if size > 0 && (idx[0].pos != 0 || idx[0].off < base) {
		return sum, nil, errStaleIndex
	}
	return sum, idx, nil
}

// readIndexFile returns the entry bytes of one index file after checking
// magic, version, CRC and that it describes a segment of the given size.
func readIndexFile(fs FS, path, magic string, entryLen int, size int64) ([]byte, segmentSummary, error) {
	b, err := readFile(fs, path)
	if err != nil {
		return nil, segmentSummary{}, err
	}
	if len(b) < indexHeaderLen+4 || string(b[:4]) != magic || b[4] != indexVersion {
		return nil, segmentSummary{}, errStaleIndex
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, segmentSummary{}, errStaleIndex
	}
	sum := segmentSummary{
		size:  int64(binary.LittleEndian.Uint64(b[8:])),
		next:  int64(binary.LittleEndian.Uint64(b[16:])),
		maxTs: int64(binary.LittleEndian.Uint64(b[24:])),
	}
	n := int(binary.LittleEndian.Uint32(b[32:]))
	if sum.size != size || len(body) != indexHeaderLen+n*entryLen {
		return nil, sum, errStaleIndex
	}
	return body[indexHeaderLen:], sum, nil
}
