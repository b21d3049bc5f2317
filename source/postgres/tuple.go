package postgres

import (
	"encoding/binary"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// rowMessage is a pgoutput Insert, Update or Delete (protocol 2), parsed
// by parseRowMessage. pglogrepl's parser allocates a struct and a copy
// per column and copies the values byte by byte; this one slices its
// columns out of the message itself into reused slices. The columns alias
// the message (the connection's buffer, which the next receive overwrites,
// or a spill file's replay buffer): they are valid until the message's
// change is decoded, and a decoded value never aliases its bytes (every
// pgdecode decoder copies what it keeps: TestDecodersOwnTheirValues). The
// message used to be copied first, one allocation of its size a change.
type rowMessage struct {
	op  byte   // 'I', 'U' or 'D'
	xid uint32 // inside a stream block only
	rel uint32
	// oldKind is 'K' (the key), 'O' (the whole old row, REPLICA IDENTITY
	// FULL) or 0 when the message carries no old tuple.
	oldKind  byte
	old, new []tupleColumn
	hasOld   bool
	hasNew   bool
}

// tupleColumn is one column of a TupleData.
type tupleColumn struct {
	kind byte // pglogrepl.TupleDataType{Null,Toast,Text,Binary}
	data []byte
}

// isRowMessage reports whether a pgoutput message is one parseRowMessage
// reads.
func isRowMessage(data []byte) bool {
	if len(data) == 0 {
		return false
	}
	switch pglogrepl.MessageType(data[0]) {
	case pglogrepl.MessageTypeInsert, pglogrepl.MessageTypeUpdate, pglogrepl.MessageTypeDelete:
		return true
	}
	return false
}

// parseRowMessage reads an Insert, Update or Delete message into m;
// streamed says the message comes from a stream block (it then carries the
// transaction id after its type).
//
//	Insert: 'I' [xid u32] rel u32 'N' TupleData
//	Update: 'U' [xid u32] rel u32 ['K'|'O' TupleData] 'N' TupleData
//	Delete: 'D' [xid u32] rel u32 ('K'|'O') TupleData
//	TupleData: n u16, n × (kind u8 ['t'|'b': len u32, len bytes])
func parseRowMessage(data []byte, streamed bool, m *rowMessage) error {
	if len(data) == 0 {
		return fmt.Errorf("postgres: empty pgoutput message")
	}
	m.op, m.xid, m.oldKind, m.hasOld, m.hasNew = data[0], 0, 0, false, false
	m.old, m.new = m.old[:0], m.new[:0]
	b := data[1:] // the columns alias the message
	var err error
	if streamed {
		if m.xid, b, err = readUint32(b); err != nil {
			return rowMessageError(m.op, err)
		}
	}
	if m.rel, b, err = readUint32(b); err != nil {
		return rowMessageError(m.op, err)
	}
	if len(b) == 0 {
		return rowMessageError(m.op, errShortMessage)
	}
	tag := b[0]
	b = b[1:]
	switch {
	case m.op == 'I' && tag == 'N':
	case m.op == 'U' && tag == 'N':
	case (m.op == 'U' || m.op == 'D') && (tag == 'K' || tag == 'O'):
		m.oldKind, m.hasOld = tag, true
		if m.old, b, err = parseTupleData(b, m.old); err != nil {
			return rowMessageError(m.op, err)
		}
		if m.op == 'D' {
			return trailing(m.op, b)
		}
		if len(b) == 0 || b[0] != 'N' {
			return rowMessageError(m.op, fmt.Errorf("no new tuple after the old one"))
		}
		b = b[1:]
	default:
		return rowMessageError(m.op, fmt.Errorf("unexpected tuple tag %q", tag))
	}
	m.hasNew = true
	if m.new, b, err = parseTupleData(b, m.new); err != nil {
		return rowMessageError(m.op, err)
	}
	return trailing(m.op, b)
}

var errShortMessage = fmt.Errorf("message ends early")

func rowMessageError(op byte, err error) error {
	return fmt.Errorf("postgres: pgoutput message %q: %w", op, err)
}

func trailing(op byte, b []byte) error {
	if len(b) != 0 {
		return rowMessageError(op, fmt.Errorf("%d bytes after the tuple", len(b)))
	}
	return nil
}

func readUint32(b []byte) (uint32, []byte, error) {
	if len(b) < 4 {
		return 0, b, errShortMessage
	}
	return binary.BigEndian.Uint32(b), b[4:], nil
}

// parseTupleData appends the columns of the TupleData at the start of b to
// cols and returns the bytes after it.
func parseTupleData(b []byte, cols []tupleColumn) ([]tupleColumn, []byte, error) {
	if len(b) < 2 {
		return cols, b, errShortMessage
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	for i := 0; i < n; i++ {
		if len(b) < 1 {
			return cols, b, errShortMessage
		}
		kind := b[0]
		b = b[1:]
		switch kind {
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast:
			cols = append(cols, tupleColumn{kind: kind})
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			if len(b) < 4 {
				return cols, b, errShortMessage
			}
			l := binary.BigEndian.Uint32(b)
			b = b[4:]
			if uint64(l) > uint64(len(b)) {
				return cols, b, fmt.Errorf("column %d: %d bytes of value, %d left in the message", i, l, len(b))
			}
			cols = append(cols, tupleColumn{kind: kind, data: b[:l:l]})
			b = b[l:]
		default:
			return cols, b, fmt.Errorf("column %d: unknown tuple data type %q", i, kind)
		}
	}
	return cols, b, nil
}
