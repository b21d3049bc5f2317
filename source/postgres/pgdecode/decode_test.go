package pgdecode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
)

// fuzzDecoders are the decoders of every binary form, including the
// structured ones over a few element types.
func fuzzDecoders() []Func {
	int4 := &Type{Col: schema.Column{Kind: schema.Int32}, Decode: decodeInt4}
	ts := &Type{Col: schema.Column{Kind: schema.TimestampTZ}, Decode: decodeTimestamp}
	text := &Type{Col: schema.Column{Kind: schema.String}, Decode: DecodeString}
	return []Func{
		decodeBool, decodeInt2, decodeInt4, decodeInt8, decodeUint4, decodeXid8, decodeFloat4, decodeFloat8,
		DecodeString, decodeBytes, decodeVersioned, decodeChar, decodeUUID, decodeDate, decodeTime, decodeTimestamp,
		decodeTimeTZ, decodeInterval, decodeMoney(2), decodeLSN, decodeTID, decodeNumeric, decodeBits, decodeMAC(6),
		decodeMAC(8), decodeInet, decodePoint, decodeLine, decodeLseg, decodeBox, decodePath, decodePolygon, decodeCircle,
		decodeTSVector, decodeHstore,
		Array(decodeInt4, 1), Array(DecodeString, 2),
		Range(int4), Range(ts), Multirange(int4),
		Composite([]Attr{{"a", int4}, {"b", text}}),
	}
}

// FuzzDecoders: no input makes a decoder panic or hang; it returns a value
// or an error.
func FuzzDecoders(f *testing.F) {
	seeds := [][]byte{
		{}, {1}, {0, 0, 0, 1}, make([]byte, 8), make([]byte, 16),
		{0, 2, 0, 0, 0, 0, 0, 2, 0, 1, 0x13, 0x88}, // numeric 1.5000
		{0xC0, 0, 0, 0, 0, 0, 0, 0},                // numeric-like NaN header
		{2, 24, 0, 4, 192, 168, 1, 5},              // inet 192.168.1.5/24
		{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 23, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff}, // int4[] {7,NULL}
		{2, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 10},                                                          // int4range [1,10)
	}
	for _, s := range seeds {
		f.Add(s)
	}
	decs := fuzzDecoders()
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, dec := range decs {
			_, _ = dec(b)
		}
	})
}

func TestDecodersRejectTruncation(t *testing.T) {
	cases := []struct {
		dec  Func
		good []byte
	}{
		{decodeNumeric, []byte{0, 2, 0, 0, 0, 0, 0, 2, 0, 1, 0x13, 0x88}},
		{decodeInet, []byte{2, 24, 0, 4, 192, 168, 1, 5}},
		{Array(decodeInt4, 1), []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 23, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff}},
		{decodeInterval, make([]byte, 16)},
		{decodeBits, []byte{0, 0, 0, 9, 0xff, 0x80}},
	}
	for i, c := range cases {
		if _, err := c.dec(c.good); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		for n := 0; n < len(c.good); n++ {
			if _, err := c.dec(c.good[:n]); err == nil {
				t.Errorf("case %d: %d of %d bytes accepted", i, n, len(c.good))
			}
		}
	}
}

func TestDecodeValues(t *testing.T) {
	ts := func(us int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(us)) }
	for _, tc := range []struct {
		name string
		dec  Func
		in   []byte
		want any
	}{
		{"numeric 1.5000", decodeNumeric, []byte{0, 2, 0, 0, 0, 0, 0, 4, 0, 1, 0x13, 0x88}, "1.5000"},
		{"numeric -0.0001", decodeNumeric, []byte{0, 1, 0xff, 0xff, 0x40, 0, 0, 4, 0, 1}, "-0.0001"},
		{"numeric 10000", decodeNumeric, []byte{0, 1, 0, 1, 0, 0, 0, 0, 0, 1}, "10000"},
		{"numeric NaN", decodeNumeric, []byte{0, 0, 0, 0, 0xC0, 0, 0, 0}, "NaN"},
		{"numeric -Infinity", decodeNumeric, []byte{0, 0, 0, 0, 0xF0, 0, 0, 0}, "-Infinity"},
		{"timestamp infinity", decodeTimestamp, ts(math.MaxInt64), schema.TimestampInfinity},
		{"timestamp -infinity", decodeTimestamp, ts(math.MinInt64), schema.TimestampMinusInfinity},
		{"timestamp 2000", decodeTimestamp, ts(0), int64(946684800_000_000)},
		{"money -1.05", decodeMoney(2), binary.BigEndian.AppendUint64(nil, uint64(0xFFFFFFFFFFFFFF97)), "-1.05"},
		{"money min", decodeMoney(2), ts(math.MinInt64), "-92233720368547758.08"},
		{"timetz", decodeTimeTZ, append(ts(3_600_000_000), 0xff, 0xff, 0xb9, 0xb0), "01:00:00+05"},
		{"char high", decodeChar, []byte{0x80}, `\200`},
		{"ipv4-mapped", decodeInet, append([]byte{3, 128, 0, 16}, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4), "::ffff:1.2.3.4"},
		{"ipv6 two runs", decodeInet, append([]byte{3, 128, 0, 16}, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1), "1:0:0:1::1"},
		{"interval", decodeInterval, []byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff}, schema.IntervalValue{Micros: 1, Days: 2, Months: -1}},
	} {
		got, err := tc.dec(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %#v (%v), want %#v", tc.name, got, err, tc.want)
		}
	}
	if _, err := decodeTimestamp(ts(maxTimestamp + 1)); !errors.Is(err, ErrTimestampRange) {
		t.Errorf("a timestamp past int64 micros since 1970: %v", err)
	}
	if _, err := Array(decodeInt4, 1)([]byte{0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 23, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1,
		0, 0, 0, 4, 0, 0, 0, 7}); !errors.Is(err, ErrArrayShape) {
		t.Errorf("a 2-D value in a 1-D column: %v", err)
	}
}

// copyStream writes a COPY binary stream of rows (nil fields are NULL).
func copyStream(rows [][][]byte) []byte {
	b := append([]byte{}, copySignature...)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	for _, r := range rows {
		b = binary.BigEndian.AppendUint16(b, uint16(len(r)))
		for _, f := range r {
			if f == nil {
				b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
				continue
			}
			b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
			b = append(b, f...)
		}
	}
	return append(b, 0xFF, 0xFF)
}

// TestCopyParserSplits: a stream cut into writes at every offset yields
// the same rows; a stream without its trailer is an error.
func TestCopyParserSplits(t *testing.T) {
	rows := [][][]byte{{[]byte("a"), nil, {}}, {[]byte("bcd"), []byte{1, 2}, nil}, {nil, nil, []byte("x")}}
	stream := copyStream(rows)
	collect := func(writes ...[]byte) ([][][]byte, error) {
		var got [][][]byte
		p := &CopyParser{Row: func(fields [][]byte) error {
			r := make([][]byte, len(fields))
			for i, f := range fields {
				if f != nil {
					r[i] = append([]byte{}, f...)
				}
			}
			got = append(got, r)
			return nil
		}}
		for _, w := range writes {
			if _, err := p.Write(w); err != nil {
				return nil, err
			}
		}
		return got, p.Finish()
	}
	for cut := 0; cut <= len(stream); cut++ {
		for cut2 := cut; cut2 <= len(stream); cut2 += 7 {
			got, err := collect(stream[:cut], stream[cut:cut2], stream[cut2:])
			if err != nil {
				t.Fatalf("cut %d/%d: %v", cut, cut2, err)
			}
			for i := range rows {
				for j := range rows[i] {
					if (got[i][j] == nil) != (rows[i][j] == nil) || !bytes.Equal(got[i][j], rows[i][j]) {
						t.Fatalf("cut %d/%d: row %d field %d = %q, want %q", cut, cut2, i, j, got[i][j], rows[i][j])
					}
				}
			}
		}
	}
	if _, err := collect(stream[:len(stream)-2]); err == nil {
		t.Fatal("a stream without its trailer was accepted")
	}
}

// FuzzCopyParser: no input makes the parser panic.
func FuzzCopyParser(f *testing.F) {
	f.Add(copyStream([][][]byte{{[]byte("a"), nil}}), 3)
	f.Add([]byte("PGCOPY\n\xff\r\n\x00garbage"), 1)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		p := &CopyParser{Row: func([][]byte) error { return nil }}
		if cut < 0 || cut > len(b) {
			cut = len(b) / 2
		}
		if _, err := p.Write(b[:cut]); err == nil {
			_, _ = p.Write(b[cut:])
		}
		_ = p.Finish()
	})
}

// TestDecodersOwnTheirValues: no decoder's value aliases its input, so the
// stream may decode straight from the connection's buffer (tuple.go), which
// the next receive overwrites: every decoder (and every slab form), over
// valid values and random bytes, returns a value that stays the same once
// its input is overwritten.
func TestDecodersOwnTheirValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	inputs := [][]byte{
		{0, 2, 0, 0, 0, 0, 0, 4, 0, 1, 0x13, 0x88},
		{2, 24, 0, 4, 192, 168, 1, 5},
		{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 23, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff},
		{2, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 10},
		{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 25, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 1, 'd'}, // text[] {abc,d}
		{0, 0, 0, 2, 0, 0, 0, 23, 0, 0, 0, 4, 0, 0, 0, 7, 0, 0, 0, 25, 0, 0, 0, 2, 'h', 'i'},                      // (7,hi)
		{0, 0, 0, 1, 0, 0, 0, 1, 'k', 0, 0, 0, 1, 'v'},                                                            // hstore k=>v
	}
	for _, in := range slabInputs(rng) {
		inputs = append(inputs, in...)
	}
	for range 3000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		inputs = append(inputs, b)
	}
	decs := fuzzDecoders()
	for _, p := range slabPairs {
		var s Slab
		decs = append(decs, func(b []byte) (any, error) { return p.slab(b, &s) })
	}
	valid := 0
	for di, dec := range decs {
		for _, in := range inputs {
			want, err := dec(in)
			if err != nil {
				continue
			}
			valid++
			buf := bytes.Clone(in)
			got, err := dec(buf)
			if err != nil {
				t.Fatalf("decoder %d: %x decoded once, then %v", di, in, err)
			}
			for i := range buf {
				buf[i] ^= 0x5a
			}
			if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) { // NaN too
				t.Fatalf("decoder %d: the value of %x changed to %#v when its input was overwritten, want %#v", di, in, got, want)
			}
		}
	}
	if valid < 1000 {
		t.Fatalf("only %d valid values", valid)
	}
}
