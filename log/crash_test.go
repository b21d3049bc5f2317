package log

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// crashFixture is a closed log with one single-partition topic whose last
// segment holds a known list of batches.
type crashFixture struct {
	dir     string
	segPath string           // last segment of partition 0, relative to dir
	bounds  []int64          // end position of each batch in that segment
	offsets []int64          // first offset of each batch in it
	values  map[int64]string // offset -> value of every record of the topic
}

func newCrashFixture(t *testing.T, batches int) crashFixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	l, err := Open(dir, Options{SegmentBytes: 2048, IndexIntervalBytes: 128}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CreateTopic(ctx, "t", TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	fx := crashFixture{dir: dir, values: map[int64]string{}}
	for i := 0; i < batches; i++ {
		recs := make([]Record, 1+i%3)
		for j := range recs {
			recs[j] = Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "value-%d-%d", i, j), Partition: 0,
				Headers: []Header{{Key: "h", Value: []byte{byte(i)}}}}
		}
		if err := l.Produce(ctx, "t", recs); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			fx.values[r.Offset] = string(r.Value)
		}
	}
	p := l.topics["t"].parts[0]
	last := p.segs[len(p.segs)-1]
	fx.segPath, _ = filepath.Rel(dir, last.path)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, fx.segPath))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	r := newBatchReader(f, 0, fi.Size(), 1<<20, false)
	for {
		_, h, pos, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fx.bounds = append(fx.bounds, pos+h.Size())
		fx.offsets = append(fx.offsets, h.Base)
	}
	if len(fx.bounds) < 3 {
		t.Fatalf("fixture's last segment has %d batches; want at least 3", len(fx.bounds))
	}
	return fx
}

// damaged copies the fixture and applies damage to the copy's last segment.
func (fx crashFixture) damaged(t *testing.T, damage func(f *os.File)) string {
	t.Helper()
	dst := t.TempDir()
	copyDir(t, fx.dir, dst)
	f, err := os.OpenFile(filepath.Join(dst, fx.segPath), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	damage(f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// check opens dir and verifies that partition 0 holds exactly the records
// below end, intact, and that the recovery report says what was dropped.
func (fx crashFixture) check(t *testing.T, dir string, end int64, wantLoss bool, droppedBytes int64) {
	t.Helper()
	l, err := Open(dir, Options{SegmentBytes: 2048, IndexIntervalBytes: 128}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rep := l.Recovery()
	if rep.Lost() != wantLoss {
		t.Fatalf("Recovery = %+v, want loss %v", rep, wantLoss)
	}
	if wantLoss && (len(rep.Truncations) != 1 || rep.Truncations[0].Bytes != droppedBytes || rep.Truncations[0].Batches < 1) {
		t.Fatalf("Recovery = %+v, want %d bytes dropped", rep, droppedBytes)
	}
	info, err := l.DescribeTopic(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Partitions[0].End; got != end {
		t.Fatalf("End = %d, want %d", got, end)
	}
	for off := int64(0); off < end; {
		recs, err := l.Fetch(context.Background(), "t", 0, off, FetchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Offset != off || string(r.Value) != fx.values[off] {
				t.Fatalf("record %d = %d %q, want %q", off, r.Offset, r.Value, fx.values[off])
			}
			off++
		}
	}
	// The log takes appends right after the valid prefix.
	recs := []Record{{Value: []byte("after"), Partition: 0}}
	if err := l.Produce(context.Background(), "t", recs); err != nil || recs[0].Offset != end {
		t.Fatalf("append after recovery at %d, %v; want %d", recs[0].Offset, err, end)
	}
}

// TestTornTailEveryByte cuts the last segment at every byte of its last two
// batches: reopening keeps exactly the whole batches before the cut.
func TestTornTailEveryByte(t *testing.T) {
	fx := newCrashFixture(t, 40)
	n := len(fx.bounds)
	for cut := fx.bounds[n-3]; cut < fx.bounds[n-1]; cut++ {
		k := 0 // whole batches left in the segment
		for k < n && fx.bounds[k] <= cut {
			k++
		}
		kept := fx.bounds[k-1]
		dir := fx.damaged(t, func(f *os.File) {
			if err := f.Truncate(cut); err != nil {
				t.Fatal(err)
			}
		})
		fx.check(t, dir, fx.offsets[k], cut != kept, cut-kept)
	}
}

// TestBitFlipMidSegment flips one bit inside a batch in the middle of the
// last segment: that batch and everything after it are dropped and
// reported; everything before survives.
func TestBitFlipMidSegment(t *testing.T) {
	fx := newCrashFixture(t, 40)
	n := len(fx.bounds)
	mid := n / 2
	batchStart := fx.bounds[mid-1]
	size := fx.bounds[mid] - batchStart
	fileEnd := fx.bounds[n-1]
	for _, at := range []int64{0, 3, 5, 8, 12, 20, 30, 41, size / 2, size - 1} {
		for _, bit := range []byte{0x01, 0x80} {
			dir := fx.damaged(t, func(f *os.File) {
				b := make([]byte, 1)
				if _, err := f.ReadAt(b, batchStart+at); err != nil {
					t.Fatal(err)
				}
				b[0] ^= bit
				if _, err := f.WriteAt(b, batchStart+at); err != nil {
					t.Fatal(err)
				}
			})
			t.Run(fmt.Sprintf("byte%d-bit%#x", at, bit), func(t *testing.T) {
				fx.check(t, dir, fx.offsets[mid], true, fileEnd-batchStart)
			})
		}
	}
}

// TestBitFlipClosedSegment damages a closed segment, which Open trusts
// through its index: Fetch reports ErrCorrupt instead of returning bad data.
func TestBitFlipClosedSegment(t *testing.T) {
	fx := newCrashFixture(t, 40)
	dst := t.TempDir()
	copyDir(t, fx.dir, dst)
	first := filepath.Join(dst, filepath.Dir(fx.segPath), segmentName(0, segmentSuffix))
	f, err := os.OpenFile(first, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, 60); err != nil {
		t.Fatal(err)
	}
	f.Close()
	l, err := Open(dst, Options{SegmentBytes: 2048}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.Recovery().Lost() {
		t.Fatalf("a closed segment with a valid index was rescanned: %+v", l.Recovery())
	}
	defer l.Close()
	for off := int64(0); err == nil; {
		var recs []Record
		recs, err = l.Fetch(context.Background(), "t", 0, off, FetchOptions{})
		if len(recs) == 0 && err == nil {
			t.Fatalf("read past the damage without an error (at %d)", off)
		}
		if len(recs) > 0 {
			off = recs[len(recs)-1].Offset + 1
		}
	}
	var ce *CorruptionError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Fetch over a damaged closed segment: %v", err)
	}
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if d.Name() == lockFileName {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWriteFailureIsSticky: once a write or sync fails, the partition
// refuses appends (the page cache is in an unknown state) until reopened,
// and nothing unsynced becomes visible.
func TestWriteFailureIsSticky(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := Open(dir, Options{CleanupInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CreateTopic(ctx, "t", TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if err := l.Produce(ctx, "t", []Record{{Value: []byte("ok"), Partition: 0}}); err != nil {
		t.Fatal(err)
	}
	p := l.topics["t"].parts[0]
	p.mu.Lock()
	_ = p.segs[len(p.segs)-1].f.Close() // every later write and sync fails
	p.mu.Unlock()
	err = l.Produce(ctx, "t", []Record{{Value: []byte("lost"), Partition: 0}})
	var we *WriteError
	if !errors.As(err, &we) || we.Topic != "t" {
		t.Fatalf("Produce after the file broke: %v", err)
	}
	if err := l.Produce(ctx, "t", []Record{{Value: []byte("again"), Partition: 0}}); !errors.As(err, &we) {
		t.Fatalf("second Produce: %v, want the sticky WriteError", err)
	}
	info, _ := l.DescribeTopic(ctx, "t")
	if info.Partitions[0].End != 1 {
		t.Fatalf("End = %d after failed appends, want 1", info.Partitions[0].End)
	}
	_ = l.Close()
	l, err = Open(dir, Options{CleanupInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	recs := []Record{{Value: []byte("after reopen"), Partition: 0}}
	if err := l.Produce(ctx, "t", recs); err != nil || recs[0].Offset != 1 {
		t.Fatalf("Produce after reopen: offset %d, %v", recs[0].Offset, err)
	}
}
