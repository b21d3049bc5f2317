package log

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// zipRecords are records with keys, values and headers of every kind
// (nil and empty keys and values, a tombstone, nil header values) that
// compress well, as a load's do.
func zipRecords(n int) []Record {
	ts := time.UnixMilli(1_700_000_000_000)
	recs := make([]Record, n)
	for i := range recs {
		r := Record{Key: fmt.Appendf(nil, "key-%06d", i), Value: fmt.Appendf(nil, `{"id":%d,"name":"customer %d","source":{"db":"shop","table":"orders"}}`, i, i%37),
			Timestamp: ts.Add(time.Duration(i%5) * time.Millisecond),
			Headers:   []Header{{Key: "cdcd.position", Value: fmt.Appendf(nil, "%016x", i)}, {Key: "cdcd.txid", Value: []byte("1234567")}}}
		switch i % 50 {
		case 7:
			r.Key = nil
		case 8:
			r.Value = nil // a tombstone
		case 9:
			r.Key, r.Value, r.Headers = []byte{}, []byte{}, nil
		case 10:
			r.Headers = []Header{{Key: "n", Value: nil}}
		}
		recs[i] = r
	}
	return recs
}

// buildZip builds recs into one batch at base, compressed if that pays,
// and returns the plain and the stored batch.
func buildZip(recs []Record, base int64) (plain, stored []byte) {
	var b batchBuilder
	b.reset(nil)
	for i := range recs {
		b.add(&recs[i], uint32(i), recs[i].Timestamp.UnixMilli())
	}
	plain = b.finish()
	stored = compressBatch(plain, func(n int) []byte { return make([]byte, n) }, func([]byte) {})
	finishBatch(plain, base)
	if stored == nil {
		return plain, plain
	}
	finishBatch(stored, base)
	return plain, stored
}

func sameRecords(t *testing.T, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Offset != w.Offset || !reflect.DeepEqual(g.Key, w.Key) || !reflect.DeepEqual(g.Value, w.Value) ||
			!g.Timestamp.Equal(w.Timestamp) || len(g.Headers) != len(w.Headers) {
			t.Fatalf("record %d: %+v, want %+v", i, g, w)
		}
		for j := range g.Headers {
			if g.Headers[j].Key != w.Headers[j].Key || !reflect.DeepEqual(g.Headers[j].Value, w.Headers[j].Value) {
				t.Fatalf("record %d header %d: %+v, want %+v", i, j, g.Headers[j], w.Headers[j])
			}
		}
	}
}

// TestCompressedBatchRoundTrip: a compressed batch is smaller, flagged,
// decodes to the records of its plain twin (nil and empty kept apart),
// into a window of FetchBuffers.Window when given one; cut short or with
// any byte flipped it is rejected (the CRC covers the stored bytes).
func TestCompressedBatchRoundTrip(t *testing.T) {
	recs := zipRecords(500)
	plain, stored := buildZip(recs, 1000)
	if len(stored)*3 > len(plain) || stored[offFlags]&flagCompressed == 0 || plain[offFlags]&flagCompressed != 0 {
		t.Fatalf("stored %d bytes (flags %x) of a plain %d", len(stored), stored[offFlags], len(plain))
	}
	want, _, err := decodeBatch(plain, 2)
	if err != nil {
		t.Fatal(err)
	}
	got, n, err := decodeBatch(stored, 2)
	if err != nil || n != len(stored) {
		t.Fatalf("decodeBatch = %d, %v", n, err)
	}
	sameRecords(t, got, want)
	if got[8].Value != nil || got[9].Value == nil || got[7].Key != nil || got[9].Key == nil || got[10].Headers[0].Value != nil {
		t.Fatal("nil and empty not kept apart")
	}

	var windows [][]byte
	fb := &FetchBuffers{Window: func(n int) []byte {
		w := make([]byte, n)
		windows = append(windows, w)
		return w
	}}
	h, _ := parseBatchHeader(stored)
	var viaFB []Record
	if err := walkRecords(stored, h, fb, func(r Record) bool { viaFB = append(viaFB, r); return true }); err != nil {
		t.Fatal(err)
	}
	sameRecords(t, viaFB, want)
	if len(windows) != 1 || len(windows[0]) != len(plain)-batchHeaderLen {
		t.Fatalf("decoded into %d windows; want one of %d bytes", len(windows), len(plain)-batchHeaderLen)
	}
	if w := windows[0]; &viaFB[0].Key[0] != &w[bytes.Index(w, []byte("key-000000"))] {
		t.Fatal("the records do not alias the window")
	}

	for i := 0; i < len(stored); i += 7 {
		if _, _, err := decodeBatch(stored[:i], 0); err == nil {
			t.Fatalf("decoded a batch cut at %d", i)
		}
		c := append([]byte(nil), stored...)
		c[i] ^= 0x10
		if _, _, err := decodeBatch(c, 0); err == nil {
			t.Fatalf("decoded a batch with byte %d flipped", i)
		}
	}
}

// TestCompressedBlockChecked: a batch whose CRC is right but whose block
// is not what its header says — cut short, a decoded length too large, or
// fewer bytes than its count of records needs — is refused as damage,
// before anything of the claimed size is allocated.
func TestCompressedBlockChecked(t *testing.T) {
	_, stored := buildZip(zipRecords(200), 0)
	reseal := func(b []byte) []byte {
		binary.LittleEndian.PutUint32(b, uint32(len(b)-batchLenField))
		finishBatch(b, 0)
		return b
	}
	block := stored[batchHeaderLen:]
	n, k := binary.Uvarint(block)
	cases := map[string][]byte{
		"cut":       reseal(append([]byte(nil), stored[:len(stored)-9]...)),
		"too large": reseal(append(append(append([]byte(nil), stored[:batchHeaderLen]...), binary.AppendUvarint(nil, maxBatchLen+1)...), block[k:]...)),
		"longer":    reseal(append(append(append([]byte(nil), stored[:batchHeaderLen]...), binary.AppendUvarint(nil, n+100)...), block[k:]...)),
	}
	few := reseal(append(append(append([]byte(nil), stored[:batchHeaderLen]...), binary.AppendUvarint(nil, 5)...), 0x10, 0, 0, 0, 0, 0))
	binary.LittleEndian.PutUint32(few[offCount:], 100)
	binary.LittleEndian.PutUint32(few[offLastDelta:], 99)
	cases["fewer bytes than records"] = reseal(few)
	for name, b := range cases {
		_, _, err := decodeBatch(b, 0)
		if _, ok := err.(corruptReason); !ok {
			t.Errorf("%s: decodeBatch error %v, want a corruptReason", name, err)
		}
	}
}

// TestCompressBatchSkips: a batch whose records take under 1 KiB, or that
// compress by less than a tenth, is stored as it is, its buffer given
// back.
func TestCompressBatchSkips(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 8<<10)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	for name, recs := range map[string][]Record{
		"small": zipRecords(5),
		"noise": {{Key: []byte("k"), Value: noise}},
	} {
		var b batchBuilder
		b.reset(nil)
		for i := range recs {
			b.add(&recs[i], uint32(i), 0)
		}
		got, put := 0, 0
		z := compressBatch(b.finish(), func(n int) []byte { got++; return make([]byte, n) }, func([]byte) { put++ })
		if z != nil || got != put {
			t.Errorf("%s: compressed (%v), %d buffers taken, %d given back", name, z != nil, got, put)
		}
	}
}

// TestCompressedCountAboveBytes: a compressed batch may hold more records
// than its stored bytes could hold plain (5 bytes the least each): the
// header check that counts records against the stored length, which
// would call such a batch damage, leaves a compressed one to the decoded
// length (decompressRecords).
func TestCompressedCountAboveBytes(t *testing.T) {
	_, stored := buildZip(zipRecords(500), 0)
	b := append([]byte(nil), stored...)
	n := uint32(len(b)) // more records than stored bytes
	binary.LittleEndian.PutUint32(b[offCount:], n)
	binary.LittleEndian.PutUint32(b[offLastDelta:], n-1)
	if _, err := parseBatchHeader(b); err != nil {
		t.Fatalf("compressed: %v", err)
	}
	b[offFlags] &^= flagCompressed
	if _, err := parseBatchHeader(b); err != errBadHeader {
		t.Fatalf("plain: %v, want %v", err, errBadHeader)
	}
}

// segmentFlags returns how many batches of a partition's segments are
// compressed and how many plain.
func segmentFlags(t *testing.T, dir string) (zipped, plain int) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		r := newBatchReader(f, 0, fi.Size(), 1<<20, false)
		for {
			_, h, _, err := r.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Flags&flagCompressed != 0 {
				zipped++
			} else {
				plain++
			}
		}
		f.Close()
	}
	return zipped, plain
}

// TestMixedSegments: a log written plain (as before compression existed),
// then compressed, then plain again, holds both kinds of batches in one
// segment and reads every record back in order, with and without
// FetchBuffers, after each reopen and after an unclean one (the tail
// scanned at Open).
func TestMixedSegments(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	part := filepath.Join(dir, topicsDirName, "t", "0")
	var want []Record
	for round, c := range []Compression{CompressionNone, CompressionS2, CompressionNone, CompressionS2} {
		l, err := Open(dir, Options{Compression: c, CleanupInterval: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			if err := l.CreateTopic(ctx, "t", TopicConfig{Partitions: 1}); err != nil {
				t.Fatal(err)
			}
		}
		for range 3 {
			recs := zipRecords(300)
			for i := range recs {
				recs[i].Partition = 0
				recs[i].Value = append(recs[i].Value, fmt.Sprint(round)...)
			}
			mustProduce(t, l, "t", recs...)
			want = append(want, recs...)
		}
		got := readAll(t, l, "t", 0)
		sameRecords(t, got, want)
		var withFB []Record
		fb := &FetchBuffers{Window: func(n int) []byte { return make([]byte, n) }}
		for off := int64(0); off < int64(len(want)); {
			recs, err := l.Fetch(ctx, "t", 0, off, FetchOptions{MaxBytes: 64 << 10, Buffers: fb})
			if err != nil || len(recs) == 0 {
				t.Fatalf("fetch at %d: %d records, %v", off, len(recs), err)
			}
			withFB = append(withFB, recs...)
			off = recs[len(recs)-1].Offset + 1
		}
		sameRecords(t, withFB, want)
		if round < 3 {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		// The last round: no clean close (the lock is left to the test's
		// end; a read-only open scans the tail as recovery does).
		ro, err := Open(dir, Options{ReadOnly: true, CleanupInterval: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		sameRecords(t, readAll(t, ro, "t", 0), want)
		ro.Close()
		l.Close()
	}
	zipped, plain := segmentFlags(t, part)
	if zipped == 0 || plain == 0 {
		t.Fatalf("%d compressed and %d plain batches; want both", zipped, plain)
	}
}

// TestCompactionCompressed: log compaction of a compacted topic written
// in compressed batches keeps each key's latest record, writes its
// output compressed, and the topic reads back the same after a reopen.
func TestCompactionCompressed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4 << 10, IndexIntervalBytes: 128, CleanupInterval: -1}
	l, err := Open(dir, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CreateTopic(ctx, "c", TopicConfig{Partitions: 1, Cleanup: CleanupCompact, DeleteRetention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	latest := map[string]string{}
	pad := strings.Repeat("state ", 40)
	for round := range 30 {
		var recs []Record
		for k := range 10 {
			r := Record{Key: fmt.Appendf(nil, "key-%d", k), Value: fmt.Appendf(nil, "%s%d/%d", pad, round, k), Partition: 0}
			recs = append(recs, r)
			latest[string(r.Key)] = string(r.Value)
		}
		mustProduce(t, l, "c", recs...)
	}
	part := filepath.Join(dir, topicsDirName, "c", "0")
	if zipped, plain := segmentFlags(t, part); zipped != 30 || plain != 0 {
		t.Fatalf("before compaction: %d compressed and %d plain batches; want 30 and 0", zipped, plain)
	}
	if err := l.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(l *Embedded) {
		t.Helper()
		recs := readAll(t, l, "c", 0)
		if len(recs) >= 300 || recs[len(recs)-1].Offset != 299 {
			t.Fatalf("%d records after compaction, the last at %d", len(recs), recs[len(recs)-1].Offset)
		}
		last := map[string]string{}
		prev := int64(-1)
		for _, r := range recs {
			if r.Offset <= prev {
				t.Fatalf("offset %d after %d", r.Offset, prev)
			}
			prev = r.Offset
			last[string(r.Key)] = string(r.Value)
		}
		if !reflect.DeepEqual(last, latest) {
			t.Fatalf("latest values after compaction differ:\n%v\nwant\n%v", last, latest)
		}
	}
	check(l)
	zipped, plain := segmentFlags(t, part)
	if zipped == 0 || plain != 0 {
		t.Fatalf("after compaction: %d compressed and %d plain batches", zipped, plain)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	check(l)
}
