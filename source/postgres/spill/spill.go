// Package spill keeps the messages of large transactions on disk while
// PostgreSQL streams them, until their Stream Commit replays them.
//
// Spill files hold the messages of large transactions that PostgreSQL
// streams before they commit (pgoutput protocol 2, streaming on): one file
// per top-level transaction, named <xid>.spill in the spill directory,
// appended to by each stream block and replayed when Stream Commit arrives,
// so memory stays bounded whatever the transaction's size. A record is one
// pgoutput message exactly as received (its type byte and, for changes,
// the xid of the (sub)transaction it belongs to) and the WAL position it
// came with (XLogData's start: the change's own LSN):
//
//	+----------------+-------------------+--------------+------------------------+
//	| length uint32  | CRC-32C uint32    | LSN uint64   | pgoutput message ...   |
//	| (of message)   | (of LSN, message) |              |                        |
//	+----------------+-------------------+--------------+------------------------+
//
// All integers big-endian. The files are never fsynced and never read
// after a restart: PostgreSQL streams every transaction that had not
// committed when the reader stopped again from its start, so the reader
// clears the directory whenever it (re)connects. Frozen layout.
package spill

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The file name suffix, the record header's size and the largest record:
// frozen, as the layout in the package doc.
const (
	spillSuffix    = ".spill"
	spillHeader    = 16
	spillMaxRecord = 1 << 30 // a pgoutput message is at most 1 GB
)

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	// ErrCorrupt: a spill file failed its checks while being replayed.
	ErrCorrupt = errors.New("postgres: spill file corrupt")
	// ErrGap: a streamed transaction's messages are incomplete in this
	// session; the reader reconnects, and the server streams it again whole.
	ErrGap = errors.New("postgres: streamed transaction incomplete")
)

// Set manages the spill files of the in-progress streamed
// transactions. Not safe for concurrent use.
type Set struct {
	dir  string
	made bool             // Open made dir: Close removes it when empty
	open map[uint32]*file // by top-level xid
	// bytes is the size of all live spill files.
	bytes int64
}

// Bytes is the size of all live spill files.
func (s *Set) Bytes() int64 { return s.bytes }

type file struct {
	path    string
	f       *os.File
	w       *bufio.Writer
	size    int64
	aborted map[uint32]bool // aborted subtransactions
}

// Open makes dir and removes spill files a previous session left.
func Open(dir string) (*Set, error) {
	_, statErr := os.Stat(dir)
	made := errors.Is(statErr, fs.ErrNotExist)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("postgres: spill directory: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("postgres: spill directory: %w", err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), spillSuffix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return nil, fmt.Errorf("postgres: remove old spill file: %w", err)
			}
		}
	}
	return &Set{dir: dir, made: made, open: map[uint32]*file{}}, nil
}

// Start begins a stream block of xid; first is set for its first block,
// which starts the file afresh.
func (s *Set) Start(xid uint32, first bool) error {
	sf := s.open[xid]
	if sf == nil && !first {
		return fmt.Errorf("%w: stream block of transaction %d continues one this session never saw", ErrGap, xid)
	}
	if sf != nil && !first {
		if sf.f == nil {
			f, err := os.OpenFile(sf.path, os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				return fmt.Errorf("postgres: reopen spill file: %w", err)
			}
			sf.f, sf.w = f, bufio.NewWriterSize(f, 256<<10)
		}
		return nil
	}
	if sf != nil {
		s.Drop(xid)
	}
	path := filepath.Join(s.dir, strconv.FormatUint(uint64(xid), 10)+spillSuffix)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("postgres: create spill file: %w", err)
	}
	s.open[xid] = &file{path: path, f: f, w: bufio.NewWriterSize(f, 256<<10), aborted: map[uint32]bool{}}
	return nil
}

// Write appends one message of xid's current stream block, received at
// WAL position lsn.
func (s *Set) Write(xid uint32, lsn uint64, msg []byte) error {
	sf := s.open[xid]
	if sf == nil || sf.w == nil {
		return fmt.Errorf("postgres: streamed message for transaction %d outside its stream block", xid)
	}
	var hdr [spillHeader]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(msg)))
	binary.BigEndian.PutUint64(hdr[8:], lsn)
	binary.BigEndian.PutUint32(hdr[4:], crc32.Update(crc32.Checksum(hdr[8:], castagnoli), castagnoli, msg))
	if _, err := sf.w.Write(hdr[:]); err != nil {
		return fmt.Errorf("postgres: write spill file: %w", err)
	}
	if _, err := sf.w.Write(msg); err != nil {
		return fmt.Errorf("postgres: write spill file: %w", err)
	}
	n := int64(spillHeader + len(msg))
	sf.size += n
	s.bytes += n
	return nil
}

// Stop ends xid's stream block: its buffer goes to the file, which is
// closed until the next block (many transactions may be in progress).
func (s *Set) Stop(xid uint32) error {
	sf := s.open[xid]
	if sf == nil || sf.f == nil {
		return nil
	}
	err := sf.w.Flush()
	if cerr := sf.f.Close(); err == nil {
		err = cerr
	}
	sf.f, sf.w = nil, nil
	if err != nil {
		return fmt.Errorf("postgres: flush spill file: %w", err)
	}
	return nil
}

// Abort forgets subxid's changes, or the whole transaction when subxid is
// the transaction itself.
func (s *Set) Abort(xid, subxid uint32) {
	if xid == subxid {
		s.Drop(xid)
		return
	}
	if sf := s.open[xid]; sf != nil {
		sf.aborted[subxid] = true
	}
}

// Drop removes xid's file.
func (s *Set) Drop(xid uint32) {
	sf := s.open[xid]
	if sf == nil {
		return
	}
	if sf.f != nil {
		sf.f.Close()
	}
	os.Remove(sf.path)
	s.bytes -= sf.size
	delete(s.open, xid)
}

// Replay calls fn with every message of xid in order and its LSN, telling
// it whether the message's (sub)transaction was aborted, then removes the
// file.
func (s *Set) Replay(xid uint32, fn func(lsn uint64, msg []byte, aborted map[uint32]bool) error) error {
	sf := s.open[xid]
	if sf == nil {
		return fmt.Errorf("%w: commit of streamed transaction %d, whose stream blocks this session never saw", ErrGap, xid)
	}
	defer s.Drop(xid)
	if err := s.Stop(xid); err != nil {
		return err
	}
	f, err := os.Open(sf.path)
	if err != nil {
		return fmt.Errorf("postgres: open spill file: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 256<<10)
	var hdr [spillHeader]byte
	var buf []byte
	for off := int64(0); ; {
		if _, err := io.ReadFull(r, hdr[:]); err == io.EOF {
			if off != sf.size {
				return fmt.Errorf("%w: %s ends at %d, %d bytes were written", ErrCorrupt, sf.path, off, sf.size)
			}
			return nil
		} else if err != nil {
			return fmt.Errorf("%w: %s at %d: %v", ErrCorrupt, sf.path, off, err)
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > spillMaxRecord {
			return fmt.Errorf("%w: %s at %d: record of %d bytes", ErrCorrupt, sf.path, off, n)
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		msg := buf[:n]
		if _, err := io.ReadFull(r, msg); err != nil {
			return fmt.Errorf("%w: %s at %d: %v", ErrCorrupt, sf.path, off, err)
		}
		if crc32.Update(crc32.Checksum(hdr[8:], castagnoli), castagnoli, msg) != binary.BigEndian.Uint32(hdr[4:]) {
			return fmt.Errorf("%w: %s at %d: checksum mismatch", ErrCorrupt, sf.path, off)
		}
		if err := fn(binary.BigEndian.Uint64(hdr[8:]), msg, sf.aborted); err != nil {
			return err
		}
		off += int64(spillHeader) + int64(n)
	}
}

// Close removes every file (the session ends; PostgreSQL will stream the
// unfinished transactions again), and the directory if Open made it and
// nothing else is in it (a directory the operator made stays).
func (s *Set) Close() {
	for xid := range s.open {
		s.Drop(xid)
	}
	if s.made {
		_ = os.Remove(s.dir) // fails, harmlessly, when not empty
	}
}
