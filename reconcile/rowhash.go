package reconcile

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/parquet-go/parquet-go"

	"github.com/cdcd-dev/cdcd/schema"
	icebergsink "github.com/cdcd-dev/cdcd/sink/iceberg"
)

// PostgreSQL's row hash, column by column. A row's canonical text
// (concat_ws over coalesced pieces, then hashtextextended) cost the
// server about 1.5 µs a row of the bench table; most of it went into
// rendering integers, booleans and floats as text and joining the pieces.
// Instead each column is hashed by itself, from its binary value where
// PostgreSQL has a hash that is exact for it, and the row hash mixes the
// columns' hashes:
//
//	row  = hashint4extended(0, H1 # H2 # … # Hn)
//	Hi   = coalesce(hash of column i's value with seed Si, Ni)
//
// Si and Ni are constants of the column's position (colSeed, colNull), so
// a value moved to another column, or a NULL moved, changes the row: each
// position hashes with its own seed. The XOR of the columns' hashes alone,
// summed over a block's rows, would miss a value swapped between two rows
// whenever the rows' other columns' hashes agree on the bits where the
// swapped values' hashes differ (about (3/4)^64, far above 2^-64);
// hashint4extended with the XOR as its seed (lookup3's mix and final)
// makes each row's hash a non-linear function of all its columns, and a
// block compares the sum of those.
//
// A column's value is hashed (colHash) by
//
//	hInt4    hashint4extended(v, S): smallint, integer
//	hInt8    hashint8extended(v, hashint4extended(v >> 32, S)): bigint.
//	         hashint8extended alone folds the high half into the low
//	         (0 and 4294967297 hash alike); the seed brings the high half
//	hBool    hashint4extended(v::int4, S)
//	hFloat8  hashfloat8extended(v, S), except 0 and NaN, which it folds
//	         (-0 and 0, every NaN payload): those hash their bits' text
//	         as hText does
//	hString  hashtextextended(v, S) of the text's bytes (text, varchar,
//	         json…: the canonical text without its length, which only
//	         kept a text from running into the next column)
//	hText    hashtextextended(canonical text, S): every other kind, as
//	         canon.go renders it
//
// and cdcd computes the same functions from the mirror's values (hashU32
// is PostgreSQL's hash_bytes_uint32_extended, pgHash its
// hash_bytes_extended). Each is exact for its type: two values of a
// column hash alike only when docs/types.md calls them equal, or when two
// 64-bit hashes collide. A value cdcd could not have read from the source
// (an integer out of the column's range in the mirror) hashes as a wider
// type, so it equals a source value's hash only by such a collision.

// colHash is how a column's value enters a PostgreSQL row hash.
type colHash uint8

const (
	hText colHash = iota
	hString
	hInt4
	hInt8
	hBool
	hFloat8
)

// colSeed is the seed of the column at position i; colNull its hash when
// NULL. Both are below 2^63, so they are bigint literals.
func colSeed(i int) uint64 { return (uint64(i) + 1) * 0x9e3779b97f4a7c15 >> 1 }
func colNull(i int) uint64 { return colSeed(i) * 0xbf58476d1ce4e5b9 >> 1 }

// pgHashKind picks how a column of PostgreSQL base type base, read back
// with canonical kind c.Canon, is hashed.
func pgHashKind(c *Column, base string) colHash {
	switch {
	case c.Canon == cInt && (base == "int2" || base == "int4"):
		return hInt4
	case c.Canon == cInt && base == "int8":
		return hInt8
	case c.Canon == cBool && base == "bool":
		return hBool
	case c.Canon == cFloat64 && base == "float8":
		return hFloat8
	case c.Canon == cText && c.Text != "":
		return hString
	}
	return hText
}

// pgColHash is the SQL of column i's hash (NULL when the value is).
func pgColHash(c *Column, i int) string {
	s := strconv.FormatUint(colSeed(i), 10)
	e := c.Expr
	switch c.Hash {
	case hInt4:
		return "hashint4extended(" + e + ", " + s + ")"
	case hInt8:
		return "hashint8extended(" + e + ", hashint4extended((" + e + " >> 32)::int4, " + s + "))"
	case hBool:
		return "hashint4extended((" + e + ")::int4, " + s + ")"
	case hFloat8:
		return "CASE WHEN " + e + " = 0 OR " + e + " = 'NaN' THEN hashtextextended(" + c.SQL + " COLLATE \"C\", " + s +
			") ELSE hashfloat8extended(" + e + ", " + s + ") END"
	case hString:
		return "hashtextextended((" + c.Text + ") COLLATE \"C\", " + s + ")"
	}
	return "hashtextextended((" + c.SQL + ") COLLATE \"C\", " + s + ")"
}

// pgRowHash is the SQL of a row's hash.
func pgRowHash(t *Table) string {
	parts := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		parts[i] = "coalesce(" + pgColHash(c, i) + ", " + strconv.FormatUint(colNull(i), 10) + ")"
	}
	return "hashint4extended(0, " + strings.Join(parts, " # ") + ")"
}

// rowHash mixes the XOR of a row's column hashes (hashint4extended(0, x)).
func rowHash(x uint64) uint64 { return hashU32(0, x) }

// hashU32 is PostgreSQL's hash_bytes_uint32_extended(k, seed), what
// hashint4extended returns (a bigint: the bits of the uint64).
func hashU32(k uint32, seed uint64) uint64 { return seeded(4, seed).u32(k) }

// fold is hashint8extended's key: the high half folded into the low.
func fold(v int64) uint32 {
	lo, hi := uint32(v), uint32(v>>32)
	if v >= 0 {
		return lo ^ hi
	}
	return lo ^ ^hi
}

// hashInt8 is hashint8extended(v, seed).
func hashInt8(v int64, seed uint64) uint64 { return hashU32(fold(v), seed) }

func boolBit(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// colHasher hashes the values of column i (at its position in the table)
// as pgColHash's SQL does. lookup3 mixes the seed into its state before
// the value, so the state after the seed is kept: once for a 4-byte key,
// for the last text length, and for the last bigint's high half (whose
// hash seeds hashint8extended). A row of the bench table costs two
// finals where it cost ten mixes and finals.
type colHasher struct {
	c    *Column
	i    int
	seed uint64
	u32  lookup // seeded(4, seed)
	// hi and hiState: the high half of the last bigint and
	// seeded(4, hashU32(hi, seed)); n and nState: the last text's length
	// and seeded(n, seed). Valid when the flags are set.
	hi, n           uint32
	hiOK, nOK       bool
	hiState, nState lookup
	buf             []byte // scratch for texts
}

func newColHasher(c *Column, i int) *colHasher {
	seed := colSeed(i)
	return &colHasher{c: c, i: i, seed: seed, u32: seeded(4, seed)}
}

// int is the hash of integer v in an hInt4 or hInt8 column. A value
// outside an int4 column's range (which the source cannot hold) hashes
// as an int8.
func (h *colHasher) int(v int64) uint64 {
	if h.c.Hash == hInt4 && v >= math.MinInt32 && v <= math.MaxInt32 {
		return h.u32.u32(uint32(int32(v)))
	}
	if hi := uint32(v >> 32); !h.hiOK || hi != h.hi {
		h.hi, h.hiOK, h.hiState = hi, true, seeded(4, h.u32.u32(hi))
	}
	return h.hiState.u32(fold(v))
}

// text is hashtextextended(k, seed).
func (h *colHasher) text(k []byte) uint64 {
	if n := uint32(len(k)); !h.nOK || n != h.n {
		h.n, h.nOK, h.nState = n, true, seeded(n, h.seed)
	}
	return h.nState.bytes(k)
}

// float8 is column hash hFloat8 of v: hashfloat8extended's (the value's 8
// bytes, little-endian), or for 0 and NaN the hash of its bits' text.
func (h *colHasher) float8(v float64) uint64 {
	bits := math.Float64bits(v)
	if v == 0 || math.IsNaN(v) {
		h.buf = appendHex64(h.buf[:0], bits)
	} else {
		h.buf = binary.LittleEndian.AppendUint64(h.buf[:0], bits)
	}
	return h.text(h.buf)
}

// value is the hash of v, in cdcd's Go representation (as appendCanon
// takes it).
func (h *colHasher) value(v any) (uint64, error) {
	if v == nil {
		return colNull(h.i), nil
	}
	switch h.c.Hash {
	case hInt4, hInt8:
		if n, ok := keyInt(v); ok {
			return h.int(n), nil
		}
	case hBool:
		if b, ok := v.(bool); ok {
			return h.u32.u32(boolBit(b)), nil
		}
	case hFloat8:
		switch f := v.(type) {
		case float64:
			return h.float8(f), nil
		case float32:
			return h.float8(float64(f)), nil
		}
	case hString:
		switch s := v.(type) {
		case string:
			h.buf = append(h.buf[:0], s...)
			return h.text(h.buf), nil
		case schema.IntervalValue: // as appendCanon renders it
			h.buf = append(h.buf[:0], s.String()...)
			return h.text(h.buf), nil
		}
	case hText:
		var err error
		if h.buf, err = appendCanon(h.buf[:0], h.c, v); err != nil {
			return 0, err
		}
		return h.text(h.buf), nil
	}
	return 0, fmt.Errorf("reconcile: column %q (%s): cannot compare a %T value", h.c.Name, h.c.Canon, v)
}

// raw is value for a value as the data file stores it (typ is the
// mirror's type of the column): the same hash, without boxing
// (TestRawHashMatchesBoxed).
func (h *colHasher) raw(typ iceberg.Type, v parquet.Value) (uint64, error) {
	if v.IsNull() {
		return colNull(h.i), nil
	}
	switch h.c.Hash {
	case hInt4, hInt8:
		switch v.Kind() {
		case parquet.Int32:
			return h.int(int64(v.Int32())), nil
		case parquet.Int64:
			return h.int(v.Int64()), nil
		}
	case hBool:
		if v.Kind() == parquet.Boolean {
			return h.u32.u32(boolBit(v.Boolean())), nil
		}
	case hFloat8:
		switch v.Kind() {
		case parquet.Double:
			return h.float8(v.Double()), nil
		case parquet.Float:
			return h.float8(float64(v.Float())), nil
		}
	case hString:
		if _, ok := typ.(iceberg.StringType); ok && v.Kind() == parquet.ByteArray {
			return h.text(v.ByteArray()), nil
		}
	case hText:
		var err error
		if h.buf, err = appendRaw(h.buf[:0], h.c, typ, v); err != nil {
			return 0, err
		}
		return h.text(h.buf), nil
	}
	// Anything else as Scan gives it (and value's error).
	return h.value(icebergsink.Value(typ, v))
}
