package schema

import (
	"bytes"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strconv"
	"testing"
)

// fuzzTables are the tables the fuzzer decodes with; the input's first
// byte picks one.
func fuzzTables() []*Table {
	mysql := benchTable()
	mysql.envelope = layoutMySQL
	return []*Table{allKindsTable(), benchTable(), mysql}
}

// envelopeSeeds are real encodings: every kind, nulls, unchanged values,
// deletes and truncates.
func envelopeSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	add := func(sel byte, tbl *Table, e Envelope) {
		buf, err := AppendEnvelope([]byte{sel}, tbl, &e)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, buf)
	}
	all := allKindsTable()
	src := SourceInfo{Version: "0.1", Connector: "postgresql", Name: "shop", TsMs: 1, DB: "shop", Schema: "public",
		Table: "every kind", TxID: 9, LSN: 77, Position: []byte{1, 2}}
	add(0, all, Envelope{After: fullRow(), Op: 'c', TsMs: 5, Source: src})
	withUnchanged := fullRow()
	withUnchanged[8], withUnchanged[10] = Unchanged, Unchanged
	add(0, all, Envelope{Before: fullRow(), After: withUnchanged, Op: 'u', Source: src})
	nulls := make([]any, len(all.Columns))
	nulls[0], nulls[17] = int64(1), "k"
	add(0, all, Envelope{Before: nulls, Op: 'd', Source: SourceInfo{Connector: "mysql", File: "binlog.000001", Pos: 4, GTID: "x:1"}})
	add(0, all, Envelope{Op: 't', Source: src})
	for i := range 3 {
		add(1, benchTable(), benchEnvelope(i*1000003+5))
	}
	my := benchEnvelope(7)
	my.Source = SourceInfo{Connector: ConnectorMySQL, Name: "shop", TsMs: 3, DB: "shop", Table: "bench", ServerID: 4242,
		GTID: "0-1-2", File: "binlog.000002", Pos: 1 << 20, Row: 3, Thread: 5, Query: "insert", Position: []byte{9, 8, 7}}
	add(2, benchTable(), my)
	my.Transaction = &TxBlock{ID: "0-1-2", TotalOrder: 2, CollectionOrder: 1}
	my.Source.Snapshot = SnapshotLast
	add(2, benchTable(), my)
	return seeds
}

// FuzzDecodeEnvelope: decoding garbage never panics, and whatever decodes
// re-encodes to bytes that decode to the same encoding again.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, s := range envelopeSeeds(f) {
		f.Add(s)
	}
	tables := fuzzTables()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		tbl := tables[int(data[0])%len(tables)]
		e, err := DecodeEnvelope(tbl, data[1:])
		if err != nil {
			return
		}
		enc1, err := AppendEnvelope(nil, tbl, &e)
		if err != nil {
			t.Fatalf("decoded envelope does not re-encode: %v\n%#v", err, e)
		}
		e2, err := DecodeEnvelope(tbl, enc1)
		if err != nil {
			t.Fatalf("re-encoded envelope does not decode: %v", err)
		}
		enc2, err := AppendEnvelope(nil, tbl, &e2)
		if err != nil || !bytes.Equal(enc1, enc2) {
			t.Fatalf("unstable round trip: %v\n%x\n%x", err, enc1, enc2)
		}
	})
}

// TestDecodeBoundsAllocation: lengths claimed by the data are checked
// against the bytes present before anything is allocated.
func TestDecodeBoundsAllocation(t *testing.T) {
	tbl := benchTable()
	huge := appendLong(nil, 1) // after: present
	huge = appendLong(huge, 1<<40)
	huge = appendLong(huge, 1) // id
	huge = appendLong(huge, 1)
	huge = appendLong(huge, 1)
	huge = appendLong(huge, 1) // label: present
	huge = appendLong(huge, 1<<40)
	huge = append([]byte{0}, huge...) // before: null
	for name, buf := range map[string][]byte{
		"long string":   huge,
		"varint > 64b":  bytes.Repeat([]byte{0xff}, 11),
		"negative size": append([]byte{0, 2, 0x02, 0, 0, 0, 0, 0, 0}, appendLong(nil, -5)...),
	} {
		var err error
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 10 {
			_, err = DecodeEnvelope(tbl, buf)
		}
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("%s: decoded", name)
		}
		if perRun := (after.TotalAlloc - before.TotalAlloc) / 10; perRun > 2048 {
			t.Errorf("%s: %d bytes allocated for %d bytes of garbage", name, perRun, len(buf))
		}
	}
	if _, err := DecodeEnvelope(tbl, bytes.Repeat([]byte{0xff}, 11)); !errors.Is(err, errVarint) {
		t.Errorf("overlong varint: %v", err)
	}
}

func TestDecodeRejectsCorruptValues(t *testing.T) {
	tbl := &Table{Namespace: "p", Name: "t", Columns: []Column{
		{Name: "b", Kind: Bool}, {Name: "i", Kind: Int32}, {Name: "d", Kind: Decimal, Precision: 4, Scale: 1},
	}, Key: []int{0, 1, 2}}
	for name, buf := range map[string][]byte{
		"bool 2":          {2, 0, 2, 0x01, 0x00},
		"int > int32":     append(append([]byte{1}, appendLong(nil, math.MaxInt32+1)...), 2, 0x01, 0x00),
		"decimal too big": {1, 0, 8, 0x01, 0x00, 0x00, 0x00},
	} {
		if _, err := DecodeKey(tbl, buf); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Redundant sign bytes are tolerated: 0x00 0x00 0x7f is 127.
	key, err := DecodeKey(tbl, []byte{1, 0, 6, 0x00, 0x00, 0x7f})
	if err != nil || key[2] != "12.7" {
		t.Errorf("padded decimal: %v %v", key, err)
	}
}

// TestDecimalFastPaths: the int64 paths give the big.Int paths' bytes and
// text for every value they take.
func TestDecimalFastPaths(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	values := []int64{0, 1, -1, 127, 128, -128, -129, 255, 256, 32767, -32768, 1<<31 - 1, -1 << 31, 999999999999999999, -999999999999999999,
		math.MaxInt64, math.MinInt64}
	for range 20000 {
		values = append(values, rng.Int64()>>rng.IntN(63))
	}
	for _, v := range values {
		for _, scale := range []int{0, 1, 2, 6, 18, 25} {
			want := formatDecimal(big.NewInt(v), scale)
			if got := formatDecimal64(v, scale); got != want {
				t.Fatalf("formatDecimal64(%d, %d) = %q, want %q", v, scale, got, want)
			}
			fast, ok := unscaledInt64(want, scale)
			slow, err := unscaled(want, scale)
			if err != nil {
				t.Fatalf("unscaled(%q): %v", want, err)
			}
			if ok && (!slow.IsInt64() || fast != slow.Int64()) {
				t.Fatalf("unscaledInt64(%q, %d) = %d, want %s", want, scale, fast, slow)
			}
			if ok {
				wantBytes := appendBytes(nil, twosComplement(slow))
				if got := appendInt64Decimal(nil, fast); !bytes.Equal(got, wantBytes) {
					t.Fatalf("appendInt64Decimal(%d) = %x, want %x", fast, got, wantBytes)
				}
			}
		}
	}
	for _, s := range []string{"", "-", ".", "1.", ".5", "+7", "1e5", "--1", "1.2.3", "0x10", " 1", "１", "1.234"} {
		_, ok := unscaledInt64(s, 2)
		slow, err := unscaled(s, 2)
		if ok && err != nil {
			t.Errorf("%q: fast path accepted what unscaled refuses (%v)", s, err)
		}
		if ok {
			if v, _ := unscaledInt64(s, 2); slow.Int64() != v {
				t.Errorf("%q: %d vs %s", s, v, slow)
			}
		}
	}
	if _, ok := unscaledInt64(strconv.Itoa(math.MaxInt32)+"123456789", 2); ok {
		t.Error("19 digits must take the big path")
	}
}

func TestParseUUIDBytes(t *testing.T) {
	u := [16]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	for _, s := range []string{FormatUUID(u), "DEADBEEF010203040506070809" + "0A0B0C"} {
		if got, ok := parseUUID([]byte(s)); !ok || got != u {
			t.Errorf("%s: %x %v", s, got, ok)
		}
	}
	for _, s := range []string{"", "deadbeef", FormatUUID(u) + "00", "zz" + FormatUUID(u)[2:], "d-eadbeef0102030405060708090a0b0c"} {
		if _, ok := parseUUID([]byte(s)); ok {
			t.Errorf("%q accepted", s)
		}
	}
}

// FuzzScanEnvelope: scanning garbage never panics, and whatever decodes
// also scans, with the same op, images, position and after-image bytes
// (ScanEnvelope's fast path over common encodings must agree with the
// decoder on every input the decoder accepts, long varints and lengths,
// non-minimal branches and all).
func FuzzScanEnvelope(f *testing.F) {
	for _, s := range envelopeSeeds(f) {
		f.Add(s)
	}
	// A value the fast path leaves to the checked reader: a string of 64
	// bytes and more (a two-byte length), an int64 of ten bytes.
	long := benchEnvelope(3)
	long.After[0], long.After[2] = int64(math.MinInt64), string(bytes.Repeat([]byte("x"), 200))
	if buf, err := AppendEnvelope([]byte{1}, benchTable(), &long); err == nil {
		f.Add(buf)
	}
	tables := fuzzTables()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		tbl := tables[int(data[0])%len(tables)]
		info, serr := ScanEnvelope(tbl, data[1:])
		e, err := DecodeEnvelope(tbl, data[1:])
		if err != nil {
			return
		}
		if serr != nil {
			t.Fatalf("decodes but does not scan: %v", serr)
		}
		if info.Op != e.Op || info.HasBefore != (e.Before != nil) || info.HasAfter != (e.After != nil) ||
			!bytes.Equal(info.Position, e.Source.Position) {
			t.Fatalf("scan %+v, decode %+v", info, e)
		}
		if e.After != nil {
			r := newReader(info.After)
			row := r.row(tbl, false)
			if r.err != nil || r.left() != 0 || len(row) != len(e.After) {
				t.Fatalf("after-image bytes %x do not hold the row alone: %v", info.After, r.err)
			}
		}
	})
}

// FuzzScanTailFast: the envelope's tail read the fast way (scanTailFast)
// gives what the checked way gives, error or not, field for field:
// garbage, real encodings of both source layouts, and their cuts.
func FuzzScanTailFast(f *testing.F) {
	for _, s := range envelopeSeeds(f) {
		f.Add(s)
		for _, cut := range []int{1, 2, 5, 9, 17} { // a tail cut short
			if cut < len(s) {
				f.Add(s[:len(s)-cut])
			}
		}
	}
	tables := fuzzTables()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		tbl := tables[int(data[0])%len(tables)]
		fast, ferr := scanEnvelope(tbl, data[1:], true)
		slow, serr := scanEnvelope(tbl, data[1:], false)
		if (ferr == nil) != (serr == nil) {
			t.Fatalf("fast way error %v, checked way error %v", ferr, serr)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("fast way %+v, checked way %+v", fast, slow)
		}
	})
}

// TestScanTailFastTakesRealEnvelopes: real envelopes of both source
// layouts are read the fast way (a fast way that always gave up would pass
// the fuzz test, at the checked way's cost).
func TestScanTailFastTakesRealEnvelopes(t *testing.T) {
	tables := fuzzTables()
	n := 0
	for _, s := range envelopeSeeds(t) {
		tbl := tables[int(s[0])%len(tables)]
		r := newReader(s[1:])
		var e EnvelopeInfo
		r.skipRow(tbl, false)
		r.skipRow(tbl, false)
		if r.err != nil {
			continue
		}
		if _, _, _, ok := r.scanTailFast(tbl.envelope == layoutMySQL, &e); !ok {
			if _, err := scanEnvelope(tbl, s[1:], false); err == nil {
				t.Errorf("seed %x scans the checked way but not the fast way", s)
			}
			continue
		}
		n++
	}
	if n < 5 {
		t.Fatalf("%d seeds read the fast way, want at least the 5 of the bench table", n)
	}
}
