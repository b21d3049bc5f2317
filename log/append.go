package log

import (
	"encoding/binary"
	"time"
)

// A group commit copies small batches into one buffer and writes it with
// one call; batches of directWrite bytes or more are written as they are.
const (
	maxWriteBuf = 8 << 20
	directWrite = 64 << 10
)

// appendReq is one caller's records for one partition, waiting for the
// flusher (group commit: one flush at a time per partition, under flushMu,
// writes and syncs every pending request at once, then answers each on its
// own done channel).
type appendReq struct {
	batches [][]byte // built batches; enqueue sets base offsets, the flusher the CRC
	records int64
	base    int64 // offset of the first record, set by enqueue
	done    chan error
}

// enqueue assigns offsets to req and hands it to the flusher.
func (p *partition) enqueue(req *appendReq) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	req.base = p.next
	off := p.next
	for _, b := range req.batches {
		binary.LittleEndian.PutUint64(b[offBaseOffset:], uint64(off))
		off += int64(binary.LittleEndian.Uint32(b[offLastDelta:])) + 1
	}
	p.next = off
	p.pending = append(p.pending, req)
	return nil
}

// flush gets the pending requests written: by the calling goroutine when
// inline is set and no flush is in progress (the uncontended case: no
// hand-off to the flusher goroutine and back), else by the flusher
// goroutine, which takes whatever has queued behind the running flush.
func (p *partition) flush(inline bool) {
	if inline && p.flushMu.TryLock() {
		p.flushPending()
		p.flushMu.Unlock()
		return
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// flusherState is the flusher's view of the active segment, ahead of what
// is published to readers while a write is in progress.
type flusherState struct {
	seg     *segment
	size    int64 // bytes written to seg
	next    int64
	maxTs   int64
	idx     []indexEntry
	lastIdx int64 // position of the last index entry, -1 if none
	dirty   bool  // written but not synced (SyncInterval)
	buf     []byte
	spare   []*appendReq
}

// run is the flusher goroutine: one per writable partition.
func (p *partition) run() {
	defer close(p.done)
	var tick <-chan time.Time
	if p.opts.Sync == SyncInterval {
		t := time.NewTicker(p.opts.SyncInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-p.kick:
			p.flushMu.Lock()
			p.flushPending()
			p.flushMu.Unlock()
		case <-tick:
			p.flushMu.Lock()
			p.syncInterval()
			p.flushMu.Unlock()
		case <-p.stop:
			p.flushMu.Lock()
			p.wf.stopping = true
			p.flushPending()
			p.syncInterval()
			p.rollAtClose()
			p.flushMu.Unlock()
			return
		}
	}
}

// flushPending writes every pending request as one group commit. After a
// failed write it keeps them, in order and with their offsets, for the
// retry (see retryLater); only a closing partition answers them with the
// error.
func (p *partition) flushPending() {
	fl := &p.fl
	p.mu.Lock()
	reqs := p.pending
	if len(reqs) == 0 && len(p.wf.retry) == 0 {
		p.mu.Unlock()
		return
	}
	p.pending = fl.spare[:0] // double buffering: never the array of reqs
	fl.spare = nil
	p.mu.Unlock()
	if len(p.wf.retry) > 0 {
		reqs = append(p.wf.retry, reqs...)
		p.wf.retry = nil
	}
	if !p.wf.stopping && p.opts.now().Before(p.wf.retryAt) {
		p.wf.retry = reqs // the retry timer flushes them
		return
	}
	err := p.rollBack()
	if err == nil {
		err = p.writeGroup(reqs)
	}
	if err != nil && !p.wf.stopping {
		p.wf.retry = reqs
		p.retryLater()
		return
	}
	if err == nil {
		p.recovered()
	}
	for i, r := range reqs {
		r.done <- err
		reqs[i] = nil
	}
	fl.spare = reqs[:0]
}

// closedSeg is a segment the current group commit closed by rolling.
type closedSeg struct {
	seg *segment
	sum segmentSummary
	idx []indexEntry
}

// groupWrite tracks one group commit in progress.
type groupWrite struct {
	start                     int64 // segment position where fl.buf goes
	rolled                    []closedSeg
	records, batches, written uint64
}

// writeGroup writes the batches of reqs in order, rolling segments as
// needed, syncs (under SyncBatch) and publishes the new end to readers.
func (p *partition) writeGroup(reqs []*appendReq) error {
	g := groupWrite{start: p.fl.size}
	err := p.writeGroupTo(&g, reqs)
	if err != nil {
		// Segments this group rolled to were never published: close them
		// (rollBack removes their files).
		for _, c := range g.rolled[min(1, len(g.rolled)):] {
			_ = c.seg.f.Close()
		}
		return err
	}
	p.publish(g.rolled, g.records, g.batches, g.written)
	return nil
}

// writeGroupTo writes and (under SyncBatch) syncs the batches of reqs.
func (p *partition) writeGroupTo(g *groupWrite, reqs []*appendReq) error {
	fl := &p.fl
	fl.buf = fl.buf[:0]
	syncing := p.opts.Sync == SyncBatch
	for i, r := range reqs {
		for j, b := range r.batches {
			b[offFlags] &^= flagSyncPoint
			if syncing && i == len(reqs)-1 && j == len(r.batches)-1 {
				b[offFlags] |= flagSyncPoint // fsynced before anything after it is written
			}
			if err := p.stage(g, b); err != nil {
				return err
			}
		}
	}
	if err := p.writeBuf(g.start); err != nil {
		return p.fail("write", err)
	}
	if !syncing {
		fl.dirty = true
		return nil
	}
	if err := fl.seg.f.Sync(); err != nil {
		return p.fail("sync", err)
	}
	p.recordSynced()
	return nil
}

// stage seals one batch with its CRC and adds it to the group: into the
// write buffer, or written at once when large; rolling the segment first
// when it is full.
func (p *partition) stage(g *groupWrite, b []byte) error {
	fl := &p.fl
	finishBatch(b, int64(binary.LittleEndian.Uint64(b[offBaseOffset:])))
	h, _ := parseBatchHeader(b)
	if p.needRoll(int64(len(b))) {
		c, err := p.roll(g.start, h.Base)
		if err != nil {
			return p.fail("roll", err)
		}
		g.rolled = append(g.rolled, c)
		g.start = 0
	}
	p.addToIndex(h)
	if len(fl.buf) >= maxWriteBuf || (len(b) >= directWrite && len(fl.buf) > 0) {
		if err := p.writeBuf(g.start); err != nil {
			return p.fail("write", err)
		}
		g.start += int64(len(fl.buf))
		fl.buf = fl.buf[:0]
	}
	if len(b) >= directWrite { // large: skip the copy
		if _, err := fl.seg.f.WriteAt(b, g.start); err != nil {
			return p.fail("write", err)
		}
		g.start += int64(len(b))
	} else {
		fl.buf = append(fl.buf, b...)
	}
	fl.size += h.Size()
	fl.next, fl.maxTs = h.Last()+1, max(fl.maxTs, h.MaxTs)
	g.records += uint64(h.Count)
	g.batches++
	g.written += uint64(h.Size())
	return nil
}

func (p *partition) needRoll(n int64) bool {
	fl := &p.fl
	if fl.size == 0 {
		return false
	}
	if fl.size+n > p.opts.SegmentBytes {
		return true
	}
	return !fl.seg.created.IsZero() && p.opts.now().Sub(fl.seg.created) >= p.opts.SegmentMaxAge
}

// addToIndex adds an index entry for a batch about to be written at
// fl.size when it is far enough from the previous entry.
func (p *partition) addToIndex(h batchHeader) {
	fl := &p.fl
	if fl.lastIdx >= 0 && fl.size-fl.lastIdx < int64(p.opts.IndexIntervalBytes) {
		return
	}
	fl.idx = append(fl.idx, indexEntry{off: h.Base, pos: fl.size, prevMaxTs: fl.maxTs})
	fl.lastIdx = fl.size
}

// writeBuf writes fl.buf at position start of the active segment.
func (p *partition) writeBuf(start int64) error {
	if len(p.fl.buf) == 0 {
		return nil
	}
	_, err := p.fl.seg.f.WriteAt(p.fl.buf, start)
	return err
}

// closeRollBytes is the least an active segment holds for a clean close to
// close it (rollAtClose); a variable for tests.
var closeRollBytes int64 = 4 << 20

// rollAtClose closes the active segment at a clean close when it holds at
// least closeRollBytes and all of it is synced, starting an empty one: the
// next Open takes a closed segment from its index files, but reads and
// checks every batch of the active one (up to SegmentBytes, 128 MiB, a
// partition: a restart of cdcd bench's daemon read 417-514 MB so). Damage
// in the closed segment is then found at the first read of it and
// repaired there (repair), as in any closed segment; a log that crashed
// is scanned at Open as before. REQUIRES: flushMu, the flusher stopped.
func (p *partition) rollAtClose() {
	fl := &p.fl
	if fl.size < closeRollBytes || len(p.wf.retry) > 0 || p.wf.rollBack || p.mark == nil ||
		p.mark.last != (syncPos{base: fl.seg.base, size: fl.size, next: fl.next}) {
		return
	}
	// Every byte is written and synced (the marker says so): what fl.buf
	// still holds is the last group's, written already; roll would write it
	// again past the segment's end.
	fl.buf = fl.buf[:0]
	c, err := p.roll(fl.size, fl.next)
	if err != nil {
		p.logger.Warn("log: cannot close the active segment at close; the next open reads it whole", "segment", fl.seg.path, "err", err)
		return
	}
	p.mu.Lock()
	c.seg.size, c.seg.next, c.seg.maxTs, c.seg.idx = c.sum.size, c.sum.next, c.sum.maxTs, c.idx
	p.segs = append(p.segs, fl.seg) // closed with the others by closeFiles
	p.mu.Unlock()
	if err := p.mark.record(syncPos{base: fl.seg.base, size: 0, next: fl.next}); err != nil {
		p.logger.Warn("log: cannot record the new segment in the sync marker", "err", err)
	}
}

// roll writes and syncs what is buffered for the active segment, writes
// its index files, and starts a new segment at base.
func (p *partition) roll(start, base int64) (closedSeg, error) {
	fl := &p.fl
	if err := p.writeBuf(start); err != nil {
		return closedSeg{}, err
	}
	if err := fl.seg.f.Sync(); err != nil {
		return closedSeg{}, err
	}
	c := closedSeg{seg: fl.seg, sum: segmentSummary{size: fl.size, next: fl.next, maxTs: fl.maxTs}, idx: fl.idx}
	if err := writeIndexFiles(p.opts.FS, p.dir, fl.seg.base, c.sum, c.idx); err != nil {
		p.logger.Warn("log: cannot write segment index; it will be rebuilt at next open", "segment", fl.seg.path, "err", err)
	}
	s, err := createSegment(p.opts.FS, p.dir, base)
	if err != nil {
		return closedSeg{}, err
	}
	*fl = flusherState{seg: s, next: base, maxTs: noTimestamp, lastIdx: -1, buf: fl.buf[:0], spare: fl.spare}
	return c, nil
}

// publish makes the written batches visible: segment states, the new end,
// stats; then wakes long-polling fetchers.
func (p *partition) publish(rolled []closedSeg, records, batches, bytes uint64) {
	fl := &p.fl
	now := p.opts.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(rolled) > 0 {
		segs := make([]*segment, 0, len(p.segs)+len(rolled))
		segs = append(segs, p.segs...)
		for i, c := range rolled {
			c.seg.size, c.seg.next, c.seg.maxTs, c.seg.idx = c.sum.size, c.sum.next, c.sum.maxTs, c.idx
			if i > 0 {
				segs = append(segs, c.seg)
			}
		}
		p.segs = append(segs, fl.seg)
	}
	s := fl.seg
	if s.created.IsZero() && fl.size > 0 {
		s.created = now
	}
	s.size, s.next, s.maxTs, s.idx = fl.size, fl.next, fl.maxTs, fl.idx
	p.end = fl.next
	p.lastAppend = now
	p.stats.records += records
	p.stats.batches += batches
	p.stats.bytes += bytes
	if p.opts.Sync == SyncBatch {
		p.stats.syncs++
	}
	p.wakeLocked()
}

// syncInterval fsyncs the active segment if it has unsynced writes; a
// failure is retried at the next tick.
func (p *partition) syncInterval() {
	if p.wf.rollBack {
		if p.rollBack() == nil { // it syncs what readers see
			p.recovered()
			p.fl.dirty = false
		}
		return
	}
	if !p.fl.dirty {
		return
	}
	if err := p.fl.seg.f.Sync(); err != nil {
		_ = p.fail("sync", err)
		return
	}
	p.recovered()
	p.fl.dirty = false
	p.recordSynced()
	p.mu.Lock()
	p.stats.syncs++
	p.mu.Unlock()
}

// recordSynced notes in the marker that the active segment is synced up
// to what the flusher has written. A failed marker write only leaves the
// marker behind (a smaller lower bound).
func (p *partition) recordSynced() {
	fl := &p.fl
	if err := p.mark.record(syncPos{base: fl.seg.base, size: fl.size, next: fl.next}); err != nil {
		p.logger.Warn("log: cannot update the sync marker; recovery will trust less of the segment", "err", err)
	}
}

// start launches the flusher. REQUIRES: a writable log.
func (p *partition) start() {
	s := p.fl.seg
	p.fl.size, p.fl.next, p.fl.maxTs = s.size, s.next, s.maxTs
	p.fl.lastIdx = -1
	if n := len(s.idx); n > 0 {
		p.fl.lastIdx = s.idx[n-1].pos
	}
	if s.size > 0 {
		s.created = p.opts.now()
	}
	go p.run()
}

// close stops the flusher after it has written what is pending, wakes
// fetchers and closes the files.
func (p *partition) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.wakeLocked()
	p.mu.Unlock()
	if !p.opts.ReadOnly {
		close(p.stop)
		<-p.done
		if err := p.mark.close(); err != nil {
			p.logger.Warn("log: cannot sync the sync marker", "err", err)
		}
	}
	p.closeFiles()
}

// newAppendReq is a request with a buffered done channel, so the flusher
// never blocks on a caller that gave up.
func newAppendReq(batches [][]byte, records int64) *appendReq {
	return &appendReq{batches: batches, records: records, done: make(chan error, 1)}
}
