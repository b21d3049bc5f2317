package log

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fixtureOpts are the options every damage test opens the fixture with:
// small segments, so one partition has closed segments and an active one.
var fixtureOpts = Options{SegmentBytes: 2048, IndexIntervalBytes: 128, CleanupInterval: -1}

// segFile is one segment of the fixture's partition and its batches.
type segFile struct {
	rel     string  // path relative to the fixture's directory
	bounds  []int64 // end position of each batch
	offsets []int64 // first offset of each batch
}

// crashFixture is a cleanly closed log with one single-partition topic
// "t" of several segments, each batch its own group commit.
type crashFixture struct {
	dir    string
	segs   []segFile        // in order; the last is the active segment
	values map[int64]string // offset -> value of every record
	end    int64
	// marks holds the sync marker's bytes as they were once the records
	// below each end offset were acknowledged.
	marks map[int64][]byte
}

func newCrashFixture(t *testing.T, batches int) crashFixture {
	t.Helper()
	return newCrashFixturePadded(t, batches, 0)
}

// newCrashFixturePadded is newCrashFixture with each value padded by pad
// bytes: from about 1 KiB a batch, Produce compresses its batches.
func newCrashFixturePadded(t *testing.T, batches, pad int) crashFixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	l, err := Open(dir, fixtureOpts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CreateTopic(ctx, "t", TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	fx := crashFixture{dir: dir, values: map[int64]string{}, marks: map[int64][]byte{}}
	markPath := filepath.Join(dir, "topics", "t", "0", syncMarkName)
	for i := 0; i < batches; i++ {
		recs := make([]Record, 1+i%3)
		for j := range recs {
			recs[j] = Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "value-%d-%d%s", i, j, strings.Repeat("x", pad)), Partition: 0,
				Headers: []Header{{Key: "h", Value: []byte{byte(i)}}}}
		}
		if err := l.Produce(ctx, "t", recs); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			fx.values[r.Offset] = string(r.Value)
		}
		fx.end = recs[len(recs)-1].Offset + 1
		if fx.marks[fx.end], err = os.ReadFile(markPath); err != nil {
			t.Fatal(err)
		}
	}
	p := l.topics["t"].parts[0]
	for _, s := range p.segs {
		rel, _ := filepath.Rel(dir, s.path)
		fx.segs = append(fx.segs, segFile{rel: rel})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range fx.segs {
		fx.segs[i].readBatches(t, dir)
	}
	if len(fx.segs) < 3 || len(fx.active().bounds) < 4 {
		t.Fatalf("fixture has %d segments, the last with %d batches; want at least 3 and 4", len(fx.segs), len(fx.active().bounds))
	}
	return fx
}

func (sf *segFile) readBatches(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, sf.rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	r := newBatchReader(f, 0, fi.Size(), 1<<20, false)
	for {
		_, h, pos, err := r.next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		sf.bounds = append(sf.bounds, pos+h.Size())
		sf.offsets = append(sf.offsets, h.Base)
	}
}

func (fx crashFixture) active() segFile { return fx.segs[len(fx.segs)-1] }

// batchEnd is the offset after batch k of segment i.
func (fx crashFixture) batchEnd(i, k int) int64 {
	sf := fx.segs[i]
	switch {
	case k+1 < len(sf.offsets):
		return sf.offsets[k+1]
	case i+1 < len(fx.segs):
		return fx.segs[i+1].offsets[0]
	}
	return fx.end
}

// batchAt returns the batch of segment i holding byte pos.
func (sf segFile) batchAt(pos int64) int {
	k, _ := slices.BinarySearch(sf.bounds, pos+1)
	return k
}

// damaged copies the fixture and applies damage to the copy.
func (fx crashFixture) damaged(t *testing.T, damage func(dir string)) string {
	t.Helper()
	dst := t.TempDir()
	copyDir(t, fx.dir, dst)
	damage(dst)
	return dst
}

// crashedAt sets the copy's sync marker back to when the records below
// end were acknowledged: a crash that lost the marker's later writes.
func (fx crashFixture) crashedAt(t *testing.T, dir string, end int64) {
	t.Helper()
	b, ok := fx.marks[end]
	if !ok {
		t.Fatalf("no marker recorded at end %d", end)
	}
	if err := os.WriteFile(filepath.Join(dir, "topics", "t", "0", syncMarkName), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func editFile(t *testing.T, path string, edit func(f *os.File)) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	edit(f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t *testing.T, path string, at int64) {
	t.Helper()
	editFile(t, path, func(f *os.File) {
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, at); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0xff
		if _, err := f.WriteAt(b, at); err != nil {
			t.Fatal(err)
		}
	})
}

func truncateFile(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

// outcome is what a damaged copy must open to.
type outcome struct {
	end         int64      // the partition's end offset
	lost        [][2]int64 // lost ranges [from, to)
	torn        bool       // a torn tail is reported at Open
	lostAtOpen  bool       // the loss is found at Open (not by a fetch)
	quarantined int        // copies in quarantine after the check
	readOnly    bool
}

func lostPairs(ranges []LostRange) [][2]int64 {
	var out [][2]int64
	for _, r := range ranges {
		out = append(out, [2]int64{r.From, r.To})
	}
	return out
}

// check opens dir and verifies that partition 0 holds exactly the records
// of the fixture below want.end outside the lost ranges, intact; that a
// consumer reading in order gets a *DataLossError naming exactly each lost
// range, after every record before it; and that appends continue at
// want.end. Then a reopen finds nothing new and the same losses.
func (fx crashFixture) check(t *testing.T, dir string, want outcome) {
	t.Helper()
	ctx := context.Background()
	opts := fixtureOpts
	opts.ReadOnly = want.readOnly
	l, err := Open(dir, opts, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	rep := l.Recovery()
	if got := len(rep.Truncations) > 0; got != want.torn {
		t.Fatalf("torn tail reported %v, want %v: %+v", got, want.torn, rep)
	}
	var atOpen [][2]int64
	for _, loss := range rep.Losses {
		atOpen = append(atOpen, [2]int64{loss.From, loss.To})
	}
	if want.lostAtOpen && !reflect.DeepEqual(atOpen, want.lost) || !want.lostAtOpen && len(atOpen) > 0 {
		t.Fatalf("losses at Open = %v, want %v (at open: %v)", atOpen, want.lost, want.lostAtOpen)
	}
	var seen [][2]int64
	for off := int64(0); off < want.end; {
		recs, err := l.Fetch(ctx, "t", 0, off, FetchOptions{MaxBytes: 300})
		var dl *DataLossError
		if errors.As(err, &dl) {
			if dl.From != off || dl.Topic != "t" || dl.Partition != 0 || !errors.Is(err, ErrDataLost) {
				t.Fatalf("Fetch(%d) = %v: a loss not starting at the offset asked for", off, err)
			}
			if dl.To > dl.From+1 {
				if _, err := l.Fetch(ctx, "t", 0, dl.To-1, FetchOptions{}); !errors.As(err, &dl) || dl.From != off {
					t.Fatalf("Fetch(%d) inside the lost range = %v", dl.To-1, err)
				}
			}
			seen = append(seen, [2]int64{dl.From, dl.To})
			off = dl.To
			continue
		}
		if err != nil {
			t.Fatalf("Fetch(%d): %v", off, err)
		}
		if len(recs) == 0 {
			t.Fatalf("Fetch(%d) returned nothing below end %d", off, want.end)
		}
		for _, r := range recs {
			if r.Offset != off || string(r.Value) != fx.values[off] {
				t.Fatalf("record %d = %d %q, want %q", off, r.Offset, r.Value, fx.values[off])
			}
			off++
		}
	}
	if !reflect.DeepEqual(seen, want.lost) {
		t.Fatalf("lost ranges met reading = %v, want %v", seen, want.lost)
	}
	info, err := l.DescribeTopic(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if p := info.Partitions[0]; p.End != want.end || !reflect.DeepEqual(lostPairs(p.Lost), want.lost) {
		t.Fatalf("DescribeTopic: end %d lost %v; want %d %v", p.End, lostPairs(p.Lost), want.end, want.lost)
	}
	if n := countQuarantined(t, dir); n != want.quarantined {
		t.Fatalf("%d copies in quarantine, want %d", n, want.quarantined)
	}
	if want.readOnly {
		if _, err := os.Stat(filepath.Join(dir, "topics", "t", "0", lostRangesName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("read-only Open wrote the lost ranges: %v", err)
		}
		return
	}
	recs := []Record{{Value: []byte("after"), Partition: 0}}
	if err := l.Produce(ctx, "t", recs); err != nil || recs[0].Offset != want.end {
		t.Fatalf("append after recovery at %d, %v; want %d", recs[0].Offset, err, want.end)
	}
	_ = l.Close()
	l, err = Open(dir, opts, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if rep := l.Recovery(); rep.Lost() {
		t.Fatalf("second Open after recovery reported %+v", rep)
	}
	info, _ = l.DescribeTopic(ctx, "t")
	if p := info.Partitions[0]; p.End != want.end+1 || !reflect.DeepEqual(lostPairs(p.Lost), want.lost) {
		t.Fatalf("after reopen: end %d lost %v; want %d %v", p.End, lostPairs(p.Lost), want.end+1, want.lost)
	}
}

func countQuarantined(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, quarantineDirName))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n, notes := 0, 0
	for _, e := range ents {
		switch {
		case strings.HasSuffix(e.Name(), segmentSuffix):
			n++
		case strings.HasSuffix(e.Name(), ".note"):
			notes++
			b, _ := os.ReadFile(filepath.Join(dir, quarantineDirName, e.Name()))
			if !strings.Contains(string(b), "lost offsets [") || !strings.Contains(string(b), "--replace") {
				t.Fatalf("quarantine note says too little:\n%s", b)
			}
		}
	}
	if notes != n {
		t.Fatalf("%d quarantined copies but %d notes", n, notes)
	}
	return n
}

// TestTornTailEveryByte cuts the active segment at every byte of its last
// two batches after a crash whose marker says only the batches before them
// were synced: reopening keeps exactly the whole batches before the cut,
// reports a torn tail, and loses nothing.
func TestTornTailEveryByte(t *testing.T) {
	fx := newCrashFixture(t, 60)
	act := fx.active()
	n := len(act.bounds)
	for cut := act.bounds[n-3]; cut < act.bounds[n-1]; cut++ {
		k := act.batchAt(cut) // the first batch the cut leaves incomplete
		kept := act.bounds[k-1]
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			t.Parallel()
			dir := fx.damaged(t, func(dir string) {
				fx.crashedAt(t, dir, act.offsets[n-2])
				truncateFile(t, filepath.Join(dir, act.rel), cut)
			})
			fx.check(t, dir, outcome{end: act.offsets[k], torn: cut != kept})
		})
	}
}

// TestTruncatedSyncedTail cuts a cleanly closed log's active segment at
// every byte of its last three batches: those bytes had been synced, so
// the offsets from the first incomplete batch on are lost (reported, never
// given out again), and a partial batch is quarantined.
func TestTruncatedSyncedTail(t *testing.T) {
	fx := newCrashFixture(t, 60)
	act := fx.active()
	n := len(act.bounds)
	for cut := act.bounds[n-4]; cut < act.bounds[n-1]; cut++ {
		k := act.batchAt(cut)
		kept := act.bounds[k-1]
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			t.Parallel()
			dir := fx.damaged(t, func(dir string) { truncateFile(t, filepath.Join(dir, act.rel), cut) })
			q := 0
			if cut != kept {
				q = 1
			}
			fx.check(t, dir, outcome{end: fx.end, lost: [][2]int64{{act.offsets[k], fx.end}}, lostAtOpen: true, quarantined: q})
		})
	}
}

// TestBitFlipEverywhere flips a byte at positions spread over every
// segment: exactly the offsets of the batch holding it are lost, every
// other record stays readable at its offset, and the damaged file is
// quarantined — found at Open in the active segment, at the first fetch
// in a closed one (Open trusts those through their index).
func TestBitFlipEverywhere(t *testing.T) {
	bitFlipEverywhere(t, newCrashFixture(t, 60))
}

// TestBitFlipEverywhereCompressed is TestBitFlipEverywhere over compressed
// batches: the CRC covers the stored (compressed) bytes, so a flipped
// byte anywhere loses its batch and nothing else, as in a plain one.
func TestBitFlipEverywhereCompressed(t *testing.T) {
	fx := newCrashFixturePadded(t, 60, 1100)
	for _, sf := range fx.segs {
		for k, end := range sf.bounds {
			start := int64(0)
			if k > 0 {
				start = sf.bounds[k-1]
			}
			h := batchFlags(t, filepath.Join(fx.dir, sf.rel), start)
			if h&flagCompressed == 0 {
				t.Fatalf("%s: batch at %d (to %d) is not compressed", sf.rel, start, end)
			}
		}
	}
	bitFlipEverywhere(t, fx)
}

// batchFlags reads the flags byte of the batch at pos of a segment file.
func batchFlags(t *testing.T, path string, pos int64) byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, pos+offFlags); err != nil {
		t.Fatal(err)
	}
	return b[0]
}

func bitFlipEverywhere(t *testing.T, fx crashFixture) {
	for i, sf := range fx.segs {
		active := i == len(fx.segs)-1
		size := sf.bounds[len(sf.bounds)-1]
		for at := int64(i); at < size; at += 29 {
			k := sf.batchAt(at)
			t.Run(fmt.Sprintf("seg%d-byte%d", i, at), func(t *testing.T) {
				t.Parallel()
				dir := fx.damaged(t, func(dir string) { flipByte(t, filepath.Join(dir, sf.rel), at) })
				fx.check(t, dir, outcome{end: fx.end, lost: [][2]int64{{sf.offsets[k], fx.batchEnd(i, k)}},
					lostAtOpen: active, quarantined: 1})
			})
		}
	}
}

// TestBitFlipWithoutMarker: a log whose sync marker is gone (written
// before markers existed, or lost with its directory entry in a power
// failure) still tells damage from a torn tail where a sync-point batch
// with a good batch after it proves the damaged bytes synced; in the last
// two batches nothing proves it, and they are dropped as a torn tail.
func TestBitFlipWithoutMarker(t *testing.T) {
	fx := newCrashFixture(t, 60)
	act := fx.active()
	n := len(act.bounds)
	for k := 0; k < n; k++ {
		at := act.bounds[k] - 5
		t.Run(fmt.Sprintf("batch%d", k), func(t *testing.T) {
			t.Parallel()
			dir := fx.damaged(t, func(dir string) {
				if err := os.Remove(filepath.Join(dir, "topics", "t", "0", syncMarkName)); err != nil {
					t.Fatal(err)
				}
				flipByte(t, filepath.Join(dir, act.rel), at)
			})
			if k >= n-2 {
				fx.check(t, dir, outcome{end: act.offsets[k], torn: true})
				return
			}
			fx.check(t, dir, outcome{end: fx.end, lost: [][2]int64{{act.offsets[k], fx.batchEnd(len(fx.segs)-1, k)}},
				lostAtOpen: true, quarantined: 1})
		})
	}
}

// TestSixteenBytesMidSegment is the reproduction: 16 bytes
// flipped in the middle of the active segment lose the batches they touch
// and nothing else.
func TestSixteenBytesMidSegment(t *testing.T) {
	fx := newCrashFixture(t, 60)
	act := fx.active()
	mid := act.bounds[len(act.bounds)-1] / 2
	dir := fx.damaged(t, func(dir string) {
		for at := mid; at < mid+16; at++ {
			flipByte(t, filepath.Join(dir, act.rel), at)
		}
	})
	first, last := act.batchAt(mid), act.batchAt(mid+15)
	fx.check(t, dir, outcome{end: fx.end, lost: [][2]int64{{act.offsets[first], fx.batchEnd(len(fx.segs)-1, last)}},
		lostAtOpen: true, quarantined: 1})
}

// TestDamagedClosedSegmentWithoutIndex: with its index files gone, a
// closed segment is scanned at Open, and damage in it (all synced) is
// found there.
func TestDamagedClosedSegmentWithoutIndex(t *testing.T) {
	fx := newCrashFixture(t, 60)
	sf := fx.segs[1]
	for _, k := range []int{0, len(sf.bounds) / 2, len(sf.bounds) - 1} {
		dir := fx.damaged(t, func(dir string) {
			seg := filepath.Join(dir, sf.rel)
			for _, suffix := range []string{offsetIndexSuffix, timeIndexSuffix} {
				if err := os.Remove(strings.TrimSuffix(seg, segmentSuffix) + suffix); err != nil {
					t.Fatal(err)
				}
			}
			flipByte(t, seg, sf.bounds[k]-1)
		})
		fx.check(t, dir, outcome{end: fx.end, lost: [][2]int64{{sf.offsets[k], fx.batchEnd(1, k)}}, lostAtOpen: true, quarantined: 1})
	}
}

// TestDamagedIndex: damage in an index file only makes Open rebuild it.
func TestDamagedIndex(t *testing.T) {
	fx := newCrashFixture(t, 60)
	idx := strings.TrimSuffix(fx.segs[0].rel, segmentSuffix) + offsetIndexSuffix
	fi, err := os.Stat(filepath.Join(fx.dir, idx))
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int64{0, 10, 20, fi.Size() / 2, fi.Size() - 1} {
		dir := fx.damaged(t, func(dir string) { flipByte(t, filepath.Join(dir, idx), at) })
		fx.check(t, dir, outcome{end: fx.end})
	}
}

// TestMissingSegments: a removed closed segment loses exactly its offsets
// (segments of a never-compacted topic are contiguous); a removed active
// segment loses the offsets the marker says were synced after the
// previous one.
func TestMissingSegments(t *testing.T) {
	fx := newCrashFixture(t, 60)
	removeSeg := func(sf segFile) func(string) {
		return func(dir string) {
			seg := filepath.Join(dir, sf.rel)
			for _, suffix := range []string{segmentSuffix, offsetIndexSuffix, timeIndexSuffix} {
				_ = os.Remove(strings.TrimSuffix(seg, segmentSuffix) + suffix)
			}
		}
	}
	mid := fx.segs[1]
	fx.check(t, fx.damaged(t, removeSeg(mid)), outcome{end: fx.end,
		lost: [][2]int64{{mid.offsets[0], fx.segs[2].offsets[0]}}, lostAtOpen: true})
	act := fx.active()
	fx.check(t, fx.damaged(t, removeSeg(act)), outcome{end: fx.end,
		lost: [][2]int64{{act.offsets[0], fx.end}}, lostAtOpen: true})
}

// TestDamageReadOnly: a read-only Open of a damaged log reports the same
// losses and reads around the damage in place, writing nothing.
func TestDamageReadOnly(t *testing.T) {
	fx := newCrashFixture(t, 60)
	act := fx.active()
	k := len(act.bounds) / 2
	dir := fx.damaged(t, func(dir string) { flipByte(t, filepath.Join(dir, act.rel), act.bounds[k]-3) })
	fx.check(t, dir, outcome{end: fx.end, lost: [][2]int64{{act.offsets[k], act.offsets[k+1]}}, lostAtOpen: true, readOnly: true})
	// The writer then repairs it the same way.
	fx.check(t, dir, outcome{end: fx.end, lost: [][2]int64{{act.offsets[k], act.offsets[k+1]}}, lostAtOpen: true, quarantined: 1})
}

func TestMergeLost(t *testing.T) {
	r := func(from, to int64) LostRange { return LostRange{From: from, To: to, Reason: fmt.Sprint(from)} }
	got, changed := mergeLost([]LostRange{r(10, 20), r(40, 50)}, r(15, 30), r(50, 55), r(0, 5), r(41, 45), r(7, 7))
	if !changed || !reflect.DeepEqual(lostPairs(got), [][2]int64{{0, 5}, {10, 30}, {40, 55}}) {
		t.Fatalf("merged = %v (changed %v)", lostPairs(got), changed)
	}
	if _, changed := mergeLost(got, r(12, 20)); changed {
		t.Fatal("a covered range changed the list")
	}
	b := encodeLost(got)
	back, err := parseLost(b)
	if err != nil || !reflect.DeepEqual(lostPairs(back), lostPairs(got)) || back[1].Reason != got[1].Reason {
		t.Fatalf("round trip: %v, %v", back, err)
	}
	b[len(b)/2] ^= 1
	if _, err := parseLost(b); err == nil {
		t.Fatal("a damaged lost-ranges file parsed")
	}
}

// TestCompactionRepairsDamage: compaction that meets damage in a closed
// segment of a compacted topic repairs it (quarantine, lost range) instead
// of failing at every round.
func TestCompactionRepairsDamage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := Open(dir, fixtureOpts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CreateTopic(ctx, "c", TopicConfig{Partitions: 1, Cleanup: CleanupCompact}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 80; i++ {
		rec := []Record{{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "value-%d", i), Partition: 0}}
		if err := l.Produce(ctx, "c", rec); err != nil {
			t.Fatal(err)
		}
	}
	p := l.topics["c"].parts[0]
	if len(p.segs) < 3 {
		t.Fatalf("%d segments; want at least 3", len(p.segs))
	}
	seg := p.segs[1]
	f, _ := os.Open(seg.path)
	fi, _ := f.Stat()
	var bounds, offsets []int64
	r := newBatchReader(f, 0, fi.Size(), 1<<20, false)
	for {
		_, h, pos, err := r.next()
		if err != nil {
			break
		}
		bounds, offsets = append(bounds, pos+h.Size()), append(offsets, h.Base)
	}
	f.Close()
	_ = l.Close()
	flipByte(t, seg.path, bounds[2]-2) // in batch 2

	l, err = Open(dir, fixtureOpts, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Cleanup(ctx); err != nil {
		t.Fatalf("Cleanup over a damaged segment: %v", err)
	}
	info, _ := l.DescribeTopic(ctx, "c")
	if got := lostPairs(info.Partitions[0].Lost); !reflect.DeepEqual(got, [][2]int64{{offsets[2], offsets[3]}}) {
		t.Fatalf("lost = %v, want [[%d %d]]", got, offsets[2], offsets[3])
	}
	if n := countQuarantined(t, dir); n != 1 {
		t.Fatalf("%d copies in quarantine, want 1", n)
	}
	if err := l.Cleanup(ctx); err != nil {
		t.Fatalf("second Cleanup: %v", err)
	}
	recs, err := l.Fetch(ctx, "c", 0, offsets[3], FetchOptions{})
	if err != nil || len(recs) == 0 || recs[0].Offset != offsets[3] {
		t.Fatalf("Fetch after the lost range: %v, %v", recs, err)
	}
}

func TestLastReadable(t *testing.T) {
	lost := []LostRange{{From: 3, To: 5}, {From: 5, To: 8}, {From: 9, To: 10}}
	for _, tc := range []struct {
		start, end, want int64
		ok               bool
	}{
		{0, 12, 11, true}, {0, 10, 8, true}, {0, 9, 8, true}, {0, 8, 2, true}, {3, 8, 0, false}, {0, 0, 0, false}, {0, 3, 2, true},
	} {
		got, ok := LastReadable(PartitionInfo{Start: tc.start, End: tc.end, Lost: lost})
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("LastReadable([%d, %d)) = %d %v, want %d %v", tc.start, tc.end, got, ok, tc.want, tc.ok)
		}
	}
}

// TestSyncMarkSlots: the marker keeps the newest valid slot; a torn write
// of one slot leaves the other.
func TestSyncMarkSlots(t *testing.T) {
	dir := t.TempDir()
	m, err := openSyncMark(OSFS, dir, 0, syncPos{})
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 3; i++ {
		if err := m.record(syncPos{base: 0, size: 100 * i, next: 10 * i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.close(); err != nil {
		t.Fatal(err)
	}
	if pos, seq, ok := readSyncMark(OSFS, dir); !ok || seq != 3 || pos.size != 300 || pos.next != 30 {
		t.Fatalf("marker = %+v seq %d ok %v; want size 300 next 30 seq 3", pos, seq, ok)
	}
	flipByte(t, filepath.Join(dir, syncMarkName), 1*syncMarkSlotGap+20) // seq 3 is in slot 1
	if pos, seq, ok := readSyncMark(OSFS, dir); !ok || seq != 2 || pos.size != 200 {
		t.Fatalf("marker with a torn newest slot = %+v seq %d ok %v; want the older slot (size 200)", pos, seq, ok)
	}
	flipByte(t, filepath.Join(dir, syncMarkName), 20)
	if _, _, ok := readSyncMark(OSFS, dir); ok {
		t.Fatal("a marker with both slots torn was read")
	}
}

// FuzzScanSegment: scanning any bytes never fails or panics, and what it
// finds is consistent: good runs and damaged stretches in order, disjoint,
// inside the file; offsets of lost stretches increasing; index entries at
// good batches.
func FuzzScanSegment(f *testing.F) {
	var bb batchBuilder
	var seed []byte
	for i := 0; i < 4; i++ {
		bb.reset(nil)
		bb.add(&Record{Key: []byte("k"), Value: []byte(fmt.Sprint(i))}, 0, 1)
		b := bb.finish()
		finishBatch(b, int64(i))
		seed = append(seed, b...)
	}
	f.Add(seed)
	damaged := slices.Clone(seed)
	damaged[len(seed)/2] ^= 0xff
	f.Add(damaged)
	f.Add(seed[:len(seed)-3])
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := newMemFS()
		file, _ := fs.OpenFile("/s", os.O_RDWR|os.O_CREATE, 0o644)
		_, _ = file.WriteAt(data, 0)
		res, err := scanSegment(file, 0, int64(len(data)), 0, 16)
		if err != nil {
			t.Fatal(err)
		}
		pos, next := int64(0), int64(0)
		type span struct{ start, end int64 }
		var spans []span
		for _, r := range res.runs {
			spans = append(spans, span{r.start, r.end})
		}
		for _, d := range res.damage {
			spans = append(spans, span{d.pos, d.end})
			if d.from < next || (d.to >= 0 && d.to < d.from) {
				t.Fatalf("damage %+v: offsets go back (next %d)", d, next)
			}
			next = d.from
		}
		slices.SortFunc(spans, func(a, b span) int { return cmpInt64(a.start, b.start) })
		for _, s := range spans {
			if s.start < pos || s.end <= s.start || s.end > int64(len(data)) {
				t.Fatalf("spans overlap or leave the file: %+v (runs %+v, damage %+v)", spans, res.runs, res.damage)
			}
			pos = s.end
		}
		for _, e := range res.idx {
			inRun := false
			for _, r := range res.runs {
				inRun = inRun || e.pos >= r.start && e.pos < r.end
			}
			if !inRun {
				t.Fatalf("index entry %+v outside the good runs %+v", e, res.runs)
			}
		}
	})
}
