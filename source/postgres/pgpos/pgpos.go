// Package pgpos is PostgreSQL's layout of a source.Position. It is a leaf
// package so that code which only builds or reads positions (tests of the
// emitter, the outbox relay) need not import the PostgreSQL reader.
package pgpos

import (
	"encoding/binary"
	"fmt"

	"github.com/cdcd-dev/cdcd/source"
)

// New is the position of the idx-th change (from 0) of the transaction
// whose commit record starts at commitLSN: 8 bytes big-endian commitLSN,
// then 4 bytes big-endian idx. The commit LSN is what PostgreSQL is told is
// flushed once the transaction is durable, so the slot's
// confirmed_flush_lsn compares directly with the first 8 bytes.
//
// Rows of the initial load extend the layout: (consistent point − 1, chunk
// sequence) followed by the row's key, encoded so that bytes sort as the
// chunk is read (see package source/postgres). They sort before every
// streamed change. Frozen layout: positions are stored in the log.
func New(commitLSN uint64, idx uint32) source.Position {
	return Append(make(source.Position, 0, Len), commitLSN, idx)
}

// Len is the length of a streamed change's position.
const Len = 12

// Append appends the position New(commitLSN, idx) to b.
func Append(b []byte, commitLSN uint64, idx uint32) []byte {
	b = binary.BigEndian.AppendUint64(b, commitLSN)
	return binary.BigEndian.AppendUint32(b, idx)
}

// Parse splits a PostgreSQL position (a load row's key suffix is ignored).
func Parse(p source.Position) (commitLSN uint64, idx uint32, err error) {
	if len(p) < 12 {
		return 0, 0, fmt.Errorf("source: postgres position has %d bytes, want 12 or more", len(p))
	}
	return binary.BigEndian.Uint64(p), binary.BigEndian.Uint32(p[8:]), nil
}
