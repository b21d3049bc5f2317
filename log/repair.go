package log

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
)

// repair handles damage found in a closed segment after Open (by a fetch
// or by compaction): every byte of a closed segment was synced, so the
// damage is corruption. The segment is quarantined, its lost offsets
// recorded, and it is replaced by its intact batches, as Open does. It
// reports whether it changed anything (false: the segment is not closed
// or no longer damaged, and the caller keeps its error).
// REQUIRES: l.cleanMu (no compaction, merge or deletion meanwhile).
func (p *partition) repair(path string) (bool, error) {
	p.mu.Lock()
	i := -1
	for k, s := range p.segs[:len(p.segs)-1] {
		if s.path == path {
			i = k
		}
	}
	if i < 0 || p.closed {
		p.mu.Unlock()
		return false, nil
	}
	s, prevNext, nextBase := p.segs[i], int64(0), p.segs[i+1].base
	if i > 0 {
		prevNext = p.segs[i-1].next
	}
	s.acquire()
	size := s.size
	p.mu.Unlock()
	defer s.release()

	res, err := scanSegment(s.f, s.base, size, prevNext, p.opts.IndexIntervalBytes)
	if err != nil || len(res.damage) == 0 {
		return false, err
	}
	now := p.opts.now()
	plan := planRecovery(&res, math.MaxInt64, nextBase, s.path, now)
	qpath, err := quarantine(p.opts.FS, p.root, s.f, p.topic, p.id, s.base, plan, now)
	if err != nil {
		return false, fmt.Errorf("log: quarantine a copy of damaged %s: %w", s.path, err)
	}
	for i := range plan.lost {
		plan.lost[i].Reason += "; a copy of the file is in " + qpath
	}
	p.logger.Error("log: damaged segment quarantined; its intact batches stay readable", "segment", s.path, "copy", qpath, "damaged_stretches", len(plan.corrupt))
	if _, err := p.recordLost(plan.lost...); err != nil {
		return false, err
	}
	cleaned := filepath.Join(p.dir, segmentName(s.base, segmentSuffix+cleanedSuffix))
	ns, err := p.copyRuns(s, res.runs, cleaned, prevNext)
	if err != nil {
		_ = p.opts.FS.Remove(cleaned)
		return false, fmt.Errorf("log: rewrite %s without its damaged bytes: %w", s.path, err)
	}
	if err := p.swapSegment(s, ns, cleaned, 0); err != nil {
		return false, err
	}
	return true, nil
}

// copyRuns writes the good runs of s into a new file at path and returns
// it as a segment (named s.path, not yet in place), scanned afresh.
func (p *partition) copyRuns(s *segment, runs []byteRange, path string, prevNext int64) (*segment, error) {
	f, n, err := writeRuns(p.opts.FS, s.f, runs, path)
	if err != nil {
		return nil, err
	}
	res, err := scanSegment(f, s.base, n, prevNext, p.opts.IndexIntervalBytes)
	if err == nil && len(res.damage) > 0 {
		err = fmt.Errorf("log: %s still fails its checks after rewriting: %v", s.path, res.damage[0].reason)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &segment{base: s.base, path: s.path, f: f, size: res.size, next: max(res.next, s.next), maxTs: res.maxTs, idx: res.idx}, nil
}

// repairAfter tries to repair the segment a *CorruptionError names, under
// the cleaner's lock; it reports whether the caller should retry.
func (l *Embedded) repairAfter(p *partition, err error) bool {
	var ce *CorruptionError
	if l.opts.ReadOnly || !errors.As(err, &ce) {
		return false
	}
	l.cleanMu.Lock()
	defer l.cleanMu.Unlock()
	ok, rerr := p.repair(ce.Path)
	if rerr != nil {
		p.logger.Error("log: cannot repair damaged segment", "segment", ce.Path, "err", rerr)
	}
	return ok
}
