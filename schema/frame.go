package schema

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Confluent wire framing: byte 0 is the magic 0, bytes 1..4 the schema id
// (big-endian uint32), then the Avro binary body. Frozen: every Kafka
// consumer with a schema-registry deserializer reads exactly this.
//
//	+-------+----------------+--------------------+
//	| 0x00  | schema id (4B) | Avro binary ...    |
//	+-------+----------------+--------------------+
const (
	frameMagic  = 0
	frameHeader = 5
)

// ErrBadFrame reports bytes that are not Confluent-framed.
var ErrBadFrame = errors.New("schema: not a Confluent-framed record")

// AppendFrame appends the framing header for id to dst; append the Avro body
// after it.
func AppendFrame(dst []byte, id uint32) []byte {
	dst = append(dst, frameMagic)
	return binary.BigEndian.AppendUint32(dst, id)
}

// ParseFrame splits a framed record into its schema id and Avro body.
func ParseFrame(buf []byte) (id uint32, body []byte, err error) {
	if len(buf) < frameHeader {
		return 0, nil, fmt.Errorf("%w: %d bytes", ErrBadFrame, len(buf))
	}
	if buf[0] != frameMagic {
		return 0, nil, fmt.Errorf("%w: magic byte %d", ErrBadFrame, buf[0])
	}
	return binary.BigEndian.Uint32(buf[1:]), buf[frameHeader:], nil
}
