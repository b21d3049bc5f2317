package source

import (
	"fmt"

	"github.com/cdcd-dev/cdcd/schema"
)

// MaxChangeBytes is the most row data (Change.Bytes) one change may carry,
// 63 MiB: a change is one record of the log, at most 64 MiB
// (log.MaxRecordBytes) with its key, envelope fields and headers. A reader
// refuses a single value larger than this before copying it (a
// TooLargeError); the Emitter refuses a larger change (the daemon checks
// the limit against the log's).
const MaxChangeBytes = 63 << 20

// TooLargeError is a value larger than MaxChangeBytes.
type TooLargeError struct{ Bytes int }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("a value of %d bytes is more than a change can be in cdcd's log (%d bytes)", e.Bytes, MaxChangeBytes)
}

// BatchBytes bounds the row data of one batch a reader hands its Emitter
// (besides its count of changes): a batch of large values is cut early, so
// a reader, the Emitter's encoding and the log's append each hold a few
// such batches at a time, not thousands of large rows.
const BatchBytes = 16 << 20

// Bytes is no less than the bytes c's rows take in the log's Avro
// envelope: what bounds batches and, in the Emitter, a change's size.
func (c *Change) Bytes() int {
	n := RowBytes(c.Before) + RowBytes(c.After)
	if c.Message != nil {
		n += len(c.Message.Content)
	}
	return n
}

// RowBytes is no less than the bytes row's values take in Avro. It runs
// for every change: only the kinds that can be large are told apart.
func RowBytes(row []any) int {
	n := 0
	for _, v := range row {
		switch v := v.(type) {
		case string:
			n += 11 + len(v)
		case []byte:
			n += 11 + len(v)
		case []any:
			n += ValueBytes(v)
		default:
			n += 64 // a scalar: at most 48 bytes (a uuid)
		}
	}
	return n
}

// ValueBytes is no less than the bytes v takes in Avro with its union
// branch: a length or a long takes at most 10 bytes, a decimal's bytes
// fewer than its text, a uuid is 36 characters.
func ValueBytes(v any) int {
	switch v := v.(type) {
	case string:
		return 11 + len(v)
	case []byte:
		return 11 + len(v)
	case []any:
		n := 21 // the block count and the end
		for _, e := range v {
			n += ValueBytes(e)
		}
		return n
	case nil, bool:
		return 2
	case int64, int32:
		return 11
	case float32, float64:
		return 9
	case [16]byte:
		return 48
	case schema.IntervalValue:
		return 31
	}
	return 64
}
