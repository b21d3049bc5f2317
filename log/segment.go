package log

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// segment is one file of a partition. Its fields below mu-of-partition are
// read by fetchers under the partition's lock; once the segment is closed
// (no longer the partition's last) they never change.
type segment struct {
	base int64
	path string
	f    File // read-write for the active segment, read-only otherwise

	// Guarded by the owning partition's mu.
	size    int64        // bytes readers may read: durable and verified
	next    int64        // offset after the segment's last record
	maxTs   int64        // largest record timestamp, Unix ms; noTimestamp if empty
	idx     []indexEntry // sparse index; appended to only beyond readers' len
	created time.Time    // wall time of the first append since open, for SegmentMaxAge

	// Reference count: readers hold a reference while they read the file,
	// so a segment removed by retention or replaced by compaction is closed
	// only when the last reader is done.
	rc struct {
		sync.Mutex
		refs    int
		retired bool
	}
}

// acquire takes a reader reference. REQUIRES: the partition's mu.
func (s *segment) acquire() {
	s.rc.Lock()
	s.rc.refs++
	s.rc.Unlock()
}

// release drops a reader reference, closing a retired segment's file when
// it was the last.
func (s *segment) release() {
	s.rc.Lock()
	s.rc.refs--
	done := s.rc.retired && s.rc.refs == 0
	s.rc.Unlock()
	if done && s.f != nil {
		_ = s.f.Close()
	}
}

// retire marks the segment as no longer part of its partition; its file is
// closed now or when the last reader releases it.
func (s *segment) retire() {
	s.rc.Lock()
	s.rc.retired = true
	done := s.rc.refs == 0
	s.rc.Unlock()
	if done && s.f != nil {
		_ = s.f.Close()
	}
}

// summary is the segment's state as an index file records it.
// REQUIRES: the partition's mu, or exclusive ownership.
func (s *segment) summaryLocked() segmentSummary {
	return segmentSummary{size: s.size, next: s.next, maxTs: s.maxTs}
}

// createSegment creates an empty segment file and fsyncs its directory.
func createSegment(fs FS, dir string, base int64) (*segment, error) {
	path := filepath.Join(dir, segmentName(base, segmentSuffix))
	f, err := fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syncDir(fs, dir); err != nil {
		_ = f.Close()
		return nil, err
	}
	return &segment{base: base, path: path, f: f, next: base, maxTs: noTimestamp}, nil
}

// batchReader reads verified batches of one segment file sequentially
// through a buffer. With fresh set, each refill takes a new buffer (from
// alloc if set: FetchBuffers.Window) so that slices returned earlier (and
// records aliasing them) stay valid.
type batchReader struct {
	alloc  func(n int) []byte
	f      File
	pos    int64 // position of the next batch
	limit  int64 // bytes of the file that may be read
	buf    []byte
	bufPos int64 // file position of buf[0]
	chunk  int
	fresh  bool
	// starts, when set, are known batch starts (the segment's index): a
	// refill ends at the last of them it reaches (with that batch's
	// header) instead of inside a batch, which the next fetch would read
	// again (a load's fetches read a quarter more than they returned).
	starts []indexEntry
}

func newBatchReader(f File, pos, limit int64, chunk int, fresh bool) *batchReader {
	return &batchReader{f: f, pos: pos, limit: limit, chunk: max(chunk, batchHeaderLen), fresh: fresh}
}

// next returns the next batch, its header, and its position. It returns
// io.EOF at limit and a corruptReason (errShort, errBadCRC, ...) for a bad
// batch, leaving pos at it.
func (r *batchReader) next() ([]byte, batchHeader, int64, error) {
	if r.pos >= r.limit {
		return nil, batchHeader{}, r.pos, io.EOF
	}
	hb, err := r.window(batchHeaderLen)
	if err != nil {
		return nil, batchHeader{}, r.pos, err
	}
	h, err := parseBatchHeader(hb)
	if err != nil {
		return nil, h, r.pos, err
	}
	b, err := r.window(h.Size())
	if err != nil {
		return nil, h, r.pos, err
	}
	if _, err := checkBatch(b); err != nil {
		return nil, h, r.pos, err
	}
	pos := r.pos
	r.pos += h.Size()
	return b, h, pos, nil
}

// fits reports whether the next batch is at most budget bytes (or cannot
// be sized: then next reports why). It reads only the header when the
// batch is not buffered.
func (r *batchReader) fits(budget int64) bool {
	if r.limit-r.pos < batchHeaderLen {
		return true
	}
	// The header and, of a compressed batch, the block's decoded length
	// (recordsBound): a fetch's budget is of records' bytes.
	n := min(int64(fitsPeek), r.limit-r.pos)
	var hb []byte
	if off := r.pos - r.bufPos; off >= 0 && off+batchHeaderLen <= int64(len(r.buf)) {
		hb = r.buf[off:min(off+n, int64(len(r.buf)))]
	} else {
		hb = make([]byte, n)
		if _, err := r.f.ReadAt(hb, r.pos); err != nil {
			return true
		}
	}
	h, err := parseBatchHeader(hb)
	return err != nil || recordsBound(h, hb) <= budget
}

// fitsPeek is what fits reads of a batch: its header and the decoded
// length of a compressed one.
const fitsPeek = batchHeaderLen + binary.MaxVarintLen32

// window returns n bytes at pos, reading them if they are not buffered.
func (r *batchReader) window(n int64) ([]byte, error) {
	if r.limit-r.pos < n {
		return nil, errShort
	}
	off := r.pos - r.bufPos
	if off >= 0 && off+n <= int64(len(r.buf)) {
		return r.buf[off : off+n], nil
	}
	want := min(max(n, int64(r.chunk)), r.limit-r.pos)
	if end := r.pos + want; end < r.limit && want > n {
		// Up to the last known batch start at or after pos+n whose
		// header is inside the window, and that header: a fetch sees
		// whether the batch fits its budget without another read.
		i := sort.Search(len(r.starts), func(i int) bool { return r.starts[i].pos > end-fitsPeek }) - 1
		if i >= 0 && r.starts[i].pos >= r.pos+n {
			want = r.starts[i].pos + fitsPeek - r.pos
		}
	}
	switch {
	case r.fresh && r.alloc != nil:
		r.buf = r.alloc(int(want))
	case r.fresh || int64(cap(r.buf)) < want:
		r.buf = make([]byte, want)
	}
	r.buf = r.buf[:want]
	if _, err := r.f.ReadAt(r.buf, r.pos); err != nil {
		r.buf = r.buf[:0]
		if errors.Is(err, io.EOF) {
			return nil, errShort
		}
		return nil, err
	}
	r.bufPos = r.pos
	return r.buf[:n], nil
}
