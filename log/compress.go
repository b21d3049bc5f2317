package log

import (
	"encoding/binary"
	"fmt"

	"github.com/klauspost/compress/s2"
)

// Compression is how Produce stores the records section of the batches it
// builds (Options.Compression).
type Compression int

const (
	// CompressionS2 (the default) stores a batch's records as one S2 block
	// (klauspost/compress/s2) when that makes the batch at least a tenth
	// smaller and its records take minCompressBytes or more; otherwise as
	// they are. A real load's records sections became 3.6 times smaller, its
	// log directory 3.2 times (BENCHMARKS.md,
	// "Per-batch compression in the embedded log (logzip22, session 22)").
	CompressionS2 Compression = iota
	// CompressionNone stores every batch as it is. Batches written
	// compressed earlier stay readable.
	CompressionNone
)

func (c Compression) String() string {
	switch c {
	case CompressionS2:
		return "s2"
	case CompressionNone:
		return "none"
	}
	return fmt.Sprintf("Compression(%d)", int(c))
}

// minCompressBytes is the smallest records section Produce compresses: a
// stream's batches of a record or two gain little and would cost their
// readers an allocation each.
const minCompressBytes = 1 << 10

// compressBatch compresses the records section of a finished batch (base
// offset and CRC not yet filled in) into a buffer from get, and returns
// it: the same header, flagCompressed set, its length field for the new
// size. It returns nil (and gives the buffer back through put) when the
// section is small or compresses by less than a tenth.
func compressBatch(batch []byte, get func(int) []byte, put func([]byte)) []byte {
	body := batch[batchHeaderLen:]
	if len(body) < minCompressBytes {
		return nil
	}
	n := s2.MaxEncodedLen(len(body))
	if n < 0 {
		return nil
	}
	out := get(batchHeaderLen + n)[:batchHeaderLen+n]
	enc := s2.Encode(out[batchHeaderLen:], body)
	if len(enc) > len(body)-len(body)/10 || &enc[0] != &out[batchHeaderLen] {
		put(out)
		return nil
	}
	out = out[:batchHeaderLen+len(enc)]
	copy(out, batch[:batchHeaderLen])
	binary.LittleEndian.PutUint32(out, uint32(len(out)-batchLenField))
	out[offFlags] |= flagCompressed
	return out
}

// decompressRecords decodes the records section of a compressed batch
// into a buffer from alloc (nil: a new one). The decoded size is checked
// against the batch's limits before anything is allocated.
func decompressRecords(block []byte, h batchHeader, alloc func(int) []byte) ([]byte, error) {
	n, err := s2.DecodedLen(block)
	if err != nil || n > maxBatchLen || int64(n) < int64(h.Count)*minRecordLen {
		return nil, errBadBlock
	}
	var dst []byte
	if alloc != nil {
		dst = alloc(n)[:n]
	} else {
		dst = make([]byte, n)
	}
	out, err := s2.Decode(dst, block)
	if err != nil || len(out) != n {
		return nil, errBadBlock
	}
	return out, nil
}

// recordsBound is an upper bound of the records' payload (recordSize) of
// the batch h describes, given the bytes at its start (the header and, for
// a compressed batch, the block's decoded length after it; when those are
// missing the stored size is taken).
func recordsBound(h batchHeader, b []byte) int64 {
	if h.Flags&flagCompressed != 0 && len(b) > batchHeaderLen {
		if n, err := s2.DecodedLen(b[batchHeaderLen:]); err == nil {
			return int64(n)
		}
	}
	return h.Size()
}
