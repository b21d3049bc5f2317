package pgdecode

import (
	"unsafe"
)

// Slab holds the initial load's scalar values for the rows' interface
// values to point into.
//
// The initial load decodes millions of rows into []any, and boxing a value
// in an interface allocates it on its own (an int64, a float64, a string's
// header and its bytes): five to eight small allocations a row, and the
// collector work they pace (BENCHMARKS.md has the cost). A slab instead
// holds the load's scalar values in chunks of like values, and a
// row's interface values point into it: a few allocations per chunk.
//
// A slab never writes a value twice: a chunk is filled once and then left
// to the collector, which frees it when no value points into it any more.
// So the values are as immutable as ordinary boxed values, and holding one
// is safe; it only keeps its chunk alive (a few KB to 64 KB), which is why
// the slab is for the initial load and the stream, whose rows are encoded
// and dropped, and not for rows a consumer keeps.
//
// A reusable slab (NewReusableSlab) is the exception: Reset writes its
// chunks again from the start, for a holder that knows nothing refers to
// its values any more (the initial load's batch buffers, recycled once the
// Emitter has taken their batch).
type Slab struct {
	ints   []int64
	int32s []int32
	floats []float64
	strs   []string
	text   []byte
	// reuse: the chunks below are kept and handed out again after Reset.
	reuse   bool
	kInts   chunks[int64]
	kInt32s chunks[int32]
	kFloats chunks[float64]
	kStrs   chunks[string]
	kText   chunks[byte]
}

// NewReusableSlab returns a slab whose chunks Reset hands out again.
func NewReusableSlab() *Slab { return &Slab{reuse: true} }

// Reset makes a reusable slab write its chunks again from the first: every
// value it gave out before is overwritten by the ones it gives out next.
// A slab that is not reusable starts new chunks (its values stay as they
// are). REQUIRES: for a reusable slab, nothing refers to a value it gave
// out any more.
func (s *Slab) Reset() {
	s.ints, s.int32s, s.floats, s.strs, s.text = nil, nil, nil, nil, nil
	s.kInts.next, s.kInt32s.next, s.kFloats.next, s.kStrs.next, s.kText.next = 0, 0, 0, 0, 0
}

// chunks are a reusable slab's chunks of one kind: every chunk of the
// standard size made, in order; next is the next to hand out.
type chunks[T any] struct {
	all  [][]T
	next int
}

// get returns an empty chunk of capacity n: the next kept one when reuse
// is on and n is the standard size std, else a new one (kept when of the
// standard size: a longer text's own chunk is left to the collector).
func (c *chunks[T]) get(reuse bool, n, std int) []T {
	if !reuse || n > std {
		return make([]T, 0, n)
	}
	if c.next < len(c.all) {
		b := c.all[c.next]
		c.next++
		return b[:0]
	}
	b := make([]T, 0, std)
	c.all = append(c.all, b)
	c.next = len(c.all)
	return b
}

const (
	slabValues = 4096     // values per chunk
	slabText   = 64 << 10 // bytes per text chunk; longer texts get their own
)

// eface is the runtime's layout of an interface{} value: its dynamic type
// and, for every type that is not pointer-shaped, a pointer to the value.
// The layout has not changed since Go 1.4; reflect and the runtime build
// interface values from exactly these two words.
type eface struct {
	typ  unsafe.Pointer
	data unsafe.Pointer
}

func typeWord(v any) unsafe.Pointer { return (*eface)(unsafe.Pointer(&v)).typ }

var (
	typeInt64   = typeWord(int64(0))
	typeInt32   = typeWord(int32(0))
	typeFloat64 = typeWord(float64(0))
	typeString  = typeWord("")
)

// box returns the interface value of type typ whose value is at p.
func box(typ, p unsafe.Pointer) (v any) {
	e := (*eface)(unsafe.Pointer(&v))
	e.typ, e.data = typ, p
	return v
}

func (s *Slab) int64(v int64) any {
	if len(s.ints) == cap(s.ints) {
		s.ints = s.kInts.get(s.reuse, slabValues, slabValues)
	}
	s.ints = append(s.ints, v)
	return box(typeInt64, unsafe.Pointer(&s.ints[len(s.ints)-1]))
}

func (s *Slab) int32(v int32) any {
	if len(s.int32s) == cap(s.int32s) {
		s.int32s = s.kInt32s.get(s.reuse, slabValues, slabValues)
	}
	s.int32s = append(s.int32s, v)
	return box(typeInt32, unsafe.Pointer(&s.int32s[len(s.int32s)-1]))
}

func (s *Slab) float64(v float64) any {
	if len(s.floats) == cap(s.floats) {
		s.floats = s.kFloats.get(s.reuse, slabValues, slabValues)
	}
	s.floats = append(s.floats, v)
	return box(typeFloat64, unsafe.Pointer(&s.floats[len(s.floats)-1]))
}

// textRoom returns the text chunk with room for n more bytes.
func (s *Slab) textRoom(n int) []byte {
	if cap(s.text)-len(s.text) < n {
		s.text = s.kText.get(s.reuse, max(slabText, n), slabText)
	}
	return s.text
}

// string returns the text b (copied) as a string value.
func (s *Slab) string(b []byte) any {
	t := s.textRoom(len(b))
	start := len(t)
	s.text = append(t, b...)
	return s.stringAt(start)
}

// stringAt returns the text chunk's bytes from start on as a string value;
// the chunk is never written there again.
func (s *Slab) stringAt(start int) any {
	if len(s.strs) == cap(s.strs) {
		s.strs = s.kStrs.get(s.reuse, slabValues, slabValues)
	}
	n := len(s.text) - start
	str := ""
	if n > 0 {
		str = unsafe.String(&s.text[start], n)
	}
	s.strs = append(s.strs, str)
	return box(typeString, unsafe.Pointer(&s.strs[len(s.strs)-1]))
}

// numeric returns the text of the numeric b as a string value.
func (s *Slab) numeric(b []byte) (any, error) {
	// The text takes at most 4 characters per base-10000 digit, the
	// scale's zeros, a sign and a point; NaN and the infinities less.
	t := s.textRoom(numericTextMax(b))
	start := len(t)
	t, err := appendNumeric(t, b)
	if err != nil {
		return nil, err
	}
	if cap(t) != cap(s.text) {
		// appendNumeric outgrew the room it was given (it cannot: the
		// bound above holds); the text is in a new array of its own.
		return string(t[start:]), nil
	}
	s.text = t
	return s.stringAt(start), nil
}

// numericTextMax bounds the length of a numeric's text.
func numericTextMax(b []byte) int {
	if len(b) < 8 {
		return 16
	}
	ndigits := int(int16(uint16(b[0])<<8 | uint16(b[1])))
	weight := int(int16(uint16(b[2])<<8 | uint16(b[3])))
	dscale := int(int16(uint16(b[6])<<8 | uint16(b[7])))
	return 4*(max(ndigits, weight+1, 1)) + max(dscale, 0) + 16
}

// Int64, Int32, Float64, Text and Str are the slab for other sources (the
// MySQL reader's chunk rows and row images): the value as an interface
// value pointing into the slab, Text's bytes copied, Str's string not
// (its header is in the slab). On a nil slab they box the value as usual.
func (s *Slab) Int64(v int64) any {
	if s == nil {
		return v
	}
	return s.int64(v)
}

func (s *Slab) Int32(v int32) any {
	if s == nil {
		return v
	}
	return s.int32(v)
}

func (s *Slab) Text(b []byte) any {
	if s == nil {
		return string(b)
	}
	return s.string(b)
}

func (s *Slab) Float64(v float64) any {
	if s == nil {
		return v
	}
	return s.float64(v)
}

func (s *Slab) Str(v string) any {
	if s == nil {
		return v
	}
	if len(s.strs) == cap(s.strs) {
		s.strs = s.kStrs.get(s.reuse, slabValues, slabValues)
	}
	s.strs = append(s.strs, v)
	return box(typeString, unsafe.Pointer(&s.strs[len(s.strs)-1]))
}

// SlabFunc is a decoder that puts its value in a slab.
type SlabFunc func(b []byte, s *Slab) (any, error)

func slabInt(read func([]byte) (int64, error)) SlabFunc {
	return func(b []byte, s *Slab) (any, error) {
		v, err := read(b)
		if err != nil {
			return nil, err
		}
		return s.int64(v), nil
	}
}

func slabFloat8(b []byte, s *Slab) (any, error) {
	v, err := checkedFloat8(b)
	if err != nil {
		return nil, err
	}
	return s.float64(v), nil
}

func slabDate(b []byte, s *Slab) (any, error) {
	v, err := readDate(b)
	if err != nil {
		return nil, err
	}
	return s.int32(v), nil
}

func slabString(b []byte, s *Slab) (any, error) { return s.string(b), nil }

// slabVersioned is decodeVersioned (jsonb, jsonpath) into the slab: the
// benchmark table's jsonb column was a row's last two allocations of the
// load (its text, and the string boxed).
func slabVersioned(b []byte, s *Slab) (any, error) {
	if len(b) < 1 || b[0] != 1 {
		return decodeVersioned(b) // its error
	}
	return s.string(b[1:]), nil
}

func slabNumeric(b []byte, s *Slab) (any, error) { return s.numeric(b) }
