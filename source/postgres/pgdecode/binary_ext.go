package pgdecode

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/cdcd-dev/cdcd/schema"
)

// Decoders of the binary forms of PostgreSQL's structured types: geometry,
// text search vectors, arrays, ranges, composites and hstore. The types
// with no counterpart in Avro or Iceberg become their canonical text (what
// the type's output function prints) or JSON; see docs/types.md.

// appendPoint writes "(x,y)" from 16 bytes.
func appendPoint(b []byte, p []byte) []byte {
	b = append(b, '(')
	b = append(b, formatFloat(readFloat8(p), 64)...)
	b = append(b, ',')
	b = append(b, formatFloat(readFloat8(p[8:]), 64)...)
	return append(b, ')')
}

// appendPoints writes n points from p, comma separated.
func appendPoints(b []byte, p []byte, n int) []byte {
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendPoint(b, p[16*i:])
	}
	return b
}

func decodePoint(b []byte) (any, error) {
	if err := fixed(16, b); err != nil {
		return nil, err
	}
	return string(appendPoint(nil, b)), nil
}

// decodeLine renders a line {A,B,C} (Ax + By + C = 0).
func decodeLine(b []byte) (any, error) {
	if err := fixed(24, b); err != nil {
		return nil, err
	}
	return "{" + formatFloat(readFloat8(b), 64) + "," + formatFloat(readFloat8(b[8:]), 64) + "," +
		formatFloat(readFloat8(b[16:]), 64) + "}", nil
}

func decodeLseg(b []byte) (any, error) {
	if err := fixed(32, b); err != nil {
		return nil, err
	}
	return string(append(appendPoints([]byte{'['}, b, 2), ']')), nil
}

// decodeBox renders "(high),(low)" as box_out does.
func decodeBox(b []byte) (any, error) {
	if err := fixed(32, b); err != nil {
		return nil, err
	}
	return string(appendPoints(nil, b, 2)), nil
}

// decodePath renders a closed path "((..),(..))" or an open one "[(..)]".
//
//	closed byte | npts int32 | points
func decodePath(b []byte) (any, error) {
	if len(b) < 5 {
		return nil, lengthError(">= 5", len(b))
	}
	n := int(int32(binary.BigEndian.Uint32(b[1:])))
	if n < 0 || len(b) != 5+16*n {
		return nil, fmt.Errorf("%w: path of %d points in %d bytes", ErrBadValue, n, len(b))
	}
	open, close := byte('['), byte(']')
	if b[0] != 0 {
		open, close = '(', ')'
	}
	return string(append(appendPoints([]byte{open}, b[5:], n), close)), nil
}

// decodePolygon renders "((..),(..))".
//
//	npts int32 | points
func decodePolygon(b []byte) (any, error) {
	if len(b) < 4 {
		return nil, lengthError(">= 4", len(b))
	}
	n := int(int32(binary.BigEndian.Uint32(b)))
	if n < 0 || len(b) != 4+16*n {
		return nil, fmt.Errorf("%w: polygon of %d points in %d bytes", ErrBadValue, n, len(b))
	}
	return string(append(appendPoints([]byte{'('}, b[4:], n), ')')), nil
}

// decodeCircle renders "<(x,y),r>".
func decodeCircle(b []byte) (any, error) {
	if err := fixed(24, b); err != nil {
		return nil, err
	}
	out := appendPoint([]byte{'<'}, b)
	out = append(out, ',')
	out = append(out, formatFloat(readFloat8(b[16:]), 64)...)
	return string(append(out, '>')), nil
}

// cursor reads length-checked fields; the first error sticks.
type cursor struct {
	b   []byte
	err error
}

func (c *cursor) need(n int) bool {
	if c.err == nil && (n < 0 || len(c.b) < n) {
		c.err = fmt.Errorf("%w: %d bytes left, need %d", ErrBadValue, len(c.b), n)
	}
	return c.err == nil
}

func (c *cursor) int32() int32 {
	if !c.need(4) {
		return 0
	}
	v := int32(binary.BigEndian.Uint32(c.b))
	c.b = c.b[4:]
	return v
}

func (c *cursor) uint16() uint16 {
	if !c.need(2) {
		return 0
	}
	v := binary.BigEndian.Uint16(c.b)
	c.b = c.b[2:]
	return v
}

func (c *cursor) byte() byte {
	if !c.need(1) {
		return 0
	}
	v := c.b[0]
	c.b = c.b[1:]
	return v
}

func (c *cursor) bytes(n int) []byte {
	if !c.need(n) {
		return nil
	}
	v := c.b[:n:n]
	c.b = c.b[n:]
	return v
}

// field reads a length-prefixed value; nil, false for NULL (-1).
func (c *cursor) field() ([]byte, bool) {
	n := c.int32()
	if n == -1 || c.err != nil {
		return nil, false
	}
	return c.bytes(int(n)), c.err == nil
}

func (c *cursor) done() error {
	if c.err == nil && len(c.b) != 0 {
		c.err = fmt.Errorf("%w: %d trailing bytes", ErrBadValue, len(c.b))
	}
	return c.err
}

// decodeTSVector renders a tsvector as tsvectorout does: 'lexeme':1A,2
// with quotes and backslashes doubled.
//
//	count int32 | per lexeme: text, 0 byte | npos uint16 | npos × uint16 (weight<<14 | pos)
func decodeTSVector(b []byte) (any, error) {
	c := cursor{b: b}
	n := int(c.int32())
	var out []byte
	for i := 0; i < n && c.err == nil; i++ {
		end := bytes.IndexByte(c.b, 0)
		if end < 0 {
			return nil, fmt.Errorf("%w: tsvector lexeme not terminated", ErrBadValue)
		}
		if i > 0 {
			out = append(out, ' ')
		}
		out = append(out, '\'')
		for _, ch := range c.bytes(end) {
			if ch == '\'' || ch == '\\' {
				out = append(out, ch)
			}
			out = append(out, ch)
		}
		out = append(out, '\'')
		c.byte()
		npos := int(c.uint16())
		for j := 0; j < npos && c.err == nil; j++ {
			if j == 0 {
				out = append(out, ':')
			} else {
				out = append(out, ',')
			}
			p := c.uint16()
			out = strconv.AppendInt(out, int64(p&0x3fff), 10)
			if w := p >> 14; w > 0 {
				out = append(out, "DCBA"[w])
			}
		}
	}
	if err := c.done(); err != nil {
		return nil, err
	}
	return string(out), nil
}

// decodeHstore renders an hstore as hstore_to_json does:
// {"a": "1", "b": null}, pairs in the stored order.
//
//	count int32 | per pair: key length int32, key | value length int32 (-1 NULL), value
func decodeHstore(b []byte) (any, error) {
	c := cursor{b: b}
	n := int(c.int32())
	out := []byte{'{'}
	for i := 0; i < n && c.err == nil; i++ {
		if i > 0 {
			out = append(out, ", "...)
		}
		k, _ := c.field()
		out = appendJSONString(out, string(k))
		out = append(out, ": "...)
		if v, ok := c.field(); ok {
			out = appendJSONString(out, string(v))
		} else {
			out = append(out, "null"...)
		}
	}
	if err := c.done(); err != nil {
		return nil, err
	}
	return string(append(out, '}')), nil
}

// maxArrayDims is PostgreSQL's limit on array dimensions (MAXDIM).
const maxArrayDims = 6

// Array decodes array_send's format into nested lists of depth dims
// (the column's declared dimensions), elements decoded by elem.
//
//	ndim int32 | has nulls int32 | element type oid int32 | ndim × (length int32, lower bound int32) |
//	per element: length int32 (-1 NULL), value
//
// An empty array (ndim 0) is []any{}. A value with other dimensions than
// declared, or a lower bound other than 1, has no faithful list form: it is
// an error saying so, never a reshaped or renumbered list.
func Array(elem Func, dims int) Func {
	return func(b []byte) (any, error) {
		c := cursor{b: b}
		ndim := int(c.int32())
		c.int32() // has nulls
		c.int32() // element type
		if c.err != nil {
			return nil, c.err
		}
		if ndim == 0 {
			return []any{}, c.done()
		}
		if ndim < 0 || ndim > maxArrayDims {
			return nil, fmt.Errorf("%w: array of %d dimensions", ErrBadValue, ndim)
		}
		if ndim != dims {
			return nil, fmt.Errorf("%w: the array has %d dimensions but the column is declared with %d; declare it with %d "+
				"(ALTER TABLE ... ALTER COLUMN ... TYPE <type>%s) so cdcd can map it to nested lists",
				ErrArrayShape, ndim, dims, ndim, strings.Repeat("[]", ndim))
		}
		lens := make([]int, ndim)
		total := 1
		for i := range lens {
			lens[i] = int(c.int32())
			if lb := c.int32(); lb != 1 && c.err == nil {
				return nil, fmt.Errorf("%w: the array's dimension %d starts at index %d; lists start at 1, so cdcd cannot keep it exactly",
					ErrArrayShape, i+1, lb)
			}
			if lens[i] < 0 || total*max(lens[i], 1) > len(b) {
				return nil, fmt.Errorf("%w: array dimension of length %d in %d bytes", ErrBadValue, lens[i], len(b))
			}
			total *= lens[i]
		}
		v, err := readArrayLevel(&c, elem, lens)
		if err != nil {
			return nil, err
		}
		return v, c.done()
	}
}

func readArrayLevel(c *cursor, elem Func, lens []int) ([]any, error) {
	out := make([]any, lens[0])
	for i := range out {
		if len(lens) > 1 {
			sub, err := readArrayLevel(c, elem, lens[1:])
			if err != nil {
				return nil, err
			}
			out[i] = sub
			continue
		}
		f, ok := c.field()
		if c.err != nil {
			return nil, c.err
		}
		if !ok {
			continue
		}
		v, err := elem(f)
		if err != nil {
			return nil, fmt.Errorf("array element %d: %w", i+1, err)
		}
		out[i] = v
	}
	return out, nil
}

// Range flags of the binary form (rangetypes.h).
const (
	rangeEmpty  = 0x01
	rangeLBInc  = 0x02
	rangeUBInc  = 0x04
	rangeLBInf  = 0x08
	rangeUBInf  = 0x10
	rangeLBNull = 0x20
	rangeUBNull = 0x40
)

// Range renders a range as range_out does ("[1,10)", "empty",
// "(,5]"), its bounds printed by TextOf for the subtype sub.
//
//	flags byte | lower: length int32, value (if present) | upper: likewise
func Range(sub *Type) Func {
	return func(b []byte) (any, error) {
		c := cursor{b: b}
		out, err := appendRange(nil, &c, sub)
		if err != nil {
			return nil, err
		}
		return string(out), c.done()
	}
}

func appendRange(out []byte, c *cursor, sub *Type) ([]byte, error) {
	flags := c.byte()
	if c.err != nil {
		return nil, c.err
	}
	if flags&rangeEmpty != 0 {
		return append(out, "empty"...), nil
	}
	bound := func(present bool) error {
		if !present {
			return nil
		}
		f, ok := c.field()
		if !ok {
			return fmt.Errorf("%w: range bound missing", ErrBadValue)
		}
		v, err := sub.Decode(f)
		if err != nil {
			return err
		}
		out = appendRangeBound(out, TextOf(sub.Col, v))
		return nil
	}
	if flags&rangeLBInc != 0 {
		out = append(out, '[')
	} else {
		out = append(out, '(')
	}
	if err := bound(flags&(rangeLBInf|rangeLBNull) == 0); err != nil {
		return nil, err
	}
	out = append(out, ',')
	if err := bound(flags&(rangeUBInf|rangeUBNull) == 0); err != nil {
		return nil, err
	}
	if flags&rangeUBInc != 0 {
		out = append(out, ']')
	} else {
		out = append(out, ')')
	}
	return out, nil
}

// Multirange renders a multirange as multirange_out does:
// "{[1,3),[5,7)}".
//
//	count int32 | per range: length int32, range
func Multirange(sub *Type) Func {
	return func(b []byte) (any, error) {
		c := cursor{b: b}
		n := int(c.int32())
		out := []byte{'{'}
		for i := 0; i < n && c.err == nil; i++ {
			if i > 0 {
				out = append(out, ',')
			}
			f, ok := c.field()
			if !ok {
				return nil, fmt.Errorf("%w: multirange member missing", ErrBadValue)
			}
			rc := cursor{b: f}
			var err error
			if out, err = appendRange(out, &rc, sub); err != nil {
				return nil, err
			}
			if err := rc.done(); err != nil {
				return nil, err
			}
		}
		if err := c.done(); err != nil {
			return nil, err
		}
		return string(append(out, '}')), nil
	}
}

// Attr is one attribute of a composite type.
type Attr struct {
	Name string
	Type *Type
}

// Composite renders a composite value as to_json does:
// {"a":1,"b":"x"}.
//
//	attribute count int32 | per attribute: type oid int32, length int32 (-1 NULL), value
func Composite(attrs []Attr) Func {
	return func(b []byte) (any, error) {
		c := cursor{b: b}
		n := int(c.int32())
		if c.err == nil && n != len(attrs) {
			return nil, fmt.Errorf("%w: composite value has %d attributes, the type %d", ErrBadValue, n, len(attrs))
		}
		out := []byte{'{'}
		for i := 0; i < n && c.err == nil; i++ {
			a := attrs[i]
			if i > 0 {
				out = append(out, ',')
			}
			out = appendJSONString(out, a.Name)
			out = append(out, ':')
			c.int32() // type oid
			f, ok := c.field()
			if !ok {
				out = append(out, "null"...)
				continue
			}
			v, err := a.Type.Decode(f)
			if err != nil {
				return nil, fmt.Errorf("attribute %q: %w", a.Name, err)
			}
			out = AppendJSON(out, a.Type.Col, v)
		}
		if err := c.done(); err != nil {
			return nil, err
		}
		return string(append(out, '}')), nil
	}
}

// ListColumn returns the element column of a list of depth dims over elem.
func ListColumn(elem schema.Column, dims int) schema.Column {
	e := elem
	e.Name, e.Nullable, e.SourceType = "", true, ""
	col := schema.Column{Kind: schema.List, Elem: &e}
	for i := 1; i < dims; i++ {
		inner := col
		col = schema.Column{Kind: schema.List, Elem: &inner}
	}
	return col
}
