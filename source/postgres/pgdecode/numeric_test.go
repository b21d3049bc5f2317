package pgdecode

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// appendNumericRef is appendNumeric as it was before session 17 (a closure
// per digit, strconv for the first group, a division per decimal digit):
// the plain version the fast one must match byte for byte, errors
// included.
func appendNumericRef(dst, b []byte) ([]byte, error) {
	if len(b) < 8 {
		return dst, lengthError(">= 8", len(b))
	}
	ndigits := int(int16(binary.BigEndian.Uint16(b)))
	weight := int(int16(binary.BigEndian.Uint16(b[2:])))
	sign := binary.BigEndian.Uint16(b[4:])
	dscale := int(int16(binary.BigEndian.Uint16(b[6:])))
	if ndigits < 0 || dscale < 0 || len(b) != 8+2*ndigits {
		return dst, fmt.Errorf("%w: numeric header (ndigits %d, dscale %d, %d bytes)", ErrBadValue, ndigits, dscale, len(b))
	}
	switch sign {
	case numericNaN:
		return append(dst, "NaN"...), nil
	case numericPInf:
		return append(dst, "Infinity"...), nil
	case numericNInf:
		return append(dst, "-Infinity"...), nil
	case numericPos, numericNeg:
	default:
		return dst, fmt.Errorf("%w: numeric sign %#x", ErrBadValue, sign)
	}
	digit := func(i int) int {
		if i < 0 || i >= ndigits {
			return 0
		}
		return int(binary.BigEndian.Uint16(b[8+2*i:]))
	}
	for i := 0; i < ndigits; i++ {
		if digit(i) > 9999 {
			return dst, fmt.Errorf("%w: numeric digit %d", ErrBadValue, digit(i))
		}
	}
	dst = slices.Grow(dst, 4*(max(weight, 0)+1)+dscale+2)
	if sign == numericNeg {
		dst = append(dst, '-')
	}
	if weight < 0 {
		dst = append(dst, '0')
	} else {
		dst = strconv.AppendInt(dst, int64(digit(0)), 10)
		for i := 1; i <= weight; i++ {
			dst = appendDigits4Ref(dst, digit(i), 4)
		}
	}
	if dscale > 0 {
		dst = append(dst, '.')
		for i, written := weight+1, 0; written < dscale; i++ {
			n := min(4, dscale-written)
			dst = appendDigits4Ref(dst, digit(i), n)
			written += n
		}
	}
	return dst, nil
}

func appendDigits4Ref(dst []byte, d, n int) []byte {
	var g [4]byte
	for j := 3; j >= 0; j-- {
		g[j] = byte('0' + d%10)
		d /= 10
	}
	return append(dst, g[:n]...)
}

// sameNumeric fails t unless appendNumeric and appendNumericRef give b the
// same text after the same prefix, or the same error.
func sameNumeric(t *testing.T, b []byte) {
	t.Helper()
	prefix := []byte("x")
	got, gerr := appendNumeric(slices.Clone(prefix), b)
	want, werr := appendNumericRef(slices.Clone(prefix), b)
	if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
		t.Fatalf("numeric % x: error %v, want %v", b, gerr, werr)
	}
	if gerr == nil && !bytes.Equal(got, want) {
		t.Fatalf("numeric % x: %q, want %q", b, got, want)
	}
}

// TestNumericMatchesRef: the numeric text written four digits at a time is
// the plain version's, for every base-10000 digit in the first, a middle
// and a fractional place, and for random and malformed numerics (weights
// below and above the digits, scales that cut a group, bad digits, signs
// and lengths).
func TestNumericMatchesRef(t *testing.T) {
	for d := range uint16(10000) {
		for _, sign := range []uint16{numericPos, numericNeg} {
			sameNumeric(t, numericBinary(0, sign, 0, d))        // the first group
			sameNumeric(t, numericBinary(1, sign, 3, 7, d))     // a whole group after it
			sameNumeric(t, numericBinary(-1, sign, 6, d, 1234)) // fractional, cut
			sameNumeric(t, numericBinary(2, sign, 0, d))        // weight past the digits
		}
	}
	for _, b := range [][]byte{
		nil, {1, 2, 3}, numericBinary(0, numericNaN, 0), numericBinary(0, numericPInf, 0), numericBinary(0, numericNInf, 0),
		numericBinary(0, numericPos, 0), numericBinary(-3, numericPos, 20, 12, 3456), numericBinary(0, numericPos, 2, 10000),
		numericBinary(0, numericPos, 2, 1, 65535), numericBinary(0, numericPos, -1, 1), append(numericBinary(0, numericPos, 2, 1), 0),
		numericBinary(2, 0x1234, 0, 1), numericBinary(300, numericNeg, 1000, 9999),
	} {
		sameNumeric(t, b)
	}
	rng := rand.New(rand.NewPCG(17, 17))
	for range 200_000 {
		digits := make([]uint16, rng.IntN(8))
		for i := range digits {
			digits[i] = uint16(rng.IntN(10000))
			if rng.IntN(50) == 0 {
				digits[i] = uint16(rng.Uint32()) // mostly bad
			}
		}
		sign := []uint16{numericPos, numericNeg, numericNaN, numericPInf, numericNInf, uint16(rng.Uint32())}[rng.IntN(6)*rng.IntN(2)*rng.IntN(2)]
		sameNumeric(t, numericBinary(int16(rng.IntN(20)-10), sign, int16(rng.IntN(40)-2), digits...))
	}
}

// FuzzNumeric: whatever the bytes, the fast numeric text is the plain one.
func FuzzNumeric(f *testing.F) {
	f.Add(numericBinary(0, numericPos, 2, 1234, 5600))
	f.Add(numericBinary(-2, numericNeg, 9, 17))
	f.Add(numericBinary(0, numericNaN, 0))
	f.Fuzz(func(t *testing.T, b []byte) { sameNumeric(t, b) })
}

// BenchmarkNumeric: a benchmark table's numeric(12,2) value's text.
func BenchmarkNumeric(b *testing.B) {
	in := numericBinary(1, numericPos, 2, 12, 3456, 7800) // 123456.78
	dst := make([]byte, 0, 64)
	for b.Loop() {
		dst, _ = appendNumeric(dst[:0], in)
	}
}
