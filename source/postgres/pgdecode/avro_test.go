package pgdecode

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// avroCase is a type an AvroFunc is held to: its OID and modifier.
type avroCase struct {
	name   string
	oid    uint32
	typmod int32
}

func numericMod(p, s int) int32 { return int32(p<<16|s) + 4 }

var avroCases = []avroCase{
	{"bool", oidBool, -1}, {"int2", oidInt2, -1}, {"int4", oidInt4, -1}, {"int8", oidInt8, -1},
	{"float4", oidFloat4, -1}, {"float8", oidFloat8, -1},
	{"text", oidText, -1}, {"varchar", oidVarchar, -1}, {"bpchar", oidBPChar, -1}, {"name", oidName, -1},
	{"json", oidJSON, -1}, {"jsonb", oidJSONB, -1}, {"bytea", oidBytea, -1}, {"uuid", oidUUID, -1},
	{"date", oidDate, -1}, {"timestamp", oidTimestamp, -1}, {"timestamptz", oidTimestampTZ, -1},
	{"numeric", oidNumeric, -1}, {"numeric(10,2)", oidNumeric, numericMod(10, 2)},
	{"numeric(18,4)", oidNumeric, numericMod(18, 4)}, {"numeric(38,10)", oidNumeric, numericMod(38, 10)},
	{"numeric(5,0)", oidNumeric, numericMod(5, 0)}, {"numeric(20,18)", oidNumeric, numericMod(20, 18)},
	{"numeric(38,0)", oidNumeric, numericMod(38, 0)}, {"numeric(1000,30)", oidNumeric, numericMod(1000, 30)},
}

// checkAvro holds t's AvroFunc to Decode followed by schema's encoding of
// the value for t's column (NOT NULL, so no union branch) on b: the same
// bytes, or a refusal where either refuses. It reports whether the
// AvroFunc wrote the value. A refusal where both accept is allowed only
// for a decimal whose unscaled value needs 8 bytes or more (past int64,
// and -2^63): the AvroFunc handles int64 magnitudes below 2^63.
func checkAvro(t *testing.T, name string, typ *Type, b []byte) bool {
	t.Helper()
	const junk = "prefix"
	got, ok := typ.Avro([]byte(junk), b)
	if ok && !bytes.HasPrefix(got, []byte(junk)) {
		t.Fatalf("%s %x: the AvroFunc changed what dst held: %x", name, b, got)
	}
	v, derr := typ.Decode(b)
	var want []byte
	var eerr error
	if derr == nil {
		want, eerr = schema.AppendField([]byte(junk), &typ.Col, v)
	}
	switch {
	case derr != nil || eerr != nil:
		if ok {
			t.Fatalf("%s %x: the AvroFunc wrote %x where the decode path refuses (decode %v, encode %v)", name, b, got, derr, eerr)
		}
		return false
	case !ok:
		if typ.Col.Kind == schema.Decimal && typ.Col.Precision > 0 && len(want)-len(junk) >= 1+8 {
			return false
		}
		t.Fatalf("%s %x: the AvroFunc refused what the decode path writes as %x (value %#v)", name, b, want[len(junk):], v)
	case !bytes.Equal(got, want):
		t.Fatalf("%s %x (value %#v): AvroFunc %x, decode and encode %x", name, b, v, got[len(junk):], want[len(junk):])
	}
	if n, w := typ.DecodedSize(b), source.RowBytes([]any{v}); n != w {
		t.Fatalf("%s %x (value %#v): DecodedSize %d, RowBytes %d", name, b, v, n, w)
	}
	return true
}

// numericBytes is a binary numeric.
func numericBytes(weight, sign, dscale int, digits ...int) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(digits)))
	b = binary.BigEndian.AppendUint16(b, uint16(int16(weight)))
	b = binary.BigEndian.AppendUint16(b, uint16(sign))
	b = binary.BigEndian.AppendUint16(b, uint16(int16(dscale)))
	for _, d := range digits {
		b = binary.BigEndian.AppendUint16(b, uint16(d))
	}
	return b
}

// randomValue is a binary value for oid: mostly well formed, with the
// edges (±infinity, NaN, -0, extremes, before 1970, past the range) and
// now and then a wrong length or a bad byte.
func randomValue(r *rand.Rand, oid uint32) []byte {
	if r.IntN(40) == 0 { // any bytes
		b := make([]byte, r.IntN(20))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	u64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	u32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	switch oid {
	case oidBool:
		return []byte{byte(r.IntN(3))}
	case oidInt2:
		return binary.BigEndian.AppendUint16(nil, uint16(r.Uint32()))
	case oidInt4:
		return u32([]uint32{0, 1, math.MaxUint32, 1 << 31, r.Uint32()}[r.IntN(5)])
	case oidInt8:
		return u64([]uint64{0, 1, math.MaxUint64, 1 << 63, 1<<63 - 1, r.Uint64(), uint64(r.IntN(100))}[r.IntN(7)])
	case oidFloat4:
		f := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
			math.MaxFloat32, math.SmallestNonzeroFloat32, r.Float32() * 1e6}[r.IntN(8)]
		if r.IntN(4) == 0 {
			return u32(r.Uint32()) // any bits: NaN payloads
		}
		return u32(math.Float32bits(f))
	case oidFloat8:
		f := []float64{0, math.Copysign(0, -1), math.NaN(), math.Inf(1), math.Inf(-1), math.MaxFloat64,
			math.SmallestNonzeroFloat64, r.NormFloat64() * 1e9}[r.IntN(8)]
		if r.IntN(4) == 0 {
			return u64(r.Uint64())
		}
		return u64(math.Float64bits(f))
	case oidText, oidVarchar, oidBPChar, oidName, oidJSON, oidBytea:
		b := make([]byte, []int{0, 1, 5, 63, 64, 200, 20000}[r.IntN(7)])
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	case oidJSONB:
		b := []byte{1}
		if r.IntN(10) == 0 {
			b[0] = byte(r.IntN(3))
		}
		return append(b, `{"a": [1, 2.5, "x"]}`[:r.IntN(20)]...)
	case oidUUID:
		b := make([]byte, 16)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	case oidDate:
		return u32(uint32([]int32{math.MaxInt32, math.MinInt32, math.MaxInt32 - 1, math.MinInt32 + 1, 0, -pgEpochDays,
			-pgEpochDays - 1, int32(r.Uint32())}[r.IntN(8)]))
	case oidTimestamp, oidTimestampTZ:
		return u64(uint64([]int64{math.MaxInt64, math.MinInt64, maxTimestamp, maxTimestamp + 1, 0, -pgEpochMicros,
			-pgEpochMicros - 1, math.MinInt64 + 1, int64(r.Uint64()), int64(r.Uint64() >> 20), -int64(r.Uint64() >> 8)}[r.IntN(11)]))
	case oidNumeric:
		sign := []int{numericPos, numericNeg, numericPos, numericNeg, numericNaN, numericPInf, numericNInf, 0x1234}[r.IntN(8)]
		n := r.IntN(7)
		digits := make([]int, n)
		for i := range digits {
			digits[i] = []int{0, 9999, 1, r.IntN(10000), r.IntN(10000), r.IntN(10000)}[r.IntN(6)]
			if r.IntN(200) == 0 {
				digits[i] = 10000 + r.IntN(50000)
			}
		}
		b := numericBytes(r.IntN(14)-6, sign, r.IntN(25), digits...)
		if r.IntN(50) == 0 {
			b = b[:r.IntN(len(b)+1)]
		}
		return b
	}
	panic("no values for this type")
}

// TestAvroMatchesDecode: every AvroFunc writes what decode and encode
// write, on the edges of each type and 20,000 random values a type; and
// writes (does not refuse) the common values a load carries.
func TestAvroMatchesDecode(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 20))
	for _, c := range avroCases {
		typ, ok, err := Builtin(c.oid, c.typmod, nil)
		if !ok || err != nil || typ.Avro == nil {
			t.Fatalf("%s: no AvroFunc (%v)", c.name, err)
		}
		wrote := 0
		for range 20000 {
			if checkAvro(t, c.name, typ, randomValue(r, c.oid)) {
				wrote++
			}
		}
		if wrote < 3000 { // a constrained numeric refuses many random ones (past its scale, NaN)
			t.Errorf("%s: the AvroFunc wrote only %d of 20000 values", c.name, wrote)
		}
	}
	// Numerics at the edges of a scale and of int64.
	n102, _, _ := Builtin(oidNumeric, numericMod(10, 2), nil)
	n380, _, _ := Builtin(oidNumeric, numericMod(38, 0), nil)
	plain, _, _ := Builtin(oidNumeric, -1, nil)
	for _, tc := range []struct {
		name  string
		typ   *Type
		b     []byte
		wrote bool
	}{
		{"456.78", n102, numericBytes(0, numericPos, 2, 456, 7800), true},
		{"-0.01", n102, numericBytes(-1, numericNeg, 2, 100), true},
		{"-0.00 (negative zero)", n102, numericBytes(0, numericNeg, 2), true},
		{"0", n102, numericBytes(0, numericPos, 0), true},
		{"1.5000 (dscale past scale, zeros)", n102, numericBytes(0, numericPos, 4, 1, 5000), true},
		{"1.5001 (a digit past scale)", n102, numericBytes(0, numericPos, 4, 1, 5001), false},
		{"1.50 with a stored digit past dscale", n102, numericBytes(0, numericPos, 2, 1, 5001), true},
		{"NaN", n102, numericBytes(0, numericNaN, 0), false},
		{"Infinity", n102, numericBytes(0, numericPInf, 0), false},
		{"-Infinity", n102, numericBytes(0, numericNInf, 0), false},
		{"9223372036854775807", n380, numericBytes(4, numericPos, 0, 922, 3372, 368, 5477, 5807), true},
		{"-9223372036854775807", n380, numericBytes(4, numericNeg, 0, 922, 3372, 368, 5477, 5807), true},
		{"9223372036854775808", n380, numericBytes(4, numericPos, 0, 922, 3372, 368, 5477, 5808), false},
		{"-9223372036854775808", n380, numericBytes(4, numericNeg, 0, 922, 3372, 368, 5477, 5808), false},
		{"1e40", n380, numericBytes(10, numericPos, 0, 1), false},
		{"1e-20 unconstrained", plain, numericBytes(-5, numericPos, 20, 1), true},
		{"a 200-digit unconstrained", plain, numericBytes(50, numericNeg, 3, 1234, 5678, 9999, 1), true},
		{"NaN unconstrained", plain, numericBytes(0, numericNaN, 0), true},
		{"-Infinity unconstrained", plain, numericBytes(0, numericNInf, 0), true},
	} {
		if got := checkAvro(t, tc.name, tc.typ, tc.b); got != tc.wrote {
			t.Errorf("%s: AvroFunc wrote %v, want %v", tc.name, got, tc.wrote)
		}
	}
}

// FuzzAvro holds every AvroFunc to the decode path on any bytes.
func FuzzAvro(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for i, c := range avroCases {
		for range 4 {
			f.Add(uint8(i), randomValue(r, c.oid))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		c := avroCases[int(which)%len(avroCases)]
		typ, _, _ := Builtin(c.oid, c.typmod, nil)
		checkAvro(t, c.name, typ, b)
	})
}
