package reconcile

import (
	"cmp"
	"encoding/hex"
	"math/big"
	"strconv"
	"strings"
)

// Key is a primary key: each key column's canonical text, in key order.
// A nil Key bounds a range that is open on that side.
type Key []string

// id is the key's identity: its texts joined (text values carry their
// length, so the join is unambiguous).
func (k Key) id() string { return strings.Join(k, ",") }

// keyOf reads a row's key (canonical texts of every compared column).
func (t *Table) keyOf(texts []string) Key {
	k := make(Key, len(t.Key))
	for i, ci := range t.Key {
		k[i] = texts[ci]
	}
	return k
}

// compareKeys orders keys as the database orders the key when t.Ordered;
// otherwise it is a consistent order of cdcd's own.
func (t *Table) compareKeys(a, b Key) int {
	for i, ci := range t.Key {
		if c := compareCanon(t.Columns[ci].Canon, a[i], b[i]); c != 0 {
			return c
		}
	}
	return 0
}

// compareCanon orders two canonical texts of one kind.
func compareCanon(k canonKind, a, b string) int {
	switch k {
	case cInt:
		x, err1 := strconv.ParseInt(a, 10, 64)
		y, err2 := strconv.ParseInt(b, 10, 64)
		if err1 == nil && err2 == nil {
			return cmp.Compare(x, y)
		}
	case cDecimal:
		x, ok1 := new(big.Rat).SetString(a)
		y, ok2 := new(big.Rat).SetString(b)
		if ok1 && ok2 {
			return x.Cmp(y)
		}
	case cText:
		return strings.Compare(textOf(a), textOf(b))
	case cDate, cTime, cTimestamp:
		x, ok1 := signedHex(a)
		y, ok2 := signedHex(b)
		if ok1 && ok2 {
			return cmp.Compare(x, y)
		}
	}
	return strings.Compare(a, b) // bytes (hex), uuid, bool: byte order is the order
}

// textOf strips a text's length prefix.
func textOf(s string) string {
	if _, v, ok := strings.Cut(s, ":"); ok {
		return v
	}
	return s
}

// signedHex reads 8 or 16 hex digits as a big-endian two's complement
// integer.
func signedHex(s string) (int64, bool) {
	b, err := hex.DecodeString(s)
	if err != nil {
		return 0, false
	}
	switch len(b) {
	case 4:
		return int64(int32(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))), true
	case 8:
		var u uint64
		for _, x := range b {
			u = u<<8 | uint64(x)
		}
		return int64(u), true
	}
	return 0, false
}

// orderedCanon says whether cdcd orders a key column of kind k as the
// database does (text only under a byte-order collation: the caller
// checks that).
func orderedCanon(k canonKind) bool {
	switch k {
	case cInt, cDecimal, cText, cBytes, cUUID, cBool, cDate, cTime, cTimestamp:
		return true
	}
	return false
}
