package iceberg

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
)

// Statistics of string and binary columns are truncated. parquet-go puts a
// page's min and max into its header twice (min/max and the deprecated
// fields) and the column chunk's into the footer, whole: one 1.2 MB value
// made a 4.8 MB page header, over the 4 MiB that arrow-go's reader (and so
// iceberg-go's scan) accepts, and a 5 MB one a 10 MB footer. Parquet and
// Iceberg allow bounds that are not values of the column: a prefix of the
// minimum is a lower bound, and a prefix of the maximum whose last
// character (text) or byte (binary) is incremented is an upper bound.
//
// boundedType wraps a byte-array type so the pages the writer cuts report
// such bounds; the writer builds every statistic it writes (column chunk,
// column index; page headers carry none since session 16: writerOptions)
// from a page's Bounds.

const (
	// statsPrefix is the length a bound is cut to, in bytes (whole
	// characters for text): parquet-java's default for the column index.
	statsPrefix = 64
	// maxUpperBound is the longest upper bound written. A value longer
	// than this whose first maxUpperBound bytes are all 0xFF has no
	// shorter upper bound; such values are refused (checkBoundable).
	maxUpperBound = 64 << 10
)

// boundedNode is the leaf node of a string (text) or binary column whose
// statistics are truncated.
func boundedNode(base parquet.Node, text bool) parquet.Node {
	return parquet.Leaf(boundedType{Type: base.Type(), text: text})
}

type boundedType struct {
	parquet.Type
	text bool
}

func (t boundedType) NewColumnBuffer(columnIndex, numValues int) parquet.ColumnBuffer {
	return boundedBuffer{ColumnBuffer: t.Type.NewColumnBuffer(columnIndex, numValues), text: t.text}
}

type boundedBuffer struct {
	parquet.ColumnBuffer
	text bool
}

func (b boundedBuffer) Page() parquet.Page {
	return boundedPage{Page: b.ColumnBuffer.Page(), text: b.text}
}

func (b boundedBuffer) Clone() parquet.ColumnBuffer {
	return boundedBuffer{ColumnBuffer: b.ColumnBuffer.Clone(), text: b.text}
}

type boundedPage struct {
	parquet.Page
	text bool
}

func (p boundedPage) Bounds() (lo, hi parquet.Value, ok bool) {
	lo, hi, ok = p.Page.Bounds()
	if !ok {
		return lo, hi, ok
	}
	if b := lo.ByteArray(); len(b) > statsPrefix {
		lo = parquet.ByteArrayValue(lowerBound(b, p.text))
	}
	if b := hi.ByteArray(); len(b) > statsPrefix {
		hi = parquet.ByteArrayValue(upperBound(b, p.text))
	}
	return lo, hi, ok
}

func (p boundedPage) Slice(i, j int64) parquet.Page {
	return boundedPage{Page: p.Page.Slice(i, j), text: p.text}
}

// cut is the length of v's prefix of at most n bytes; for text it ends on a
// character boundary (when v is valid UTF-8 that far).
func cut(v []byte, n int, text bool) int {
	if n >= len(v) {
		return len(v)
	}
	if text {
		for i := n; i > 0 && i > n-utf8.UTFMax; i-- {
			if utf8.RuneStart(v[i]) {
				return i
			}
		}
	}
	return n
}

// lowerBound is a copy of v's prefix: every value with that prefix sorts
// at or after it.
func lowerBound(v []byte, text bool) []byte {
	return append([]byte(nil), v[:cut(v, statsPrefix, text)]...)
}

// upperBound is a bound of about statsPrefix bytes (when v is longer)
// that sorts at or after v: v's prefix with its last incrementable
// character or byte incremented and what follows dropped. When no byte of
// the first statsPrefix can be incremented (binary: all 0xFF), the prefix
// grows to the first byte that can; v itself when none can.
func upperBound(v []byte, text bool) []byte {
	if len(v) <= statsPrefix {
		return v
	}
	n := cut(v, statsPrefix, text)
	if b, ok := incremented(v[:n], text); ok {
		return b
	}
	if i, ok := firstIncrementable(v[n:]); ok {
		b, _ := incremented(v[:n+i], false)
		return b
	}
	return v
}

// incremented returns a copy of p with its last incrementable unit
// incremented and the units after it dropped: a string that sorts after
// every string starting with p. Text that is valid UTF-8 increments a
// character (skipping the surrogates), so the bound stays valid UTF-8;
// otherwise, or when every character is U+10FFFF, a byte below 0xFF (valid
// UTF-8 has none that is 0xFF). ok is false when no unit can be
// incremented.
func incremented(p []byte, text bool) ([]byte, bool) {
	if text && utf8.Valid(p) {
		for end := len(p); end > 0; {
			r, size := utf8.DecodeLastRune(p[:end])
			if next, ok := nextRune(r); ok {
				out := append([]byte(nil), p[:end-size]...)
				return utf8.AppendRune(out, next), true
			}
			end -= size
		}
	}
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] < 0xFF {
			out := append([]byte(nil), p[:i+1]...)
			out[i]++
			return out, true
		}
	}
	return nil, false
}

// nextRune is the character after r, skipping the surrogates.
func nextRune(r rune) (rune, bool) {
	switch {
	case r == 0xD7FF:
		return 0xE000, true
	case r >= utf8.MaxRune:
		return 0, false
	}
	return r + 1, true
}

// firstIncrementable returns the length of the shortest prefix of v that
// ends in a byte below 0xFF, looking no further than maxUpperBound bytes.
func firstIncrementable(v []byte) (int, bool) {
	for i, c := range v[:min(len(v), maxUpperBound)] {
		if c < 0xFF {
			return i + 1, true
		}
	}
	return 0, false
}

// errUnboundable: checkBoundable refused a value.
var errUnboundable = errors.New("iceberg: value without a short upper bound")

// checkBoundable refuses a value whose upper bound would be longer than
// maxUpperBound bytes (the value itself): its first maxUpperBound bytes
// are all 0xFF, which valid UTF-8 text never has.
func checkBoundable(v []byte) error {
	if len(v) <= maxUpperBound {
		return nil
	}
	if _, ok := firstIncrementable(v); ok {
		return nil
	}
	return fmt.Errorf("%w: a value of %d bytes whose first %d bytes are all 0xFF has no Parquet upper bound shorter than itself, "+
		"and readers refuse statistics that large", errUnboundable, len(v), maxUpperBound)
}

// unboundableFix is the fix of a table paused by a value checkBoundable
// refuses.
const unboundableFix = "change the value in the source (or exclude or hash the column with masking), then rebuild the mirror with a re-snapshot: " +
	"cdcd snapshot -c FILE --replace TABLE"
