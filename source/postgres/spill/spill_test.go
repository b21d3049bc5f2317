package spill

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestSpillRoundTripAndAborts: messages come back in order with their
// aborted subtransactions; a corrupted file is reported, never replayed.
func TestSpillRoundTripAndAborts(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "7.spill"), []byte("left over"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "7.spill")); !os.IsNotExist(err) {
		t.Fatal("a spill file of an earlier session survived")
	}
	msgs := [][]byte{[]byte("I one"), []byte("U two"), bytes.Repeat([]byte("x"), 300<<10)}
	if err := s.Start(7, true); err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs[:2] {
		if err := s.Write(7, uint64(i+1)<<8, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Stop(7); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(7, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(7, 0x300, msgs[2]); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(7); err != nil {
		t.Fatal(err)
	}
	s.Abort(7, 9)
	var got [][]byte
	var lsns []uint64
	err = s.Replay(7, func(lsn uint64, m []byte, aborted map[uint32]bool) error {
		if !aborted[9] {
			t.Error("subtransaction 9's abort lost")
		}
		lsns = append(lsns, lsn)
		got = append(got, append([]byte{}, m...))
		return nil
	})
	if err != nil || !reflect.DeepEqual(got, msgs) {
		t.Fatalf("replay: %d messages, %v", len(got), err)
	}
	if !reflect.DeepEqual(lsns, []uint64{0x100, 0x200, 0x300}) {
		t.Fatalf("replayed LSNs %x", lsns)
	}
	if s.Bytes() != 0 || len(s.open) != 0 {
		t.Fatalf("after replay: %d bytes, %d files", s.Bytes(), len(s.open))
	}

	// Corruption.
	if err := s.Start(8, true); err != nil {
		t.Fatal(err)
	}
	_ = s.Write(8, 1, []byte("hello"))
	_ = s.Stop(8)
	path := s.open[8].path
	b, _ := os.ReadFile(path)
	b[len(b)-1] ^= 1
	_ = os.WriteFile(path, b, 0o644)
	if err := s.Replay(8, func(uint64, []byte, map[uint32]bool) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt file replayed: %v", err)
	}
	// A top-level abort removes the file.
	_ = s.Start(9, true)
	_ = s.Write(9, 1, []byte("x"))
	s.Abort(9, 9)
	if len(s.open) != 0 {
		t.Fatal("aborted transaction kept")
	}
}

// TestSpillGaps: a stream block or a commit of a transaction whose earlier
// blocks this session never saw is an error (the reader then reconnects
// and the server streams the transaction again whole), never a partial
// transaction.
func TestSpillGaps(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(5, false); !errors.Is(err, ErrGap) {
		t.Fatalf("a continued block of an unknown transaction: %v", err)
	}
	if err := s.Replay(6, func(uint64, []byte, map[uint32]bool) error { return nil }); !errors.Is(err, ErrGap) {
		t.Fatalf("the commit of an unknown streamed transaction: %v", err)
	}
}

// TestCloseRemovesMadeDir: a directory Open made goes with Close once its
// files are gone (the reader's default, $TMPDIR/cdcd-spill-<slot>, is
// not left behind); one the operator made stays, and so does one holding
// other files.
func TestCloseRemovesMadeDir(t *testing.T) {
	base := t.TempDir()
	made := filepath.Join(base, "made")
	s, err := Open(made)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(7, true); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(made); !os.IsNotExist(err) {
		t.Fatalf("the directory Open made is still there after Close (stat: %v)", err)
	}

	own := filepath.Join(base, "own")
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(own); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(own); err != nil {
		t.Fatalf("Close removed a directory it did not make: %v", err)
	}

	busy := filepath.Join(base, "busy")
	if s, err = Open(busy); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(busy, "other"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(busy, "other")); err != nil {
		t.Fatalf("Close removed a directory holding another file: %v", err)
	}
}
