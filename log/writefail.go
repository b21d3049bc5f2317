package log

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Retry delays after a failed write: the first, and the most.
const (
	retryFirst = 50 * time.Millisecond
	retryMax   = 2 * time.Second
	// failLogEvery spaces the log records of a failure that goes on.
	failLogEvery = 30 * time.Second
)

// writeFailure is the flusher's state after a failed write or sync (a full
// disk, an I/O error): the requests it keeps for the retry and when that
// is due. Guarded by the partition's flushMu.
type writeFailure struct {
	retry    []*appendReq // in order, offsets assigned
	retryAt  time.Time
	backoff  time.Duration
	rollBack bool // bytes readers do not see may be on disk: roll back first
	stopping bool // Close: answer instead of keeping for a retry
	lastLog  time.Time
}

// fail records a failed write: the partition is failing (Stats) until a
// write succeeds, and the next attempt first rolls back.
func (p *partition) fail(op string, err error) error {
	werr := &WriteError{Topic: p.topic, Partition: p.id, Op: op, Err: err}
	now := p.opts.now()
	p.mu.Lock()
	first := p.failing == nil
	if first {
		p.failSince = now
	}
	p.failing = werr
	p.failures++
	p.mu.Unlock()
	p.wf.rollBack = true
	if first || now.Sub(p.wf.lastLog) >= failLogEvery {
		p.wf.lastLog = now
		p.logger.Error("log: write failed; appends wait and are retried (free space on the disk, or fix it)", "op", op, "err", err)
	}
	return werr
}

// retryLater schedules the next attempt of the kept requests, backing off.
func (p *partition) retryLater() {
	wf := &p.wf
	wf.backoff = min(max(2*wf.backoff, retryFirst), retryMax)
	wf.retryAt = p.opts.now().Add(wf.backoff)
	time.AfterFunc(wf.backoff, func() {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	})
}

// recovered clears the failing state after a write and sync succeeded.
func (p *partition) recovered() {
	p.wf.backoff, p.wf.retryAt = 0, time.Time{}
	p.mu.Lock()
	failing, since := p.failing, p.failSince
	p.failing = nil
	p.mu.Unlock()
	if failing != nil {
		p.logger.Info("log: writes succeed again", "failed_for", p.opts.now().Sub(since).Round(time.Millisecond))
	}
}

// rollBack returns the partition's files to what readers see — the last
// published state, all of it synced — after a failed write: the active
// segment is reopened and cut to its published size, and segments a
// failed group rolled to (never published) are removed. The kept
// requests are then written again at the same offsets, so nothing is
// acknowledged that a failed write or sync touched.
func (p *partition) rollBack() error {
	if !p.wf.rollBack {
		return nil
	}
	fl := &p.fl
	p.mu.Lock()
	pub := p.segs[len(p.segs)-1]
	size := pub.size
	p.mu.Unlock()
	if fl.seg != pub {
		_ = fl.seg.f.Close() // rolled to in the failed group; no reader has it
	}
	removed, err := p.removeUnpublished(pub.base)
	if err != nil {
		return p.fail("roll back", err)
	}
	f, err := p.opts.FS.OpenFile(pub.path, os.O_RDWR, 0)
	if err != nil {
		return p.fail("roll back", err)
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if err == nil && removed {
		err = syncDir(p.opts.FS, p.dir)
	}
	if err != nil {
		_ = f.Close()
		return p.fail("roll back", err)
	}
	ns := &segment{base: pub.base, path: pub.path, f: f}
	p.mu.Lock()
	ns.size, ns.next, ns.maxTs, ns.idx, ns.created = pub.size, pub.next, pub.maxTs, pub.idx, pub.created
	segs := append([]*segment(nil), p.segs...)
	segs[len(segs)-1] = ns
	p.segs = segs
	p.mu.Unlock()
	pub.retire()
	lastIdx := int64(-1)
	if n := len(ns.idx); n > 0 {
		lastIdx = ns.idx[n-1].pos
	}
	*fl = flusherState{seg: ns, size: ns.size, next: ns.next, maxTs: ns.maxTs, idx: ns.idx, lastIdx: lastIdx, buf: fl.buf[:0], spare: fl.spare}
	p.wf.rollBack = false
	return nil
}

// removeUnpublished removes the files of segments after base: rolled to by
// a failed group, never published. It reports whether it removed any.
func (p *partition) removeUnpublished(base int64) (bool, error) {
	ents, err := p.opts.FS.ReadDir(p.dir)
	if err != nil {
		return false, err
	}
	removed := false
	for _, e := range ents {
		stem, _, _ := strings.Cut(e.Name(), ".")
		if len(stem) != segmentNameDigits || strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		if b, err := strconv.ParseInt(stem, 10, 64); err != nil || b <= base {
			continue
		}
		if err := p.opts.FS.Remove(filepath.Join(p.dir, e.Name())); err != nil {
			return removed, fmt.Errorf("remove %s: %w", e.Name(), err)
		}
		removed = true
	}
	return removed, nil
}
