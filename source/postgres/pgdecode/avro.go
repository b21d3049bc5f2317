package pgdecode

import (
	"encoding/binary"
	"math"
	"math/bits"

	"github.com/cdcd-dev/cdcd/schema"
)

// COPY binary → Avro, without the Go value (session 20).
//
// An initial load decoded every field into a Go value (boxed in an
// interface, from the batch's slab) and the Emitter's Prepare encoded
// that value into Avro again, through two type switches a column. An
// AvroFunc writes the Avro straight from the binary form for the load's
// common types. Its contract is exactness: for every input it either
// writes byte for byte what schema's encoding of Decode's value for the
// type's column writes (appendValue, the body without a union branch), or
// refuses (ok false) and the caller takes the decode path, which also
// reports what is wrong with a malformed value. TestAvroMatchesDecode and
// FuzzAvro hold every AvroFunc to Decode followed by schema's encoding.

// AvroFunc appends the Avro body of one non-NULL binary value to dst;
// ok false (dst then holds garbage past its old length, which the
// caller cuts) when it cannot write it exactly as schema's encoding of
// the decoded value would.
type AvroFunc func(dst, b []byte) (_ []byte, ok bool)

// avroFunc returns the AvroFunc for t's column, nil when there is none:
// only types whose decode and encode are plain enough to match exactly.
func avroFunc(oid uint32, c *schema.Column) AvroFunc {
	switch oid {
	case oidBool:
		return avroBool
	case oidInt2:
		return avroInt2
	case oidInt4:
		return avroInt4
	case oidInt8:
		return avroInt8
	case oidFloat4:
		return avroFloat4
	case oidFloat8:
		return avroFloat8
	case oidText, oidVarchar, oidBPChar, oidName, oidJSON, oidBytea:
		return avroString
	case oidJSONB:
		return avroVersioned
	case oidUUID:
		return avroUUID
	case oidDate:
		return avroDate
	case oidTimestamp, oidTimestampTZ:
		return avroTimestamp
	case oidNumeric:
		if c.Precision == 0 {
			return avroNumericText
		}
		scale := c.Scale
		return func(dst, b []byte) ([]byte, bool) { return avroNumericDecimal(dst, b, scale) }
	}
	return nil
}

func avroBool(dst, b []byte) ([]byte, bool) {
	if len(b) != 1 {
		return dst, false
	}
	if b[0] != 0 {
		return append(dst, 1), true
	}
	return append(dst, 0), true
}

func avroInt2(dst, b []byte) ([]byte, bool) {
	if len(b) != 2 {
		return dst, false
	}
	return schema.AppendLong(dst, int64(int16(binary.BigEndian.Uint16(b)))), true
}

func avroInt4(dst, b []byte) ([]byte, bool) {
	if len(b) != 4 {
		return dst, false
	}
	return schema.AppendLong(dst, int64(int32(binary.BigEndian.Uint32(b)))), true
}

func avroInt8(dst, b []byte) ([]byte, bool) {
	if len(b) != 8 {
		return dst, false
	}
	return schema.AppendLong(dst, int64(binary.BigEndian.Uint64(b))), true
}

// avroFloat4 and avroFloat8 turn the big-endian IEEE bits into Avro's
// little-endian ones: the same bits, NaN payloads and -0 included.
func avroFloat4(dst, b []byte) ([]byte, bool) {
	if len(b) != 4 {
		return dst, false
	}
	return binary.LittleEndian.AppendUint32(dst, binary.BigEndian.Uint32(b)), true
}

func avroFloat8(dst, b []byte) ([]byte, bool) {
	if len(b) != 8 {
		return dst, false
	}
	return binary.LittleEndian.AppendUint64(dst, binary.BigEndian.Uint64(b)), true
}

// avroString writes text (and bytea, json) as it is: an Avro string or
// bytes is its length and its bytes.
func avroString(dst, b []byte) ([]byte, bool) {
	return append(schema.AppendLong(dst, int64(len(b))), b...), true
}

// avroVersioned writes jsonb's text after its version byte 1.
func avroVersioned(dst, b []byte) ([]byte, bool) {
	if len(b) < 1 || b[0] != 1 {
		return dst, false
	}
	return avroString(dst, b[1:])
}

// avroUUID writes the canonical 36-character text (schema.FormatUUID).
func avroUUID(dst, b []byte) ([]byte, bool) {
	if len(b) != 16 {
		return dst, false
	}
	const hex = "0123456789abcdef"
	dst = append(dst, 72) // Avro long 36
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hex[c>>4], hex[c&15])
	}
	return dst, true
}

func avroDate(dst, b []byte) ([]byte, bool) {
	d, err := readDate(b)
	if err != nil {
		return dst, false
	}
	return schema.AppendLong(dst, int64(d)), true
}

func avroTimestamp(dst, b []byte) ([]byte, bool) {
	t, err := readTimestamp(b)
	if err != nil {
		return dst, false
	}
	return schema.AppendLong(dst, t), true
}

// avroNumericText writes an unconstrained numeric as its exact text
// (NaN and ±Infinity included): the text is written in place after one
// byte for its length, which is moved when it takes more.
func avroNumericText(dst, b []byte) ([]byte, bool) {
	at := len(dst)
	dst = append(dst, 0)
	dst, err := appendNumeric(dst, b)
	if err != nil {
		return dst, false
	}
	n := len(dst) - at - 1
	if n < 64 { // a one-byte Avro long
		dst[at] = byte(n << 1)
		return dst, true
	}
	var lb [binary.MaxVarintLen64]byte
	l := schema.AppendLong(lb[:0], int64(n))
	dst = append(dst, l[1:]...)             // room for the longer length
	copy(dst[at+len(l):], dst[at+1:at+1+n]) // the text, moved up
	copy(dst[at:], l)
	return dst, true
}

// avroNumericDecimal writes a numeric of a column with a precision as the
// Avro decimal of its unscaled value at scale: what schema's encoding of
// the decoded text writes when that value fits an int64. The decoded text
// carries dscale fractional digits; a nonzero one past scale (an error in
// the encoding), NaN and ±Infinity (refused by a decimal), a value past
// int64 (the encoding's big.Int path) and a malformed value are refused.
func avroNumericDecimal(dst, b []byte, scale int) ([]byte, bool) {
	if len(b) < 8 {
		return dst, false
	}
	ndigits := int(int16(binary.BigEndian.Uint16(b)))
	weight := int(int16(binary.BigEndian.Uint16(b[2:])))
	sign := binary.BigEndian.Uint16(b[4:])
	dscale := int(int16(binary.BigEndian.Uint16(b[6:])))
	if ndigits < 0 || dscale < 0 || len(b) != 8+2*ndigits || (sign != numericPos && sign != numericNeg) {
		return dst, false
	}
	digits := b[8:]
	for i := 0; i < len(digits); i += 2 {
		if binary.BigEndian.Uint16(digits[i:]) > 9999 {
			return dst, false
		}
	}
	digit := func(i int) uint64 {
		if uint(i) >= uint(ndigits) {
			return 0
		}
		return uint64(digits[2*i])<<8 | uint64(digits[2*i+1])
	}
	// mulAdd is v*m + d, ok false past uint64.
	mulAdd := func(v, m, d uint64) (uint64, bool) {
		hi, lo := bits.Mul64(v, m)
		sum, c := bits.Add64(lo, d, 0)
		return sum, hi == 0 && c == 0
	}
	// The integer part: base-10000 digits 0..weight.
	var v uint64
	ok := true
	for i := 0; i <= weight && ok; i++ {
		v, ok = mulAdd(v, 10000, digit(i))
	}
	// The fractional digits the text carries (dscale of them) up to scale,
	// four at a time: fractional group k holds decimal places 4k-3..4k.
	take := min(dscale, scale)
	for k := 1; 4*(k-1) < take && ok; k++ {
		g, n := digit(weight+k), min(4, take-4*(k-1))
		v, ok = mulAdd(v, pow10[n], g/pow10[4-n])
	}
	if !ok {
		return dst, false
	}
	if p, fits := pow10Of(scale - take); fits {
		if v, ok = mulAdd(v, p, 0); !ok {
			return dst, false
		}
	} else if v != 0 {
		return dst, false
	}
	// The text's places past scale (scale+1..dscale) must be zeros: the
	// encoding refuses a value it would have to round.
	for j := scale + 1; j <= dscale; {
		k := (j + 3) / 4 // the group holding place j
		last := min(dscale, 4*k)
		g := digit(weight + k)
		// places j..last of the group: drop those after last, keep last-j+1.
		if g/pow10[4*k-last]%pow10[last-j+1] != 0 {
			return dst, false
		}
		j = last + 1
	}
	if v > math.MaxInt64 {
		return dst, false
	}
	u := int64(v)
	if sign == numericNeg {
		u = -u
	}
	return schema.AppendInt64Decimal(dst, u), true
}

var pow10 = [5]uint64{1, 10, 100, 1000, 10000}

// pow10Of is 10^n; fits false past uint64.
func pow10Of(n int) (_ uint64, fits bool) {
	p := uint64(1)
	for ; n > 0; n-- {
		if p > math.MaxUint64/10 {
			return 0, false
		}
		p *= 10
	}
	return p, true
}

// DecodedSize is what source.RowBytes counts for the value Decode returns
// for b, a value t.Avro accepted: 11 and the length of a text or bytes,
// 64 for any other value.
func (t *Type) DecodedSize(b []byte) int {
	switch t.Col.Kind {
	case schema.String, schema.JSON, schema.Bytes:
		if t.versioned {
			return 11 + len(b) - 1
		}
		return 11 + len(b)
	case schema.Decimal:
		return 11 + numericTextLen(b)
	}
	return 64
}

// numericTextLen is the length of appendNumeric's text of b, a well-formed
// numeric.
func numericTextLen(b []byte) int {
	ndigits := int(int16(binary.BigEndian.Uint16(b)))
	weight := int(int16(binary.BigEndian.Uint16(b[2:])))
	sign := binary.BigEndian.Uint16(b[4:])
	dscale := int(int16(binary.BigEndian.Uint16(b[6:])))
	switch sign {
	case numericNaN:
		return 3
	case numericPInf:
		return 8
	case numericNInf:
		return 9
	}
	n := 0
	if sign == numericNeg {
		n++
	}
	if weight < 0 {
		n++
	} else {
		d := 0
		if ndigits > 0 {
			d = int(binary.BigEndian.Uint16(b[8:]))
		}
		switch {
		case d >= 1000:
			n += 4
		case d >= 100:
			n += 3
		case d >= 10:
			n += 2
		default:
			n++
		}
		n += 4 * weight
	}
	if dscale > 0 {
		n += 1 + dscale
	}
	return n
}
