package log

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// partition is one ordered sequence of records: a list of segments, the
// last of which is active (appended to by the partition's flusher).
type partition struct {
	topic  string
	id     int32
	dir    string
	opts   *Options
	logger *slog.Logger

	mu sync.Mutex
	// Guarded by mu.
	segs       []*segment // copy-on-write: readers may keep a slice header
	next       int64      // offset the next enqueued record gets
	end        int64      // offset after the last durable record (visible)
	pending    []*appendReq
	closed     bool
	werr       error         // sticky write error: no appends after it
	notify     chan struct{} // closed and replaced when end advances
	lastAppend time.Time
	stats      appendStats

	// flushMu is held by whoever flushes: the partition's flusher goroutine
	// or a producer flushing inline. It guards fl.
	flushMu sync.Mutex
	fl      flusherState

	// Owned by Cleanup (under Embedded.cleanMu).
	compactedTo    int64 // end of the closed segments at the last compaction
	tombstonesLeft bool  // that compaction kept tombstones still to expire

	kick chan struct{} // wakes the flusher; capacity 1
	stop chan struct{} // closed by close
	done chan struct{} // closed when the flusher exits
}

// appendStats counts appends since open.
type appendStats struct {
	records, batches, bytes, syncs uint64
}

// Truncation reports data dropped when a partition was opened.
type Truncation struct {
	Topic     string
	Partition int32
	Segment   string // file path
	At        int64  // byte position where the valid prefix ends
	Batches   int    // batches dropped (the bad one and every frame after it)
	Bytes     int64  // bytes dropped
	Reason    string // the first failed check, e.g. "bad crc"
}

// RecoveryReport lists what Open dropped; empty after a clean shutdown.
type RecoveryReport struct {
	Truncations []Truncation
}

// Lost reports whether any data was dropped.
func (r RecoveryReport) Lost() bool { return len(r.Truncations) > 0 }

// openPartition loads a partition directory, verifying its last segment
// (and any closed segment without a valid index) and truncating at the
// first bad batch unless the log is read-only.
func openPartition(dir, topic string, id int32, opts *Options, logger *slog.Logger) (*partition, []Truncation, error) {
	p := &partition{
		topic: topic, id: id, dir: dir, opts: opts,
		logger: logger.With("topic", topic, "partition", id),
		notify: make(chan struct{}),
		kick:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	bases, err := p.listSegments()
	if err != nil {
		return nil, nil, err
	}
	var truncs []Truncation
	prevNext := int64(0)
	for i, base := range bases {
		if i > 0 && i < len(bases)-1 && base < prevNext {
			p.dropMergeLeftover(base)
			continue
		}
		s, tr, err := p.openSegment(base, prevNext, i == len(bases)-1)
		if err != nil && p.opts.ReadOnly && os.IsNotExist(err) {
			continue // removed by the writer's cleaner since the listing
		}
		if err != nil {
			p.closeFiles()
			return nil, nil, err
		}
		if tr != nil {
			truncs = append(truncs, *tr)
		}
		p.segs = append(p.segs, s)
		prevNext = s.next
	}
	if len(p.segs) == 0 {
		if err := p.addFirstSegment(); err != nil {
			return nil, nil, err
		}
	}
	last := p.segs[len(p.segs)-1]
	p.next, p.end = last.next, last.next
	p.fl = flusherState{seg: last, idx: last.idx}
	return p, truncs, nil
}

// listSegments returns the base offsets of the segment files, sorted, and
// removes leftovers of interrupted writes (unless read-only).
func (p *partition) listSegments() ([]int64, error) {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, err
	}
	var bases []int64
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) || strings.HasSuffix(name, cleanedSuffix) {
			if !p.opts.ReadOnly {
				_ = os.Remove(filepath.Join(p.dir, name))
			}
			continue
		}
		stem, ok := strings.CutSuffix(name, segmentSuffix)
		if !ok || len(stem) != segmentNameDigits {
			continue
		}
		base, err := strconv.ParseInt(stem, 10, 64)
		if err != nil {
			continue
		}
		bases = append(bases, base)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return bases, nil
}

// dropMergeLeftover removes a closed segment whose offsets the previous
// (merged) segment already covers: a merge was interrupted after its
// rename. Merges copy whole segments, so nothing is lost.
func (p *partition) dropMergeLeftover(base int64) {
	p.logger.Info("log: removing segment left by an interrupted merge", "segment", segmentName(base, segmentSuffix), "read_only", p.opts.ReadOnly)
	if p.opts.ReadOnly {
		return
	}
	for _, suffix := range []string{segmentSuffix, offsetIndexSuffix, timeIndexSuffix} {
		_ = os.Remove(filepath.Join(p.dir, segmentName(base, suffix)))
	}
	_ = syncDir(p.dir)
}

func (p *partition) addFirstSegment() error {
	if p.opts.ReadOnly {
		p.segs = []*segment{{base: 0, next: 0, maxTs: noTimestamp}}
		return nil
	}
	s, err := createSegment(p.dir, 0)
	if err != nil {
		return err
	}
	p.segs = []*segment{s}
	return nil
}

// openSegment opens one segment. A closed segment with a valid index is
// trusted for its summary (its batches are still CRC-checked when read);
// otherwise it is scanned and, if bad, truncated.
func (p *partition) openSegment(base, prevNext int64, active bool) (*segment, *Truncation, error) {
	path := filepath.Join(p.dir, segmentName(base, segmentSuffix))
	flag := os.O_RDONLY
	if active && !p.opts.ReadOnly {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, nil, err
	}
	s := &segment{base: base, path: path, f: f}
	if active && p.opts.ReadOnly {
		// Bytes the writer has written but not yet synced become durable
		// now, so nothing this reader shows can vanish in a crash.
		_ = syncData(f)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	if !active {
		if sum, idx, err := loadIndexFiles(p.dir, base, fi.Size()); err == nil && sum.next >= max(base, prevNext) {
			s.size, s.next, s.maxTs, s.idx = sum.size, sum.next, sum.maxTs, idx
			return s, nil, nil
		}
	}
	res := scanSegment(f, base, fi.Size(), prevNext, p.opts.IndexIntervalBytes)
	s.size, s.next, s.maxTs, s.idx = res.size, res.next, res.maxTs, res.idx
	var tr *Truncation
	if res.bad != nil {
		tr = &Truncation{Topic: p.topic, Partition: p.id, Segment: path, At: res.size,
			Batches: res.droppedBatches, Bytes: res.droppedBytes, Reason: res.bad.Error()}
		if err := p.truncate(s, tr); err != nil {
			_ = f.Close()
			return nil, nil, err
		}
	}
	if !active && !p.opts.ReadOnly {
		if err := writeIndexFiles(p.dir, base, s.summaryLocked(), s.idx); err != nil {
			p.logger.Warn("log: cannot write segment index; it will be rebuilt at next open", "segment", path, "err", err)
		}
	}
	return s, tr, nil
}

// truncate cuts a segment at the end of its valid prefix and logs what was
// dropped. A read-only log only logs: it reads the valid prefix.
func (p *partition) truncate(s *segment, tr *Truncation) error {
	p.logger.Warn("log: dropping bad tail of segment",
		"segment", tr.Segment, "at_byte", tr.At, "batches", tr.Batches, "bytes", tr.Bytes, "reason", tr.Reason,
		"read_only", p.opts.ReadOnly)
	if p.opts.ReadOnly {
		return nil
	}
	w, err := os.OpenFile(s.path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = w.Truncate(tr.At)
	if err == nil {
		err = syncData(w)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("log: truncate %s at %d: %w", s.path, tr.At, err)
	}
	return nil
}

func (p *partition) closeFiles() {
	for _, s := range p.segs {
		s.retire()
	}
}

// bounds returns the first and the next offset. REQUIRES: p.mu.
func (p *partition) boundsLocked() (start, end int64) {
	return p.segs[0].base, p.end
}

// info describes the partition.
func (p *partition) info() PartitionInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	start, end := p.boundsLocked()
	var bytes int64
	for _, s := range p.segs {
		bytes += s.size
	}
	return PartitionInfo{Partition: p.id, Start: start, End: end, Bytes: bytes}
}

// segmentFor returns the index of the segment holding off: the last one
// whose base is at most off. REQUIRES: p.mu.
func segmentFor(segs []*segment, off int64) int {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > off })
	return max(i-1, 0)
}

// wakeLocked wakes every long-polling fetcher. REQUIRES: p.mu.
func (p *partition) wakeLocked() {
	close(p.notify)
	p.notify = make(chan struct{})
}
