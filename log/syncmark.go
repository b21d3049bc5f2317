package log

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
)

// Sync marker layout (see the package doc). Frozen.
const (
	syncMarkMagic   = "CDSM"
	syncMarkVersion = 1
	syncMarkSlotLen = 44 // magic 4, ver 1, rsvd 3, seq 8, base 8, size 8, next 8, crc 4
	syncMarkSlotGap = 64 // slot k starts at k*syncMarkSlotGap
)

// syncPos is a partition's synced position as the marker records it:
// every byte of segment base below size, and every offset below next, was
// fsynced before the marker was written.
type syncPos struct {
	base, size, next int64
}

// syncMark is a partition's open marker file. The flusher rewrites it after
// every data fsync without syncing it (Close syncs it): after a process
// crash it is exact; after a power loss it may lag, which only makes it a
// smaller lower bound. Two slots are written in turn, so a torn write
// leaves the other one. Owned by whoever holds the partition's flushMu.
type syncMark struct {
	f    File
	seq  uint64
	last syncPos
	buf  [syncMarkSlotLen]byte
}

// readSyncMark returns the newest valid slot of a partition's marker, and
// false if there is none (no file: a log written before markers existed).
func readSyncMark(fs FS, dir string) (syncPos, uint64, bool) {
	b, err := readFile(fs, filepath.Join(dir, syncMarkName))
	if err != nil {
		return syncPos{}, 0, false
	}
	var best syncPos
	var bestSeq uint64
	found := false
	for k := 0; k < 2; k++ {
		pos, seq, ok := parseSyncSlot(b[min(k*syncMarkSlotGap, len(b)):])
		if ok && (!found || seq > bestSeq) {
			best, bestSeq, found = pos, seq, true
		}
	}
	return best, bestSeq, found
}

func parseSyncSlot(b []byte) (syncPos, uint64, bool) {
	if len(b) < syncMarkSlotLen || string(b[:4]) != syncMarkMagic || b[4] != syncMarkVersion {
		return syncPos{}, 0, false
	}
	if crc32.Checksum(b[:syncMarkSlotLen-4], crcTable) != binary.LittleEndian.Uint32(b[syncMarkSlotLen-4:]) {
		return syncPos{}, 0, false
	}
	pos := syncPos{
		base: int64(binary.LittleEndian.Uint64(b[16:])),
		size: int64(binary.LittleEndian.Uint64(b[24:])),
		next: int64(binary.LittleEndian.Uint64(b[32:])),
	}
	if pos.base < 0 || pos.size < 0 || pos.next < pos.base {
		return syncPos{}, 0, false
	}
	return pos, binary.LittleEndian.Uint64(b[8:]), true
}

func encodeSyncSlot(b []byte, pos syncPos, seq uint64) []byte {
	b = append(b[:0], syncMarkMagic...)
	b = append(b, syncMarkVersion, 0, 0, 0)
	b = binary.LittleEndian.AppendUint64(b, seq)
	b = binary.LittleEndian.AppendUint64(b, uint64(pos.base))
	b = binary.LittleEndian.AppendUint64(b, uint64(pos.size))
	b = binary.LittleEndian.AppendUint64(b, uint64(pos.next))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// openSyncMark opens (creating if needed) a partition's marker for
// writing, continuing after sequence number seq.
func openSyncMark(fs FS, dir string, seq uint64, last syncPos) (*syncMark, error) {
	path := filepath.Join(dir, syncMarkName)
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		// New: its directory entry is made durable, so the marker's
		// later (unsynced) writes have a file to land in after a crash.
		if f, err = fs.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644); err == nil {
			err = syncDir(fs, dir)
		}
	}
	if err != nil {
		if f != nil {
			_ = f.Close()
		}
		return nil, err
	}
	return &syncMark{f: f, seq: seq, last: last}, nil
}

// record writes pos into the next slot unless it is what the marker holds.
// REQUIRES: pos is fsynced.
func (m *syncMark) record(pos syncPos) error {
	if m == nil || pos == m.last {
		return nil
	}
	m.seq++
	if _, err := m.f.WriteAt(encodeSyncSlot(m.buf[:0], pos, m.seq), int64(m.seq%2)*syncMarkSlotGap); err != nil {
		return err
	}
	m.last = pos
	return nil
}

// close syncs and closes the marker.
func (m *syncMark) close() error {
	if m == nil {
		return nil
	}
	return errors.Join(m.f.Sync(), m.f.Close())
}
