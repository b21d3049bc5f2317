package postgres

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// COPY ... TO STDOUT (FORMAT binary) stream layout:
//
//	header:  "PGCOPY\n\377\r\n\000" | flags int32 | extension length int32 | extension
//	tuple:   field count int16 | per field: length int32 (-1 = NULL) | bytes
//	trailer: field count -1
var copySignature = []byte("PGCOPY\n\377\r\n\x00")

// copyReader reads tuples of a binary COPY stream.
type copyReader struct {
	r      *bufio.Reader
	fields [][]byte // reused per tuple; nil entries are NULL
	buf    []byte
}

func newCopyReader(r io.Reader) (*copyReader, error) {
	cr := &copyReader{r: bufio.NewReaderSize(r, 256<<10)}
	var hdr [19]byte
	if _, err := io.ReadFull(cr.r, hdr[:]); err != nil {
		return nil, fmt.Errorf("postgres: copy header: %w", err)
	}
	if !bytes.Equal(hdr[:11], copySignature) {
		return nil, errors.New("postgres: copy stream lacks the PGCOPY signature")
	}
	ext := binary.BigEndian.Uint32(hdr[15:])
	if _, err := cr.r.Discard(int(ext)); err != nil {
		return nil, fmt.Errorf("postgres: copy header extension: %w", err)
	}
	return cr, nil
}

// next returns the fields of the next tuple, or io.EOF after the trailer.
// The slices are valid until the next call.
func (cr *copyReader) next() ([][]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(cr.r, n[:2]); err != nil {
		return nil, fmt.Errorf("postgres: copy tuple: %w", err)
	}
	count := int16(binary.BigEndian.Uint16(n[:2]))
	if count == -1 {
		return nil, io.EOF
	}
	if count < 0 {
		return nil, fmt.Errorf("postgres: copy tuple has %d fields", count)
	}
	cr.fields = cr.fields[:0]
	cr.buf = cr.buf[:0]
	lens := make([]int32, count)
	for i := range lens {
		if _, err := io.ReadFull(cr.r, n[:]); err != nil {
			return nil, fmt.Errorf("postgres: copy field: %w", err)
		}
		l := int32(binary.BigEndian.Uint32(n[:]))
		lens[i] = l
		if l < -1 {
			return nil, fmt.Errorf("postgres: copy field length %d", l)
		}
		if l > 0 {
			start := len(cr.buf)
			cr.buf = append(cr.buf, make([]byte, l)...)
			if _, err := io.ReadFull(cr.r, cr.buf[start:]); err != nil {
				return nil, fmt.Errorf("postgres: copy field: %w", err)
			}
		}
	}
	off := 0
	for _, l := range lens {
		switch {
		case l < 0:
			cr.fields = append(cr.fields, nil)
		case l == 0:
			cr.fields = append(cr.fields, []byte{}) // empty, not NULL
		default:
			cr.fields = append(cr.fields, cr.buf[off:off+int(l):off+int(l)])
			off += int(l)
		}
	}
	return cr.fields, nil
}
