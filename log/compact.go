package log

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// compact keeps, in the closed segments of a partition, only the latest
// record of each key (records with a nil key are always kept), and drops
// tombstones whose segment is older than deleteRetention. Offsets are
// preserved (gaps appear). Each segment with something to drop is rewritten
// into a ".cleaned" file, fsynced, renamed over the original and swapped
// into the segment list; appends (which only touch the active segment) and
// reads (which hold the old file open) are never blocked.
func (p *partition) compact(ctx context.Context, deleteRetention time.Duration) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	n := len(p.segs) - 1
	if n == 0 || (p.segs[n-1].next == p.compactedTo && !p.tombstonesLeft) {
		p.mu.Unlock()
		return nil
	}
	rp := readPlan{segs: make([]segView, 0, n)}
	for _, s := range p.segs[:n] {
		s.acquire()
		rp.segs = append(rp.segs, segView{s: s, size: s.size, maxTs: s.maxTs, idx: s.idx})
	}
	p.mu.Unlock()
	defer rp.release()

	latest, err := p.latestOffsets(ctx, rp.segs)
	if err != nil {
		return err
	}
	horizon := p.opts.now().Add(-deleteRetention).UnixMilli()
	tombstonesLeft := false
	for _, v := range rp.segs {
		if err := ctx.Err(); err != nil {
			return err
		}
		expire := v.maxTs < horizon
		keep := func(r *Record) bool {
			if r.Key != nil && latest[string(r.Key)] != r.Offset {
				return false
			}
			if r.Value == nil && r.Key != nil {
				tombstonesLeft = tombstonesLeft || !expire
				return !expire
			}
			return true
		}
		if err := p.compactSegment(v, keep); err != nil {
			return err
		}
	}
	p.compactedTo, p.tombstonesLeft = rp.segs[len(rp.segs)-1].s.next, tombstonesLeft
	return p.mergeSmall(ctx)
}

// latestOffsets maps every key in segs to the offset of its last record.
func (p *partition) latestOffsets(ctx context.Context, segs []segView) (map[string]int64, error) {
	latest := map[string]int64{}
	for _, v := range segs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		err := p.eachRecord(v, func(r *Record) {
			if r.Key != nil {
				latest[string(r.Key)] = r.Offset
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return latest, nil
}

// eachRecord calls fn for every record of a segment view, in order.
func (p *partition) eachRecord(v segView, fn func(*Record)) error {
	r := newBatchReader(v.s.f, 0, v.size, 1<<20, false)
	for {
		b, h, pos, err := r.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return p.readError(v.s, pos, err)
		}
		err = walkRecords(b, h, nil, func(rec Record) bool {
			fn(&rec)
			return true
		})
		if err != nil {
			return p.readError(v.s, pos, err)
		}
	}
}

// compactSegment rewrites one segment keeping the records keep accepts, if
// it rejects any.
func (p *partition) compactSegment(v segView, keep func(*Record) bool) error {
	drop := 0
	if err := p.eachRecord(v, func(r *Record) {
		if !keep(r) {
			drop++
		}
	}); err != nil {
		return err
	}
	if drop == 0 {
		return nil
	}
	cleaned := filepath.Join(p.dir, segmentName(v.s.base, segmentSuffix+cleanedSuffix))
	s, err := p.writeCleaned(v, cleaned, keep)
	if err != nil {
		_ = p.opts.FS.Remove(cleaned)
		return fmt.Errorf("log: compact %s: %w", v.s.path, err)
	}
	return p.swapSegment(v.s, s, cleaned, drop)
}

// writeCleaned writes the kept records of v into path, batch by batch
// (each original batch's survivors form one batch), fsyncs it, and returns
// the new segment (not yet in place).
func (p *partition) writeCleaned(v segView, path string, keep func(*Record) bool) (*segment, error) {
	f, err := p.opts.FS.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	s := &segment{base: v.s.base, path: v.s.path, f: f, next: v.s.next, maxTs: noTimestamp}
	w := bufio.NewWriterSize(f, 1<<20)
	var bb batchBuilder
	var zbuf []byte // compressed batches (compressBatch)
	lastIdx := int64(-1)
	r := newBatchReader(v.s.f, 0, v.size, 1<<20, false)
	for {
		b, h, pos, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			_ = f.Close()
			return nil, p.readError(v.s, pos, err)
		}
		var kept []Record
		_ = walkRecords(b, h, nil, func(rec Record) bool {
			if keep(&rec) {
				kept = append(kept, rec)
			}
			return true
		})
		if len(kept) == 0 {
			continue
		}
		bb.reset(bb.buf)
		for i := range kept {
			bb.add(&kept[i], uint32(kept[i].Offset-kept[0].Offset), kept[i].Timestamp.UnixMilli())
		}
		out := bb.finish()
		if p.opts.Compression == CompressionS2 {
			get := func(n int) []byte {
				if cap(zbuf) < n {
					zbuf = make([]byte, n)
				}
				return zbuf[:n]
			}
			if z := compressBatch(out, get, func([]byte) {}); z != nil {
				out = z
			}
		}
		finishBatch(out, kept[0].Offset)
		if lastIdx < 0 || s.size-lastIdx >= int64(p.opts.IndexIntervalBytes) {
			s.idx = append(s.idx, indexEntry{off: kept[0].Offset, pos: s.size, prevMaxTs: s.maxTs})
			lastIdx = s.size
		}
		if _, err := w.Write(out); err != nil {
			_ = f.Close()
			return nil, err
		}
		s.size += int64(len(out))
		s.maxTs = max(s.maxTs, bb.maxTs)
	}
	err = w.Flush()
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return s, nil
}

// swapSegment puts a cleaned segment in place of old: index files, rename
// over the original, directory fsync, then the list swap under the lock.
// If old left the list meanwhile (retention, topic deletion), the cleaned
// file is discarded.
func (p *partition) swapSegment(old, s *segment, cleaned string, dropped int) error {
	p.mu.Lock()
	i := p.indexOfLocked(old)
	p.mu.Unlock()
	if i < 0 {
		_ = s.f.Close()
		return p.opts.FS.Remove(cleaned)
	}
	if err := writeIndexFiles(p.opts.FS, p.dir, s.base, s.summaryLocked(), s.idx); err != nil {
		p.logger.Warn("log: cannot write segment index; it will be rebuilt at next open", "segment", s.path, "err", err)
	}
	if err := p.opts.FS.Rename(cleaned, s.path); err != nil {
		_ = s.f.Close()
		return err
	}
	if err := syncDir(p.opts.FS, p.dir); err != nil {
		return err
	}
	p.mu.Lock()
	if i = p.indexOfLocked(old); i < 0 || p.closed {
		p.mu.Unlock()
		s.retire()
		return nil
	}
	segs := append([]*segment(nil), p.segs...)
	segs[i] = s
	p.segs = segs
	p.mu.Unlock()
	old.retire()
	p.logger.Debug("log: compacted segment", "segment", s.path, "records_dropped", dropped, "bytes", s.size)
	return nil
}

// indexOfLocked finds a segment in the list. REQUIRES: p.mu.
func (p *partition) indexOfLocked(s *segment) int {
	for i, x := range p.segs {
		if x == s {
			return i
		}
	}
	return -1
}
