package log

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// mergeSmall merges runs of adjacent closed segments of a compacted
// partition whose sizes add up to at most SegmentBytes, so that compaction
// does not leave a trail of small or empty files. Batches carry absolute
// offsets, so a merged segment is the plain concatenation of its inputs.
//
// Crash safety: the merged file is fsynced, renamed over the first input,
// and only then are the other inputs removed. A crash in between leaves
// inputs whose offsets the merged segment already covers; Open removes
// such a segment (see openPartition) because a merge only ever copies whole
// segments.
func (p *partition) mergeSmall(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	var groups [][]*segment
	var cur []*segment
	var size int64
	for _, s := range p.segs[:len(p.segs)-1] {
		if len(cur) > 0 && size+s.size <= p.opts.SegmentBytes {
			cur = append(cur, s)
			size += s.size
			continue
		}
		if len(cur) > 1 {
			groups = append(groups, cur)
		}
		cur, size = []*segment{s}, s.size
	}
	if len(cur) > 1 {
		groups = append(groups, cur)
	}
	views := make([][]segView, len(groups))
	for i, g := range groups {
		for _, s := range g {
			s.acquire()
			views[i] = append(views[i], segView{s: s, size: s.size, maxTs: s.maxTs, idx: s.idx})
		}
	}
	p.mu.Unlock()
	defer func() {
		for _, vs := range views {
			for _, v := range vs {
				v.s.release()
			}
		}
	}()
	for _, vs := range views {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := p.mergeGroup(vs); err != nil {
			return err
		}
	}
	return nil
}

// mergeGroup concatenates the segments of vs into one named after the
// first and swaps it into the list.
func (p *partition) mergeGroup(vs []segView) error {
	first, last := vs[0].s, vs[len(vs)-1].s
	cleaned := filepath.Join(p.dir, segmentName(first.base, segmentSuffix+cleanedSuffix))
	merged, err := p.writeMerged(vs, cleaned)
	if err != nil {
		_ = p.opts.FS.Remove(cleaned)
		return fmt.Errorf("log: merge segments from %s: %w", first.path, err)
	}
	merged.next = last.next
	if err := writeIndexFiles(p.opts.FS, p.dir, merged.base, merged.summaryLocked(), merged.idx); err != nil {
		p.logger.Warn("log: cannot write segment index; it will be rebuilt at next open", "segment", merged.path, "err", err)
	}
	if err := p.opts.FS.Rename(cleaned, merged.path); err != nil {
		_ = merged.f.Close()
		return err
	}
	if err := syncDir(p.opts.FS, p.dir); err != nil {
		_ = merged.f.Close()
		return err
	}
	old := make([]*segment, len(vs))
	for i, v := range vs {
		old[i] = v.s
	}
	if !p.swapMerged(old, merged) {
		merged.retire()
		return nil
	}
	p.logger.Debug("log: merged segments", "first", first.path, "segments", len(vs), "bytes", merged.size)
	// The first input's files were replaced by the rename; the rest go.
	first.retire()
	return p.removeSegments(old[1:])
}

// writeMerged copies the bytes of vs into path, fsyncs it, and returns the
// merged segment with its index (positions shifted, earlier maxima carried).
func (p *partition) writeMerged(vs []segView, path string) (*segment, error) {
	f, err := p.opts.FS.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	s := &segment{base: vs[0].s.base, path: vs[0].s.path, f: f, maxTs: noTimestamp}
	for _, v := range vs {
		if _, err := io.Copy(f, io.NewSectionReader(v.s.f, 0, v.size)); err != nil {
			_ = f.Close()
			return nil, err
		}
		for _, e := range v.idx {
			s.idx = append(s.idx, indexEntry{off: e.off, pos: s.size + e.pos, prevMaxTs: max(s.maxTs, e.prevMaxTs)})
		}
		s.size += v.size
		s.maxTs = max(s.maxTs, v.maxTs)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return s, nil
}

// swapMerged replaces the run old (still adjacent in the list) by merged.
func (p *partition) swapMerged(old []*segment, merged *segment) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.indexOfLocked(old[0])
	if i < 0 || p.closed || i+len(old) > len(p.segs)-1 {
		return false
	}
	for k, s := range old {
		if p.segs[i+k] != s {
			return false
		}
	}
	segs := make([]*segment, 0, len(p.segs)-len(old)+1)
	segs = append(segs, p.segs[:i]...)
	segs = append(segs, merged)
	segs = append(segs, p.segs[i+len(old):]...)
	p.segs = segs
	return true
}
