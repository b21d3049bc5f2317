package log

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// scanResult is what scanning a segment found.
type scanResult struct {
	fileSize int64
	size     int64 // end of the last good batch
	next     int64 // offset after the last good record
	maxTs    int64
	idx      []indexEntry
	runs     []byteRange // the good batches, as maximal runs of bytes
	damage   []damagedRange
	// syncedTo is the end of the last sync-point batch that a good batch
	// follows: the writer wrote that batch only after the fsync, so every
	// byte before syncedTo was durable.
	syncedTo int64
}

type byteRange struct{ start, end int64 }

// damagedRange is a stretch of a segment that holds no good batch.
type damagedRange struct {
	pos, end int64 // bytes: end is the next good batch, or the end of the file
	from, to int64 // offsets: from follows the last good record; to is the next good batch's base, -1 at the tail
	reason   error
	before   scanState // the scan's state at pos, to cut the segment there
}

// scanState is the part of a scanResult that cutting restores.
type scanState struct {
	size, next, maxTs int64
	nidx, nruns       int
}

// scanSegment verifies every batch of a segment of fileSize bytes, builds
// its index, and past each bad stretch looks for the next good batch (one
// whose header, CRC and offsets check out), so that damage in the middle
// does not hide what follows. prevNext is the offset the segment's first
// batch may not precede. It returns an error only for I/O failures.
func scanSegment(f File, base, fileSize, prevNext int64, interval int) (scanResult, error) {
	res := scanResult{fileSize: fileSize, next: max(base, prevNext), maxTs: noTimestamp}
	r := newBatchReader(f, 0, fileSize, 1<<20, false)
	lastIdx, runStart, flaggedEnd := int64(-1), int64(0), int64(-1)
	force := false // index the first good batch after damage
	for {
		_, h, pos, err := r.next()
		if err == nil && h.Base < res.next {
			err = errNotAfter
		}
		if err == io.EOF {
			res.closeRun(runStart, pos)
			return res, nil
		}
		if _, bad := err.(corruptReason); err != nil && !bad {
			return res, fmt.Errorf("log: read %s at %d: %w", f.Name(), pos, err)
		}
		if err != nil {
			res.closeRun(runStart, pos)
			d := damagedRange{pos: pos, end: fileSize, from: res.next, to: -1, reason: err, before: res.state()}
			q, qBase, found, rerr := resync(f, pos+1, fileSize, res.next)
			if rerr != nil {
				return res, rerr
			}
			if found {
				d.end, d.to = q, qBase
			}
			res.damage = append(res.damage, d)
			if !found {
				return res, nil
			}
			r = newBatchReader(f, q, fileSize, 1<<20, false)
			runStart, force = q, true
			continue
		}
		if flaggedEnd >= 0 {
			res.syncedTo = flaggedEnd
		}
		flaggedEnd = -1
		if h.Flags&flagSyncPoint != 0 {
			flaggedEnd = pos + h.Size()
		}
		if force || lastIdx < 0 || pos-lastIdx >= int64(interval) {
			res.idx = append(res.idx, indexEntry{off: h.Base, pos: pos, prevMaxTs: res.maxTs})
			lastIdx, force = pos, false
		}
		res.size, res.next, res.maxTs = pos+h.Size(), h.Last()+1, max(res.maxTs, h.MaxTs)
	}
}

func (res *scanResult) closeRun(start, end int64) {
	if end > start {
		res.runs = append(res.runs, byteRange{start, end})
	}
}

func (res *scanResult) state() scanState {
	return scanState{size: res.size, next: res.next, maxTs: res.maxTs, nidx: len(res.idx), nruns: len(res.runs)}
}

// cutAt drops everything from damaged range k on.
func (res *scanResult) cutAt(k int) {
	st := res.damage[k].before
	res.size, res.next, res.maxTs = st.size, st.next, st.maxTs
	res.idx, res.runs, res.damage = res.idx[:st.nidx], res.runs[:st.nruns], res.damage[:k]
}

// resyncWindow is how much of a damaged stretch resync reads at a time.
const resyncWindow = 1 << 20

// resync finds the first position at or after from holding a good batch
// whose base offset is at least next.
func resync(f File, from, fileSize, next int64) (pos, base int64, found bool, err error) {
	buf := make([]byte, resyncWindow+batchHeaderLen)
	for start := from; start+batchHeaderLen <= fileSize; start += resyncWindow {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), fileSize-start)], start)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, 0, false, fmt.Errorf("log: read %s at %d: %w", f.Name(), start, err)
		}
		for i := 0; i+batchHeaderLen <= n && i < resyncWindow; i++ {
			if buf[i+offVersion] != batchVersion {
				continue
			}
			h, herr := parseBatchHeader(buf[i:n])
			q := start + int64(i)
			if herr != nil || h.Base < next || q+h.Size() > fileSize {
				continue
			}
			if ok, err := goodBatchAt(f, q, h); err != nil || ok {
				return q, h.Base, ok, err
			}
		}
	}
	return 0, 0, false, nil
}

// goodBatchAt reads the batch h describes at pos and checks its CRC and
// records.
func goodBatchAt(f File, pos int64, h batchHeader) (bool, error) {
	b := make([]byte, h.Size())
	if _, err := f.ReadAt(b, pos); err != nil {
		return false, fmt.Errorf("log: read %s at %d: %w", f.Name(), pos, err)
	}
	if _, err := checkBatch(b); err != nil {
		return false, nil
	}
	return walkRecords(b, h, nil, func(Record) bool { return true }) == nil, nil
}

// recoveryPlan is what recovery does with a scanned segment.
type recoveryPlan struct {
	torn    *damagedRange  // where a torn tail starts (dropped), if any
	corrupt []damagedRange // damage before the synced end: quarantined
	lost    []LostRange
}

// planRecovery tells damage in synced bytes (below durable: corruption,
// whose offsets are lost) from a torn tail (the first damage at or past
// durable: dropped with everything after it), and cuts res there.
// tailTo is where the offsets of a damaged tail end (-1 if unknown).
func planRecovery(res *scanResult, durable, tailTo int64, path string, now time.Time) recoveryPlan {
	var plan recoveryPlan
	for k, d := range res.damage {
		if d.pos >= durable {
			plan.torn = &d
			res.cutAt(k)
			break
		}
		plan.corrupt = append(plan.corrupt, d)
		to := d.to
		if to < 0 {
			to = tailTo
		}
		if to > d.from {
			plan.lost = append(plan.lost, LostRange{From: d.from, To: to, Found: now,
				Reason: fmt.Sprintf("%s at byte %d of %s (%d damaged bytes)", d.reason, d.pos, path, d.end-d.pos)})
		}
	}
	return plan
}

// quarantine copies a damaged segment file, with a note of what was
// found, into <root>/quarantine, durably. It returns the copy's path.
func quarantine(fs FS, root string, f File, topic string, part int32, base int64, plan recoveryPlan, now time.Time) (string, error) {
	dir := filepath.Join(root, quarantineDirName)
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s.%d.%s.%s", topic, part, segmentName(base, ""), now.UTC().Format("20060102T150405.000Z"))
	dst := filepath.Join(dir, name+segmentSuffix)
	out, err := fs.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(out, io.NewSectionReader(f, 0, math.MaxInt64))
	if err == nil {
		err = out.Sync()
	}
	err = errors.Join(err, out.Close())
	if err == nil {
		err = replaceFile(fs, filepath.Join(dir, name+".note"), quarantineNote(f.Name(), topic, part, base, plan, now), true)
	}
	if err == nil {
		err = syncDir(fs, dir)
	}
	if err != nil {
		_ = fs.Remove(dst)
		return "", err
	}
	return dst, nil
}

func quarantineNote(path, topic string, part int32, base int64, plan recoveryPlan, now time.Time) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "cdcd log: a copy of a damaged segment, taken before recovery removed its damaged bytes.\n")
	fmt.Fprintf(&b, "segment: %s\ntopic: %s\npartition: %d\nbase offset: %d\nfound: %s\n", path, topic, part, base, now.UTC().Format(time.RFC3339Nano))
	for _, d := range plan.corrupt {
		fmt.Fprintf(&b, "damaged bytes [%d, %d): %s; offsets [%d, %d) could not be read\n", d.pos, d.end, d.reason, d.from, max(d.to, d.from))
	}
	for _, l := range plan.lost {
		fmt.Fprintf(&b, "lost offsets [%d, %d)\n", l.From, l.To)
	}
	b.WriteString("Every intact batch stays readable at its offsets; a fetch of a lost offset returns a DataLossError.\n" +
		"Repair the tables fed by this topic with a re-snapshot: cdcd snapshot -c FILE --replace TABLE.\n")
	return []byte(b.String())
}

// writeRuns copies the good runs of src into a new file at path, fsyncs
// it and returns it open for reading and writing.
func writeRuns(fs FS, src File, runs []byteRange, path string) (File, int64, error) {
	f, err := fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, 0, err
	}
	var n int64
	for _, r := range runs {
		k, err := io.Copy(f, io.NewSectionReader(src, r.start, r.end-r.start))
		n += k
		if err != nil {
			_ = f.Close()
			return nil, 0, err
		}
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, 0, err
	}
	return f, n, nil
}

// countFrames counts the batches (valid or not) that seem to start at pos:
// the bad one plus every following frame whose length field fits.
func countFrames(f File, pos, fileSize int64) int {
	n := 0
	hb := make([]byte, batchHeaderLen)
	for pos < fileSize {
		n++
		if _, err := f.ReadAt(hb, pos); err != nil {
			return n
		}
		h, err := parseBatchHeader(hb)
		if err != nil || pos+h.Size() > fileSize {
			return n
		}
		pos += h.Size()
	}
	return n
}
