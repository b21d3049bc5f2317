package pgdecode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/cdcd-dev/cdcd/schema"
)

// Decoders of PostgreSQL's binary (send/recv) format, the format of
// pgoutput's binary tuples and of COPY (FORMAT binary) alike: the snapshot
// and the stream decode every value with the same function, so they agree.
// Each is a pure function over the value's bytes, length checked first.

// Func turns one binary-format value into cdcd's Go representation.
type Func func(b []byte) (any, error)

// ErrBadValue is wrapped by every malformed-value error.
var ErrBadValue = errors.New("postgres: malformed binary value")

func lengthError(want string, got int) error {
	return fmt.Errorf("%w: %d bytes, want %s", ErrBadValue, got, want)
}

func fixed(n int, b []byte) error {
	if len(b) != n {
		return lengthError(strconv.Itoa(n), len(b))
	}
	return nil
}

// PostgreSQL counts time from 2000-01-01; cdcd from 1970-01-01.
const (
	pgEpochDays   = 10957
	pgEpochMicros = 946684800 * 1_000_000
)

func decodeBool(b []byte) (any, error) {
	if err := fixed(1, b); err != nil {
		return nil, err
	}
	return b[0] != 0, nil
}

func readInt2(b []byte) (int64, error) {
	if err := fixed(2, b); err != nil {
		return 0, err
	}
	return int64(int16(binary.BigEndian.Uint16(b))), nil
}

func readInt4(b []byte) (int64, error) {
	if err := fixed(4, b); err != nil {
		return 0, err
	}
	return int64(int32(binary.BigEndian.Uint32(b))), nil
}

func readInt8(b []byte) (int64, error) {
	if err := fixed(8, b); err != nil {
		return 0, err
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

func decodeInt2(b []byte) (any, error) { return boxed(readInt2(b)) }
func decodeInt4(b []byte) (any, error) { return boxed(readInt4(b)) }
func decodeInt8(b []byte) (any, error) { return boxed(readInt8(b)) }

// boxed returns v as an interface value, or the error.
func boxed[T any](v T, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}

// decodeUint4 reads the unsigned 32-bit types (oid, xid, cid, reg*).
func decodeUint4(b []byte) (any, error) {
	if err := fixed(4, b); err != nil {
		return nil, err
	}
	return int64(binary.BigEndian.Uint32(b)), nil
}

// decodeXid8 reads a 64-bit transaction id; ids beyond int64 (2^63
// transactions) are refused rather than wrapped.
func decodeXid8(b []byte) (any, error) {
	if err := fixed(8, b); err != nil {
		return nil, err
	}
	v := binary.BigEndian.Uint64(b)
	if v > math.MaxInt64 {
		return nil, fmt.Errorf("%w: xid8 %d exceeds int64", ErrBadValue, v)
	}
	return int64(v), nil
}

func decodeFloat4(b []byte) (any, error) {
	if err := fixed(4, b); err != nil {
		return nil, err
	}
	return math.Float32frombits(binary.BigEndian.Uint32(b)), nil
}

func checkedFloat8(b []byte) (float64, error) {
	if err := fixed(8, b); err != nil {
		return 0, err
	}
	return readFloat8(b), nil
}

func decodeFloat8(b []byte) (any, error) { return boxed(checkedFloat8(b)) }

func readFloat8(b []byte) float64 { return math.Float64frombits(binary.BigEndian.Uint64(b)) }

// DecodeString reads text as it is (text, varchar, json, enums, and every
// type pgoutput sends as text).
func DecodeString(b []byte) (any, error) { return string(b), nil }

func decodeBytes(b []byte) (any, error) { return append([]byte{}, b...), nil }

// decodeVersioned reads the types whose binary form is a version byte 1
// and their text (jsonb, jsonpath).
func decodeVersioned(b []byte) (any, error) {
	if len(b) < 1 || b[0] != 1 {
		return nil, fmt.Errorf("%w: format version %v, want 1", ErrBadValue, b[:min(len(b), 1)])
	}
	return string(b[1:]), nil
}

// decodeChar reads "char" as charout prints it: the byte, an empty
// string for \0, and \ooo octal for bytes with the high bit set.
func decodeChar(b []byte) (any, error) {
	switch {
	case len(b) != 1:
		return nil, lengthError("1", len(b))
	case b[0] == 0:
		return "", nil
	case b[0] >= 0x80:
		return fmt.Sprintf(`\%03o`, b[0]), nil
	}
	return string(b), nil
}

func decodeUUID(b []byte) (any, error) {
	if err := fixed(16, b); err != nil {
		return nil, err
	}
	return [16]byte(b), nil
}

// decodeDate keeps ±infinity as the extreme int32 values.
func readDate(b []byte) (int32, error) {
	if err := fixed(4, b); err != nil {
		return 0, err
	}
	d := int32(binary.BigEndian.Uint32(b))
	if d == math.MaxInt32 || d == math.MinInt32 {
		return d, nil
	}
	return d + pgEpochDays, nil
}

func decodeDate(b []byte) (any, error) { return boxed(readDate(b)) }

func decodeTime(b []byte) (any, error) {
	if err := fixed(8, b); err != nil {
		return nil, err
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// maxTimestamp is the last microsecond since 2000 whose value since 1970
// fits below the int64 that stands for infinity (294247-01-10
// 04:00:54.775806 UTC); PostgreSQL's own range ends 29 years later.
const maxTimestamp = math.MaxInt64 - 1 - pgEpochMicros

// ErrTimestampRange refuses timestamps past maxTimestamp: Avro's and
// Iceberg's microseconds since 1970 cannot hold them, and cdcd never
// clamps or wraps a value.
var ErrTimestampRange = errors.New("postgres: timestamp after 294247-01-10 04:00:54.775806 UTC has no int64 microseconds since 1970")

// readTimestamp keeps ±infinity as the extreme int64 values.
func readTimestamp(b []byte) (int64, error) {
	if err := fixed(8, b); err != nil {
		return 0, err
	}
	t := int64(binary.BigEndian.Uint64(b))
	switch {
	case t == math.MaxInt64 || t == math.MinInt64:
		return t, nil
	case t > maxTimestamp:
		return 0, ErrTimestampRange
	}
	return t + pgEpochMicros, nil
}

func decodeTimestamp(b []byte) (any, error) { return boxed(readTimestamp(b)) }

// decodeTimeTZ renders timetz as timetz_out does ("13:45:00.5+05:30"):
// Iceberg and Avro have no time with a zone, and the offset must survive.
//
//	micros since midnight int64 | zone int32 (seconds west of Greenwich)
func decodeTimeTZ(b []byte) (any, error) {
	if err := fixed(12, b); err != nil {
		return nil, err
	}
	us := int64(binary.BigEndian.Uint64(b))
	west := int32(binary.BigEndian.Uint32(b[8:]))
	return string(appendZone(appendClock(nil, us), -west)), nil
}

// decodeInterval keeps the three parts apart.
//
//	micros int64 | days int32 | months int32
func decodeInterval(b []byte) (any, error) {
	if err := fixed(16, b); err != nil {
		return nil, err
	}
	return schema.IntervalValue{
		Micros: int64(binary.BigEndian.Uint64(b)),
		Days:   int32(binary.BigEndian.Uint32(b[8:])),
		Months: int32(binary.BigEndian.Uint32(b[12:])),
	}, nil
}

// decodeMoney renders money's int64 count of the smallest currency unit as
// exact decimal text at scale (the database's lc_monetary fraction digits).
func decodeMoney(scale int) Func {
	return func(b []byte) (any, error) {
		if err := fixed(8, b); err != nil {
			return nil, err
		}
		v := int64(binary.BigEndian.Uint64(b))
		neg := v < 0
		digits := strconv.FormatUint(uint64(v), 10)
		if neg {
			digits = strconv.FormatUint(uint64(-v), 10) // -MinInt64 wraps to itself, read as unsigned
		}
		if scale > 0 {
			if len(digits) <= scale {
				digits = strings.Repeat("0", scale-len(digits)+1) + digits
			}
			digits = digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
		}
		if neg {
			digits = "-" + digits
		}
		return digits, nil
	}
}

// decodeLSN renders pg_lsn as pg_lsn_out does ("16/B374D848").
func decodeLSN(b []byte) (any, error) {
	if err := fixed(8, b); err != nil {
		return nil, err
	}
	v := binary.BigEndian.Uint64(b)
	return fmt.Sprintf("%X/%X", v>>32, uint32(v)), nil
}

// decodeTID renders a tuple id as tidout does ("(12,3)").
func decodeTID(b []byte) (any, error) {
	if err := fixed(6, b); err != nil {
		return nil, err
	}
	return fmt.Sprintf("(%d,%d)", binary.BigEndian.Uint32(b), binary.BigEndian.Uint16(b[4:])), nil
}

// Numeric sign words of the binary format.
const (
	numericPos  = 0x0000
	numericNeg  = 0x4000
	numericNaN  = 0xC000
	numericPInf = 0xD000
	numericNInf = 0xF000
)

// decodeNumeric renders PostgreSQL's binary numeric (base-10000 digits with
// a weight and a display scale) as exact decimal text; NaN and ±Infinity
// as "NaN", "Infinity", "-Infinity".
//
//	ndigits int16 | weight int16 | sign uint16 | dscale int16 | digits [ndigits]int16
func decodeNumeric(b []byte) (any, error) {
	var buf [64]byte
	text, err := appendNumeric(buf[:0], b)
	if err != nil {
		return nil, err
	}
	return string(text), nil
}

// appendNumeric appends the text of the numeric b ("-12.50", "NaN",
// "Infinity", "-Infinity") to dst.
//
// It runs for every numeric of an initial load, so it reads each digit
// once, checking it as it goes, and writes four decimal digits at a time
// from a table of pairs (the first group without its leading zeros);
// appendNumericRef in the tests is the plain version it must match byte
// for byte.
func appendNumeric(dst, b []byte) ([]byte, error) {
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
	digits := b[8:]
	for i := 0; i < len(digits); i += 2 {
		if d := int(binary.BigEndian.Uint16(digits[i:])); d > 9999 {
			return dst, fmt.Errorf("%w: numeric digit %d", ErrBadValue, d)
		}
	}
	// digit is the i-th base-10000 digit; 0 outside the stored ones.
	digit := func(i int) int {
		if uint(i) >= uint(ndigits) {
			return 0
		}
		return int(digits[2*i])<<8 | int(digits[2*i+1])
	}
	dst = slices.Grow(dst, 4*(max(weight, 0)+1)+dscale+2)
	if sign == numericNeg {
		dst = append(dst, '-')
	}
	if weight < 0 {
		dst = append(dst, '0')
	} else {
		dst = appendLeadingDigits4(dst, digit(0))
		for i := 1; i <= weight; i++ {
			dst = appendDigits4(dst, digit(i), 4)
		}
	}
	if dscale > 0 {
		dst = append(dst, '.')
		for i, written := weight+1, 0; written < dscale; i++ {
			n := min(4, dscale-written)
			dst = appendDigits4(dst, digit(i), n)
			written += n
		}
	}
	return dst, nil
}

// decimalPairs is "00" to "99", each two digits.
const decimalPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

// appendDigits4 appends the first n of d's four decimal digits (d <= 9999).
func appendDigits4(dst []byte, d, n int) []byte {
	hi, lo := (d/100)*2, (d%100)*2
	g := [4]byte{decimalPairs[hi], decimalPairs[hi+1], decimalPairs[lo], decimalPairs[lo+1]}
	return append(dst, g[:n]...)
}

// appendLeadingDigits4 appends d (d <= 9999) without leading zeros, as
// strconv.AppendInt does.
func appendLeadingDigits4(dst []byte, d int) []byte {
	switch {
	case d >= 1000:
		return appendDigits4(dst, d, 4)
	case d >= 100:
		return append(dst, byte('0'+d/100), decimalPairs[(d%100)*2], decimalPairs[(d%100)*2+1])
	case d >= 10:
		return append(dst, decimalPairs[d*2], decimalPairs[d*2+1])
	default:
		return append(dst, byte('0'+d))
	}
}

// decodeBits renders bit and bit varying as bit_out does ("0101").
//
//	bit length int32 | ceil(length/8) bytes, most significant bit first
func decodeBits(b []byte) (any, error) {
	if len(b) < 4 {
		return nil, lengthError(">= 4", len(b))
	}
	n := int(int32(binary.BigEndian.Uint32(b)))
	if n < 0 || len(b) != 4+(n+7)/8 {
		return nil, fmt.Errorf("%w: bit string of %d bits in %d bytes", ErrBadValue, n, len(b))
	}
	out := make([]byte, n)
	for i := range out {
		out[i] = '0' + (b[4+i/8]>>(7-uint(i%8)))&1
	}
	return string(out), nil
}

// decodeMAC renders macaddr (6 bytes) and macaddr8 (8 bytes) as their
// output functions do ("08:00:2b:01:02:03").
func decodeMAC(size int) Func {
	return func(b []byte) (any, error) {
		if err := fixed(size, b); err != nil {
			return nil, err
		}
		const hexdigits = "0123456789abcdef"
		out := make([]byte, 0, 3*size)
		for i, c := range b {
			if i > 0 {
				out = append(out, ':')
			}
			out = append(out, hexdigits[c>>4], hexdigits[c&15])
		}
		return string(out), nil
	}
}

// Address families of inet's binary form.
const (
	pgAFInet  = 2
	pgAFInet6 = 3
)

// decodeInet renders inet and cidr as network_out does: an inet with a
// full mask has no "/bits"; a cidr always has one.
//
//	family byte | bits byte | is_cidr byte | address length byte | address
func decodeInet(b []byte) (any, error) {
	if len(b) < 4 {
		return nil, lengthError(">= 4", len(b))
	}
	family, bits, isCIDR, n := b[0], int(b[1]), b[2] != 0, int(b[3])
	addr := b[4:]
	var s string
	var maxBits int
	switch {
	case family == pgAFInet && n == 4 && len(addr) == 4:
		s, maxBits = fmt.Sprintf("%d.%d.%d.%d", addr[0], addr[1], addr[2], addr[3]), 32
	case family == pgAFInet6 && n == 16 && len(addr) == 16:
		s, maxBits = formatIPv6(addr), 128
	default:
		return nil, fmt.Errorf("%w: inet family %d with %d address bytes", ErrBadValue, family, len(addr))
	}
	if bits > maxBits {
		return nil, fmt.Errorf("%w: inet mask /%d", ErrBadValue, bits)
	}
	if bits != maxBits || isCIDR {
		s += "/" + strconv.Itoa(bits)
	}
	return s, nil
}

// formatIPv6 writes an IPv6 address as PostgreSQL's inet_net_ntop does:
// lower-case hex words, the longest run of two or more zero words as "::",
// and IPv4-compatible and IPv4-mapped addresses with a dotted tail.
func formatIPv6(a []byte) string {
	var words [8]int
	for i := range words {
		words[i] = int(a[2*i])<<8 | int(a[2*i+1])
	}
	bestBase, bestLen, curBase, curLen := -1, 0, -1, 0
	for i, w := range words {
		if w == 0 {
			if curBase == -1 {
				curBase, curLen = i, 1
			} else {
				curLen++
			}
			continue
		}
		if curBase != -1 && (bestBase == -1 || curLen > bestLen) {
			bestBase, bestLen = curBase, curLen
		}
		curBase = -1
	}
	if curBase != -1 && (bestBase == -1 || curLen > bestLen) {
		bestBase, bestLen = curBase, curLen
	}
	if bestBase != -1 && bestLen < 2 {
		bestBase = -1
	}
	var b strings.Builder
	for i := 0; i < 8; i++ {
		if bestBase != -1 && i >= bestBase && i < bestBase+bestLen {
			if i == bestBase {
				b.WriteByte(':')
			}
			continue
		}
		if i != 0 {
			b.WriteByte(':')
		}
		if i == 6 && bestBase == 0 && (bestLen == 6 || (bestLen == 5 && words[5] == 0xffff)) {
			fmt.Fprintf(&b, "%d.%d.%d.%d", a[12], a[13], a[14], a[15])
			return b.String()
		}
		b.WriteString(strconv.FormatInt(int64(words[i]), 16))
	}
	if bestBase != -1 && bestBase+bestLen == 8 {
		b.WriteByte(':')
	}
	return b.String()
}
