package pgdecode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// COPY ... TO STDOUT (FORMAT binary) stream layout:
//
//	header:  "PGCOPY\n\377\r\n\000" | flags int32 | extension length int32 | extension
//	tuple:   field count int16 | per field: length int32 (-1 = NULL) | bytes
//	trailer: field count -1
var copySignature = []byte("PGCOPY\n\377\r\n\x00")

const copyHeaderLen = 19

var (
	// errCopyIncomplete: the buffer ends inside the header or a tuple.
	errCopyIncomplete = errors.New("postgres: copy data incomplete")
	// errCopyFormat: the stream is not COPY binary.
	errCopyFormat = errors.New("postgres: malformed COPY binary data")
)

// parseCopyHeader returns the length of the header at the start of buf.
func parseCopyHeader(buf []byte) (int, error) {
	if len(buf) < copyHeaderLen {
		return 0, errCopyIncomplete
	}
	if !bytes.Equal(buf[:11], copySignature) {
		return 0, fmt.Errorf("%w: no PGCOPY signature", errCopyFormat)
	}
	ext := int(binary.BigEndian.Uint32(buf[15:]))
	if ext < 0 || ext > 1<<20 {
		return 0, fmt.Errorf("%w: header extension of %d bytes", errCopyFormat, ext)
	}
	if len(buf) < copyHeaderLen+ext {
		return 0, errCopyIncomplete
	}
	return copyHeaderLen + ext, nil
}

// parseCopyTuple parses the tuple at the start of buf into fields (reused;
// nil entries are NULL; slices alias buf) and returns its length. A
// trailer returns fields nil and n 2.
func parseCopyTuple(buf []byte, fields [][]byte) (_ [][]byte, n int, err error) {
	if len(buf) < 2 {
		return fields, 0, errCopyIncomplete
	}
	count := int(int16(binary.BigEndian.Uint16(buf)))
	if count == -1 {
		return nil, 2, nil
	}
	if count < 0 {
		return fields, 0, fmt.Errorf("%w: tuple of %d fields", errCopyFormat, count)
	}
	fields = fields[:0]
	off := 2
	for i := 0; i < count; i++ {
		if len(buf) < off+4 {
			return fields, 0, errCopyIncomplete
		}
		l := int(int32(binary.BigEndian.Uint32(buf[off:])))
		off += 4
		switch {
		case l == -1:
			fields = append(fields, nil)
		case l < 0:
			return fields, 0, fmt.Errorf("%w: field length %d", errCopyFormat, l)
		case len(buf) < off+l:
			return fields, 0, errCopyIncomplete
		default:
			fields = append(fields, buf[off:off+l:off+l]) // empty, not NULL, when l is 0
			off += l
		}
	}
	return fields, off, nil
}

// CopyParser is the io.Writer a binary COPY is written into: it calls Row
// for every tuple, in order, with fields valid only during the call.
type CopyParser struct {
	Row    func(fields [][]byte) error
	buf    []byte // an unparsed partial tuple
	fields [][]byte
	header bool // seen
	done   bool // trailer seen
}

// Write parses the tuples b completes and keeps a partial one for the next
// call; an error from Row or from malformed data ends the parse.
func (p *CopyParser) Write(b []byte) (int, error) {
	data := b
	if len(p.buf) > 0 {
		p.buf = append(p.buf, b...)
		data = p.buf
	}
	off, err := p.parse(data)
	rest := data[off:]
	if len(p.buf) > 0 {
		p.buf = p.buf[:copy(p.buf, rest)]
	} else {
		p.buf = append(p.buf, rest...)
	}
	if err != nil {
		return 0, err
	}
	return len(b), nil
}

// parse consumes whole items of data and returns how many bytes it used.
func (p *CopyParser) parse(data []byte) (int, error) {
	off := 0
	if !p.header {
		n, err := parseCopyHeader(data)
		if errors.Is(err, errCopyIncomplete) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		p.header, off = true, n
	}
	for off < len(data) {
		if p.done {
			return off, fmt.Errorf("%w: data after the trailer", errCopyFormat)
		}
		fields, n, err := parseCopyTuple(data[off:], p.fields)
		if errors.Is(err, errCopyIncomplete) {
			return off, nil
		}
		if err != nil {
			return off, err
		}
		off += n
		if fields == nil {
			p.done = true
			continue
		}
		p.fields = fields
		if err := p.Row(fields); err != nil {
			return off, err
		}
	}
	return off, nil
}

// Finish checks that the stream ended with its trailer.
func (p *CopyParser) Finish() error {
	if !p.done || len(p.buf) > 0 {
		return fmt.Errorf("%w: stream ended without its trailer", errCopyFormat)
	}
	return nil
}
