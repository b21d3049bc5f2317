package pgdecode

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// slabPairs are the decoders with a slab form, each with its plain form.
var slabPairs = []struct {
	name  string
	plain Func
	slab  SlabFunc
}{
	{"int2", decodeInt2, slabInt(readInt2)},
	{"int4", decodeInt4, slabInt(readInt4)},
	{"int8", decodeInt8, slabInt(readInt8)},
	{"float8", decodeFloat8, slabFloat8},
	{"date", decodeDate, slabDate},
	{"timestamp", decodeTimestamp, slabInt(readTimestamp)},
	{"text", DecodeString, slabString},
	{"numeric", decodeNumeric, slabNumeric},
	{"jsonb", decodeVersioned, slabVersioned},
}

// numericBinary encodes base-10000 digits as numeric_send does.
func numericBinary(weight int16, sign uint16, dscale int16, digits ...uint16) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(digits)))
	b = binary.BigEndian.AppendUint16(b, uint16(weight))
	b = binary.BigEndian.AppendUint16(b, sign)
	b = binary.BigEndian.AppendUint16(b, uint16(dscale))
	for _, d := range digits {
		b = binary.BigEndian.AppendUint16(b, d)
	}
	return b
}

// slabInputs are values of every slab form, edge cases first.
func slabInputs(rng *rand.Rand) map[string][][]byte {
	u64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	in := map[string][][]byte{
		"int2":      {{0, 0}, {0x7f, 0xff}, {0x80, 0}, {0xff, 0xff}},
		"int4":      {{0, 0, 0, 0}, {0x7f, 0xff, 0xff, 0xff}, {0x80, 0, 0, 0}, {0, 0, 0, 255}, {0, 0, 1, 0}},
		"int8":      {u64(0), u64(math.MaxInt64), u64(1 << 63), u64(255), u64(256)},
		"float8":    {u64(math.Float64bits(math.NaN())), u64(math.Float64bits(math.Inf(-1))), u64(math.Float64bits(math.Copysign(0, -1))), u64(math.Float64bits(1.5))},
		"date":      {{0x7f, 0xff, 0xff, 0xff}, {0x80, 0, 0, 0}, {0, 0, 0, 0}, {0xff, 0xff, 0xff, 0xff}},
		"timestamp": {u64(math.MaxInt64), u64(1 << 63), u64(0), u64(uint64(maxTimestamp))},
		"text":      {{}, []byte("a"), []byte(strings.Repeat("x", slabText+1)), []byte("après"), bytes.Repeat([]byte{0xff}, 70)},
		"jsonb":     {{}, {1}, {0, '1'}, {2, '{', '}'}, []byte("\x01{\"a\": 1}"), append([]byte{1}, strings.Repeat("x", slabText+1)...)},
		"numeric": {
			numericBinary(0, numericPos, 4, 1, 5000),
			numericBinary(-1, numericNeg, 4, 1),
			numericBinary(1, numericPos, 0, 1),
			numericBinary(0, numericNaN, 0),
			numericBinary(0, numericPInf, 0),
			numericBinary(0, numericNInf, 0),
			numericBinary(0, numericPos, 0),
			numericBinary(-3, numericPos, 20, 12, 3456),
			numericBinary(300, numericNeg, 1000, 9999),                        // 1,205 digits before the point
			numericBinary(0, numericPos, 2, 10000),                            // a bad digit
			numericBinary(0, numericPos, -1, 1),                               // a bad scale
			append(numericBinary(0, numericPos, 2, 1), 0),                     // a stray byte
			numericBinary(2, 0x1234, 0, 1),                                    // a bad sign
			numericBinary(int16(math.MaxInt16), numericPos, 0, 1, 2, 3, 4, 5), // a large weight
		},
	}
	// Random values, and random bytes (of every length up to 12) that
	// the decoders must refuse or read alike.
	for name := range in {
		for range 2000 {
			var b []byte
			switch name {
			case "text":
				b = make([]byte, rng.IntN(300))
			case "jsonb":
				b = make([]byte, rng.IntN(300))
			case "numeric":
				n := rng.IntN(6)
				digits := make([]uint16, n)
				for i := range digits {
					digits[i] = uint16(rng.IntN(10000))
				}
				b = numericBinary(int16(rng.IntN(12)-6), []uint16{numericPos, numericNeg}[rng.IntN(2)], int16(rng.IntN(30)), digits...)
			default:
				b = make([]byte, rng.IntN(13))
			}
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			if name == "jsonb" && len(b) > 0 && rng.IntN(4) > 0 {
				b[0] = 1 // mostly the version byte, random bytes after it
			}
			in[name] = append(in[name], b)
		}
	}
	return in
}

// TestSlabDecodersMatch: every slab decoder returns what its plain decoder
// returns — the same dynamic type and value, or an error for the same
// input — and the values stay unchanged while the slab fills many more
// chunks and the collector runs (a slab never writes a value twice, and
// the chunks live as long as a value points into them).
func TestSlabDecodersMatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := slabInputs(rng)
	var s Slab
	type kept struct {
		name string
		in   []byte
		got  any
	}
	var all []kept
	for round := range 3 {
		for _, p := range slabPairs {
			for _, in := range inputs[p.name] {
				want, werr := p.plain(in)
				got, gerr := p.slab(in, &s)
				if (werr != nil) != (gerr != nil) {
					t.Fatalf("%s %x: plain error %v, slab error %v", p.name, in, werr, gerr)
				}
				if werr != nil {
					continue
				}
				if reflect.TypeOf(got) != reflect.TypeOf(want) || !Equal(got, want) {
					t.Fatalf("%s %x: slab %#v (%T), plain %#v (%T)", p.name, in, got, got, want, want)
				}
				if round == 0 {
					all = append(all, kept{p.name, in, got})
				}
			}
		}
		runtime.GC()
	}
	for _, k := range all {
		want, _ := slabPairs[indexOfPair(k.name)].plain(k.in)
		if !Equal(k.got, want) {
			t.Fatalf("%s %x: the slab's value changed to %#v, want %#v", k.name, k.in, k.got, want)
		}
	}
}

func indexOfPair(name string) int {
	for i, p := range slabPairs {
		if p.name == name {
			return i
		}
	}
	panic(name)
}

// TestSlabAllocations: a row of the slab's types costs no allocation of
// its own once the chunks exist.
func TestSlabAllocations(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("instrumented builds allocate differently")
	}
	var s Slab
	num := numericBinary(0, numericPos, 2, 1234, 5600)
	text := []byte("row 123456")
	i8 := binary.BigEndian.AppendUint64(nil, 123456789)
	row := make([]any, 3)
	allocs := testing.AllocsPerRun(1000, func() {
		row[0], _ = slabInt(readInt8)(i8, &s)
		row[1], _ = slabString(text, &s)
		row[2], _ = slabNumeric(num, &s)
	})
	// Chunks of 4,096 values and 64 KB of text: well under one
	// allocation a row on average.
	if allocs > 0.1 {
		t.Errorf("%.2f allocations a row of three slab values", allocs)
	}
}

// TestReusableSlab: after Reset a reusable slab writes its chunks again
// (a value given out before reads as the one given out in its place
// after, and a round of rows allocates nothing once the chunks exist),
// and every value it gives out after Reset is right; a plain slab's Reset
// leaves the values given out before as they were.
func TestReusableSlab(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	inputs := slabInputs(rng)
	fill := func(s *Slab) []any {
		var got []any
		for _, p := range slabPairs {
			for _, in := range inputs[p.name] {
				v, err := p.slab(in, s)
				if err == nil {
					got = append(got, v)
				}
			}
		}
		return got
	}
	check := func(what string, got []any) {
		t.Helper()
		i := 0
		for _, p := range slabPairs {
			for _, in := range inputs[p.name] {
				want, err := p.plain(in)
				if err != nil {
					continue
				}
				if !Equal(got[i], want) {
					t.Fatalf("%s: %s %x reads %#v, want %#v", what, p.name, in, got[i], want)
				}
				i++
			}
		}
	}

	s := NewReusableSlab()
	first := s.Int64(1)
	fill(s)
	s.Reset()
	if s.Int64(2); !Equal(first, int64(2)) {
		t.Errorf("a reusable slab's first value reads %v after Reset and a new value, want 2 (its chunk reused)", first)
	}
	s.Reset()
	check("after Reset", fill(s))
	s.Reset()
	check("after a second Reset", fill(s))
	if testing.CoverMode() == "" {
		// The valid inputs only (a refused one allocates its error), and
		// no long text (it gets a chunk of its own, never reused).
		type valid struct {
			f  SlabFunc
			in []byte
		}
		var vs []valid
		for _, p := range slabPairs {
			for _, in := range inputs[p.name] {
				v, err := p.plain(in)
				if str, ok := v.(string); err == nil && (!ok || len(str) <= 4096) {
					vs = append(vs, valid{p.slab, in})
				}
			}
		}
		row := make([]any, len(vs))
		round := func() {
			s.Reset()
			for i, v := range vs {
				row[i], _ = v.f(v.in, s)
			}
		}
		round()
		if allocs := testing.AllocsPerRun(5, round); allocs > 0 {
			t.Errorf("a reusable slab's round of %d values allocated %.0f times; its chunks are not reused", len(vs), allocs)
		}
	}

	var plain Slab
	kept := fill(&plain)
	plain.Reset()
	fill(&plain)
	check("a plain slab's values after Reset", kept)
}
