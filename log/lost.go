package log

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// LostRange is a range of a partition's offsets that the log lost: recovery
// found their bytes damaged (or missing) where they had been synced. Fetch
// of an offset in it returns a *DataLossError.
type LostRange struct {
	From, To int64 // lost offsets [From, To)
	// Reason says what was found, where, and where the damaged file's copy
	// was put.
	Reason string
	// Found is when the loss was detected.
	Found time.Time
}

// Lost-ranges file layout (see the package doc). Frozen.
const (
	lostMagic     = "CDLR"
	lostVersion   = 1
	lostHeaderLen = 12 // magic 4, ver 1, rsvd 3, count 4
	maxLostReason = 1 << 12
)

func encodeLost(ranges []LostRange) []byte {
	b := make([]byte, 0, lostHeaderLen+len(ranges)*64+4)
	b = append(b, lostMagic...)
	b = append(b, lostVersion, 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ranges)))
	for _, r := range ranges {
		reason := r.Reason
		if len(reason) > maxLostReason {
			reason = reason[:maxLostReason]
		}
		b = binary.LittleEndian.AppendUint64(b, uint64(r.From))
		b = binary.LittleEndian.AppendUint64(b, uint64(r.To))
		b = binary.LittleEndian.AppendUint64(b, uint64(r.Found.UnixMilli()))
		b = binary.LittleEndian.AppendUint16(b, uint16(len(reason)))
		b = append(b, reason...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// parseLost decodes a lost-ranges file; any damage is an error (the file is
// written atomically, so damage is not a torn write).
func parseLost(b []byte) ([]LostRange, error) {
	bad := func(what string) ([]LostRange, error) { return nil, errors.New(what) }
	if len(b) < lostHeaderLen+4 || string(b[:4]) != lostMagic || b[4] != lostVersion {
		return bad("bad header")
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return bad("bad crc")
	}
	n := int(binary.LittleEndian.Uint32(body[8:]))
	d := body[lostHeaderLen:]
	var out []LostRange
	for i := 0; i < n; i++ {
		if len(d) < 26 {
			return bad("short entry")
		}
		r := LostRange{
			From:  int64(binary.LittleEndian.Uint64(d)),
			To:    int64(binary.LittleEndian.Uint64(d[8:])),
			Found: time.UnixMilli(int64(binary.LittleEndian.Uint64(d[16:]))),
		}
		k := int(binary.LittleEndian.Uint16(d[24:]))
		if len(d) < 26+k || r.From < 0 || r.To <= r.From {
			return bad("bad entry")
		}
		r.Reason = string(d[26 : 26+k])
		out = append(out, r)
		d = d[26+k:]
	}
	if len(d) != 0 {
		return bad("trailing bytes")
	}
	return out, nil
}

// readLost returns a partition's recorded lost ranges (none if the file
// does not exist).
func readLost(fs FS, dir string) ([]LostRange, error) {
	path := filepath.Join(dir, lostRangesName)
	b, err := readFile(fs, path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ranges, err := parseLost(b)
	if err != nil {
		return nil, &CorruptionError{Path: path, Reason: err.Error() +
			"; the offsets this partition lost are no longer known: re-snapshot the tables fed by this topic, then remove the file"}
	}
	return ranges, nil
}

// writeLost replaces a partition's lost-ranges file atomically and durably.
func writeLost(fs FS, dir string, ranges []LostRange) error {
	return replaceFile(fs, filepath.Join(dir, lostRangesName), encodeLost(ranges), true)
}

// mergeLost adds ranges to a sorted, disjoint list, joining overlapping
// or touching ones (their reasons are joined); it reports whether anything
// new was added.
func mergeLost(have []LostRange, add ...LostRange) ([]LostRange, bool) {
	out := slices.Clone(have)
	changed := false
	for _, a := range add {
		if a.To <= a.From || covered(out, a) {
			continue
		}
		changed = true
		out = append(out, a)
		slices.SortFunc(out, func(x, y LostRange) int { return cmpInt64(x.From, y.From) })
		merged := out[:1]
		for _, r := range out[1:] {
			last := &merged[len(merged)-1]
			if r.From > last.To {
				merged = append(merged, r)
				continue
			}
			if r.To > last.To {
				last.To = r.To
				last.Reason += "; " + r.Reason
			}
		}
		out = merged
	}
	return out, changed
}

// covered reports whether a lies inside one range of a sorted list.
func covered(ranges []LostRange, a LostRange) bool {
	for _, r := range ranges {
		if r.From <= a.From && a.To <= r.To {
			return true
		}
	}
	return false
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// lostAt returns the range holding off, or the first range after it (ok
// false), or nil when there is none after.
func lostAt(ranges []LostRange, off int64) (r *LostRange, inside bool) {
	for i := range ranges {
		switch {
		case off < ranges[i].From:
			return &ranges[i], false
		case off < ranges[i].To:
			return &ranges[i], true
		}
	}
	return nil, false
}

// dataLoss is the error for a fetch at or before a lost range.
func (p *partition) dataLoss(r *LostRange) error {
	return &DataLossError{Topic: p.topic, Partition: p.id, From: r.From, To: r.To, Reason: r.Reason}
}

// recordLost adds ranges to the partition's durable list (unless
// read-only: then only to the view in memory), logs and returns the new
// ones. REQUIRES: no concurrent recordLost on p (Open, or
// Embedded.cleanMu).
func (p *partition) recordLost(add ...LostRange) ([]LostRange, error) {
	p.mu.Lock()
	have := p.lost
	p.mu.Unlock()
	var fresh []LostRange
	for _, a := range add {
		if a.To > a.From && !covered(have, a) {
			fresh = append(fresh, a)
		}
	}
	if len(fresh) == 0 {
		return nil, nil
	}
	merged, _ := mergeLost(have, fresh...)
	if !p.opts.ReadOnly {
		if err := writeLost(p.opts.FS, p.dir, merged); err != nil {
			return nil, fmt.Errorf("log: record lost offsets of %s/%d: %w", p.topic, p.id, err)
		}
	}
	for _, r := range fresh {
		p.logger.Error("log: offsets lost: consumers get a DataLossError for them; re-snapshot the tables fed by this topic",
			"from", r.From, "to", r.To, "reason", r.Reason, "read_only", p.opts.ReadOnly)
	}
	p.mu.Lock()
	p.lost = merged
	p.mu.Unlock()
	return fresh, nil
}

// LastReadable returns the newest offset of a partition that is not in a
// lost range, and false if there is none: where a reader looks for the
// last record that survived (a lost tail is skipped; its offsets are never
// given out again).
func LastReadable(p PartitionInfo) (int64, bool) {
	off := p.End - 1
	for i := len(p.Lost) - 1; i >= 0; i-- {
		if r := p.Lost[i]; off >= r.From && off < r.To {
			off = r.From - 1
		}
	}
	return off, off >= p.Start
}
