package log

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// partitionConfig is what opening a partition needs.
type partitionConfig struct {
	dir, root, topic string
	id               int32
	contiguous       bool // the topic is never compacted
	opts             *Options
	logger           *slog.Logger
}

// openResult is what opening a partition found.
type openResult struct {
	truncs []Truncation
	losses []LostRange // new since the last Open
}

// openPartition loads a partition directory, verifying its last segment
// (and any closed segment without a valid index): a torn tail past the
// last synced batch is truncated; damage before it is quarantined, its
// offsets recorded as lost, and every intact batch kept (see Recovery in
// the package doc). A read-only log changes nothing on disk and reads
// around the damage.
func openPartition(pc partitionConfig) (*partition, openResult, error) {
	p := &partition{
		topic: pc.topic, id: pc.id, dir: pc.dir, root: pc.root, opts: pc.opts, contiguous: pc.contiguous,
		logger: pc.logger.With("topic", pc.topic, "partition", pc.id),
		notify: make(chan struct{}),
		kick:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	var found openResult
	fail := func(err error) (*partition, openResult, error) {
		p.closeFiles()
		_ = p.mark.close()
		return nil, openResult{}, err
	}
	// The marker first: what it says was synced before the files are read.
	mark, seq, markOK := readSyncMark(pc.opts.FS, p.dir)
	if !markOK {
		mark = syncPos{base: -1, next: -1}
	}
	lost, err := readLost(pc.opts.FS, p.dir)
	if err != nil {
		return nil, found, err
	}
	p.lost = lost
	bases, err := p.listSegments()
	if err != nil {
		return nil, found, err
	}
	if !p.opts.ReadOnly {
		if p.mark, err = openSyncMark(pc.opts.FS, p.dir, seq, mark); err != nil {
			return nil, found, err
		}
	}
	prevNext := int64(0)
	for i, base := range bases {
		if i > 0 && i < len(bases)-1 && base < prevNext {
			p.dropMergeLeftover(base)
			continue
		}
		so := segmentOpen{base: base, prevNext: prevNext, nextBase: -1, active: i == len(bases)-1, mark: mark}
		if !so.active {
			so.nextBase = bases[i+1]
		}
		s, err := p.openSegment(so, &found)
		if err != nil && p.opts.ReadOnly && os.IsNotExist(err) {
			// Removed by the writer's cleaner since the listing. Retention
			// removes the oldest first, so the earlier ones go too (a
			// merge of a compacted topic removes segments it copied).
			if p.contiguous {
				p.closeFiles()
				p.segs = nil
			}
			continue
		}
		if err != nil {
			return fail(err)
		}
		p.segs = append(p.segs, s)
		prevNext = s.next
	}
	if len(p.segs) == 0 {
		if err := p.addFirstSegment(); err != nil {
			return fail(err)
		}
	}
	if err := p.checkMissing(mark, &found); err != nil {
		return fail(err)
	}
	last := p.segs[len(p.segs)-1]
	if n := len(p.lost); n > 0 && p.lost[n-1].To > last.next {
		last.next = p.lost[n-1].To // lost offsets are never given out again
	}
	p.next, p.end = last.next, last.next
	p.fl = flusherState{seg: last, idx: last.idx}
	return p, found, nil
}

// checkMissing records as lost the offsets no segment holds although they
// had been synced: a gap between segments of a never-compacted topic, or
// offsets the marker says were synced past the end of the last segment.
func (p *partition) checkMissing(mark syncPos, found *openResult) error {
	var add []LostRange
	now := p.opts.now()
	if p.contiguous {
		for i := 1; i < len(p.segs); i++ {
			prev, s := p.segs[i-1], p.segs[i]
			if prev.next < s.base {
				add = append(add, LostRange{From: prev.next, To: s.base, Found: now,
					Reason: fmt.Sprintf("offsets missing between segments %s and %s", filepath.Base(prev.path), filepath.Base(s.path))})
			}
		}
	}
	last := p.segs[len(p.segs)-1]
	if mark.base >= last.base && mark.next > last.next {
		add = append(add, LostRange{From: last.next, To: mark.next, Found: now,
			Reason: fmt.Sprintf("offsets up to %d had been synced but the partition's segments end at %d (a segment file truncated or removed)", mark.next, last.next)})
	}
	fresh, err := p.recordLost(add...)
	found.losses = append(found.losses, fresh...)
	return err
}

// listSegments returns the base offsets of the segment files, sorted, and
// removes leftovers of interrupted writes (unless read-only).
func (p *partition) listSegments() ([]int64, error) {
	ents, err := p.opts.FS.ReadDir(p.dir)
	if err != nil {
		return nil, err
	}
	var bases []int64
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) || strings.HasSuffix(name, cleanedSuffix) {
			if !p.opts.ReadOnly {
				_ = p.opts.FS.Remove(filepath.Join(p.dir, name))
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
		_ = p.opts.FS.Remove(filepath.Join(p.dir, segmentName(base, suffix)))
	}
	_ = syncDir(p.opts.FS, p.dir)
}

func (p *partition) addFirstSegment() error {
	if p.opts.ReadOnly {
		p.segs = []*segment{{base: 0, next: 0, maxTs: noTimestamp}}
		return nil
	}
	s, err := createSegment(p.opts.FS, p.dir, 0)
	if err != nil {
		return err
	}
	p.segs = []*segment{s}
	return nil
}

// segmentOpen says which segment to open and what is known around it.
type segmentOpen struct {
	base, prevNext int64
	nextBase       int64 // base of the following segment; -1 for the last
	active         bool
	mark           syncPos // the partition's marker (base -1 if none)
}

// durable returns how many bytes of the segment are known synced, and the
// offset a damaged tail's loss extends to (-1 if unknown). Every byte of
// a closed segment was synced before the next segment was created.
func (so segmentOpen) durable(syncedTo int64) (int64, int64) {
	switch {
	case !so.active:
		return math.MaxInt64, so.nextBase
	case so.mark.base > so.base: // later segments existed
		return math.MaxInt64, so.mark.next
	case so.mark.base == so.base:
		return max(syncedTo, so.mark.size), so.mark.next
	}
	return syncedTo, -1
}

// openSegment opens one segment. A closed segment with a valid index is
// trusted for its summary (its batches are still CRC-checked when read;
// see repair); otherwise it is scanned and recovered.
func (p *partition) openSegment(so segmentOpen, found *openResult) (*segment, error) {
	path := filepath.Join(p.dir, segmentName(so.base, segmentSuffix))
	flag := os.O_RDONLY
	if so.active && !p.opts.ReadOnly {
		flag = os.O_RDWR
	}
	f, err := p.opts.FS.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	s := &segment{base: so.base, path: path, f: f}
	if so.active && p.opts.ReadOnly {
		// Bytes the writer has written but not yet synced become durable
		// now, so nothing this reader shows can vanish in a crash.
		_ = f.Sync()
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if !so.active {
		sum, idx, err := loadIndexFiles(p.opts.FS, p.dir, so.base, fi.Size())
		if err == nil && sum.next >= max(so.base, so.prevNext) {
			s.size, s.next, s.maxTs, s.idx = sum.size, sum.next, sum.maxTs, idx
			return s, nil
		}
	}
	if err := p.recoverSegment(s, fi.Size(), so, found); err != nil {
		_ = s.f.Close()
		return nil, err
	}
	if !so.active && !p.opts.ReadOnly {
		if err := writeIndexFiles(p.opts.FS, p.dir, so.base, s.summaryLocked(), s.idx); err != nil {
			p.logger.Warn("log: cannot write segment index; it will be rebuilt at next open", "segment", path, "err", err)
		}
	}
	return s, nil
}

// recoverSegment scans a segment, drops a torn tail, and quarantines and
// removes damaged stretches in synced bytes, recording their offsets as
// lost.
func (p *partition) recoverSegment(s *segment, fileSize int64, so segmentOpen, found *openResult) error {
	res, err := scanSegment(s.f, so.base, fileSize, so.prevNext, p.opts.IndexIntervalBytes)
	if err != nil {
		return err
	}
	durable, tailTo := so.durable(res.syncedTo)
	now := p.opts.now()
	plan := planRecovery(&res, durable, tailTo, s.path, now)
	s.size, s.next, s.maxTs, s.idx = res.size, res.next, res.maxTs, res.idx
	if plan.torn != nil {
		tr := Truncation{Topic: p.topic, Partition: p.id, Segment: s.path, At: plan.torn.pos,
			Batches: countFrames(s.f, plan.torn.pos, fileSize), Bytes: fileSize - plan.torn.pos, Reason: plan.torn.reason.Error()}
		found.truncs = append(found.truncs, tr)
		if len(plan.corrupt) == 0 {
			if err := p.truncate(s, &tr); err != nil {
				return err
			}
		}
	}
	if len(plan.corrupt) > 0 && !p.opts.ReadOnly {
		qpath, err := quarantine(p.opts.FS, p.root, s.f, p.topic, p.id, s.base, plan, now)
		if err != nil {
			return fmt.Errorf("log: quarantine a copy of damaged %s: %w", s.path, err)
		}
		for i := range plan.lost {
			plan.lost[i].Reason += "; a copy of the file is in " + qpath
		}
		p.logger.Error("log: damaged segment quarantined; its intact batches stay readable", "segment", s.path, "copy", qpath, "damaged_stretches", len(plan.corrupt))
	}
	fresh, err := p.recordLost(plan.lost...)
	found.losses = append(found.losses, fresh...)
	if err != nil {
		return err
	}
	if len(plan.corrupt) > 0 && !p.opts.ReadOnly {
		return p.rewriteSegment(s, res.runs, so)
	}
	return nil
}

// rewriteSegment replaces a segment's file by its good runs (the damage
// is in quarantine and its offsets recorded as lost). The active
// segment's marker is moved to the new size.
func (p *partition) rewriteSegment(s *segment, runs []byteRange, so segmentOpen) error {
	cleaned := filepath.Join(p.dir, segmentName(s.base, segmentSuffix+cleanedSuffix))
	ns, err := p.copyRuns(s, runs, cleaned, so.prevNext)
	if err == nil {
		if err = p.opts.FS.Rename(cleaned, s.path); err == nil {
			err = syncDir(p.opts.FS, p.dir)
		}
		if err != nil {
			_ = ns.f.Close()
		}
	}
	if err != nil {
		_ = p.opts.FS.Remove(cleaned)
		return fmt.Errorf("log: rewrite %s without its damaged bytes: %w", s.path, err)
	}
	_ = s.f.Close()
	s.f, s.size, s.next, s.maxTs, s.idx = ns.f, ns.size, ns.next, ns.maxTs, ns.idx
	if so.active && p.mark != nil {
		if err := p.mark.record(syncPos{base: s.base, size: s.size, next: s.next}); err != nil {
			return err
		}
		return p.mark.f.Sync()
	}
	return nil
}

// truncate cuts a segment at the end of its valid prefix and logs what was
// dropped. A read-only log only logs: it reads the valid prefix.
func (p *partition) truncate(s *segment, tr *Truncation) error {
	p.logger.Warn("log: dropping torn tail of segment (past the last synced batch: never acknowledged)",
		"segment", tr.Segment, "at_byte", tr.At, "batches", tr.Batches, "bytes", tr.Bytes, "reason", tr.Reason,
		"read_only", p.opts.ReadOnly)
	if p.opts.ReadOnly {
		return nil
	}
	w, err := p.opts.FS.OpenFile(s.path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = w.Truncate(tr.At)
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("log: truncate %s at %d: %w", s.path, tr.At, err)
	}
	return nil
}
