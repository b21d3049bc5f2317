package log

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files")

func sampleBatch(base int64) []byte {
	ts := time.UnixMilli(1_700_000_000_123)
	recs := []Record{
		{Key: []byte("k1"), Value: []byte("v1"), Timestamp: ts},
		{Key: nil, Value: nil, Timestamp: ts.Add(-time.Second), Headers: []Header{{Key: "h", Value: []byte{1, 2}}, {Key: "n", Value: nil}}},
		{Key: []byte{}, Value: []byte{}, Timestamp: ts.Add(time.Hour)},
	}
	var b batchBuilder
	b.reset(nil)
	for i := range recs {
		b.add(&recs[i], uint32(i*2), recs[i].Timestamp.UnixMilli())
	}
	out := b.finish()
	finishBatch(out, base)
	return out
}

// TestBatchGolden pins the frozen byte format: a change to the encoder that
// alters the bytes fails here (regenerate only with a new batchVersion).
func TestBatchGolden(t *testing.T) {
	got := hex.Dump(sampleBatch(42))
	path := filepath.Join("testdata", "batch-v1.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("batch bytes changed:\n%s\nwant:\n%s", got, want)
	}
}

// TestDecodeHeaders: records' headers, cut from one slab a batch with
// their keys made once, decode as written — counts from none to many,
// more distinct keys than are kept — and stay each record's own: appending
// to one record's headers leaves the next record's alone.
func TestDecodeHeaders(t *testing.T) {
	var recs []Record
	for i := range 300 {
		var hs []Header
		for j := range i % 5 {
			hs = append(hs, Header{Key: fmt.Sprint("key-", (i+j)%13), Value: fmt.Appendf(nil, "%d.%d", i, j)})
		}
		recs = append(recs, Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v"), Headers: hs, Timestamp: time.UnixMilli(1)})
	}
	var b batchBuilder
	b.reset(nil)
	for i := range recs {
		b.add(&recs[i], uint32(i), 1)
	}
	out := b.finish()
	finishBatch(out, 0)
	got, _, err := decodeBatch(out, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if !reflect.DeepEqual(got[i].Headers, recs[i].Headers) {
			t.Fatalf("record %d: headers %v, want %v", i, got[i].Headers, recs[i].Headers)
		}
	}
	next := append([]Header(nil), got[2].Headers...)
	_ = append(got[1].Headers, Header{Key: "extra", Value: []byte("x")})
	if !reflect.DeepEqual(got[2].Headers, next) {
		t.Fatalf("appending to record 1's headers changed record 2's: %v", got[2].Headers)
	}
}

func TestDecodeBatch(t *testing.T) {
	b := sampleBatch(42)
	recs, n, err := decodeBatch(b, 3)
	if err != nil || n != len(b) {
		t.Fatalf("decodeBatch = %d, %v", n, err)
	}
	if len(recs) != 3 || recs[0].Offset != 42 || recs[1].Offset != 44 || recs[2].Offset != 46 {
		t.Fatalf("offsets = %+v", recs)
	}
	if recs[1].Key != nil || recs[1].Value != nil || recs[2].Key == nil || recs[2].Value == nil {
		t.Fatal("nil and empty not distinguished")
	}
	if recs[1].Headers[1].Value != nil || !bytes.Equal(recs[1].Headers[0].Value, []byte{1, 2}) {
		t.Fatalf("headers = %+v", recs[1].Headers)
	}
	if !recs[2].Timestamp.Equal(time.UnixMilli(1_700_000_000_123).Add(time.Hour)) || recs[0].Partition != 3 {
		t.Fatalf("record 2 = %+v", recs[2])
	}
	h, _ := parseBatchHeader(b)
	if h.MaxTs != recs[2].Timestamp.UnixMilli() || h.FirstTs != recs[0].Timestamp.UnixMilli() || h.Last() != 46 {
		t.Fatalf("header = %+v", h)
	}
	for i := 0; i < len(b); i++ {
		if _, _, err := decodeBatch(b[:i], 0); err == nil {
			t.Fatalf("decoded a batch cut at %d", i)
		}
		c := append([]byte(nil), b...)
		c[i] ^= 0x10
		if _, _, err := decodeBatch(c, 0); err == nil {
			t.Fatalf("decoded a batch with byte %d flipped", i)
		}
	}
	var cr corruptReason
	if _, _, err := decodeBatch(b[:10], 0); !errors.As(err, &cr) {
		t.Fatalf("short batch error %v is not a corruptReason", err)
	}
}

// FuzzDecodeBatch: the decoder never panics or over-reads, and whatever it
// accepts re-encodes to a batch that decodes to the same records.
func FuzzDecodeBatch(f *testing.F) {
	f.Add(sampleBatch(0))
	f.Add(sampleBatch(1 << 40))
	f.Add(sampleBatch(7)[:50])
	var b batchBuilder
	b.reset(nil)
	b.add(&Record{Value: bytes.Repeat([]byte("x"), 300)}, 0, 0)
	one := b.finish()
	finishBatch(one, 5)
	f.Add(one)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, n, err := decodeBatch(data, 0)
		if err != nil {
			// Reseal the CRC so the fuzzer also explores the record
			// decoder behind it.
			h, herr := parseBatchHeader(data)
			if herr != nil || h.Size() > int64(len(data)) {
				return
			}
			fixed := append([]byte(nil), data...)
			finishBatch(fixed[:h.Size()], h.Base)
			if recs, n, err = decodeBatch(fixed, 0); err != nil {
				return
			}
		}
		if n > len(data) || len(recs) == 0 {
			t.Fatalf("accepted %d records in %d of %d bytes", len(recs), n, len(data))
		}
		var bb batchBuilder
		bb.reset(nil)
		for i := range recs {
			bb.add(&recs[i], uint32(recs[i].Offset-recs[0].Offset), recs[i].Timestamp.UnixMilli())
		}
		out := bb.finish()
		finishBatch(out, recs[0].Offset)
		again, m, err := decodeBatch(out, 0)
		if err != nil || m != len(out) {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		if !reflect.DeepEqual(normalize(again), normalize(recs)) {
			t.Fatalf("round trip changed records:\n%+v\n%+v", recs, again)
		}
	})
}

// normalize makes records comparable with DeepEqual (time.Time's location).
func normalize(recs []Record) []Record {
	out := make([]Record, len(recs))
	for i, r := range recs {
		r.Timestamp = time.UnixMilli(r.Timestamp.UnixMilli()).UTC()
		out[i] = r
	}
	return out
}
