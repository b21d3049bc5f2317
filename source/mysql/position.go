package mysql

import (
	"encoding/binary"
	"fmt"

	"github.com/cdcd-dev/cdcd/source"
)

// PositionLen is the length of a streamed change's position.
const PositionLen = 12

// Position is the position of the idx-th change (from 0) of the transaction
// with ordinal ord: 8 bytes big-endian ord, then 4 bytes big-endian idx
// (frozen layout). See the package doc for what an ordinal is.
func Position(ord uint64, idx uint32) source.Position {
	p := make(source.Position, PositionLen)
	binary.BigEndian.PutUint64(p, ord)
	binary.BigEndian.PutUint32(p[8:], idx)
	return p
}

// ParsePosition splits a MySQL position; bytes past the first 12 (a
// snapshot row's suffix) are ignored.
func ParsePosition(p source.Position) (ord uint64, idx uint32, err error) {
	if len(p) < PositionLen {
		return 0, 0, fmt.Errorf("mysql: position has %d bytes, want %d or more", len(p), PositionLen)
	}
	return binary.BigEndian.Uint64(p), binary.BigEndian.Uint32(p[8:]), nil
}
