package log

import (
	"fmt"
	"strconv"
)

// LockError reports that another process holds the data directory.
type LockError struct {
	Dir string
	// PID is the holder's process id as written in the lock file; 0 if it
	// could not be read.
	PID int
}

func (e *LockError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("log: data directory %s is locked by %s (is a cdcd daemon running? stop it, or open read-only)", e.Dir, holder)
}

// Unwrap makes errors.Is(err, ErrLocked) true.
func (e *LockError) Unwrap() error { return ErrLocked }

// CorruptionError reports stored data that failed its checks.
type CorruptionError struct {
	Path   string // file
	Pos    int64  // byte position of the bad batch or entry
	Reason string // which check failed, e.g. "bad crc"
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("log: corrupt data in %s at byte %d: %s", e.Path, e.Pos, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptionError) Unwrap() error { return ErrCorrupt }

// WriteError reports that a partition could not write or sync its segment
// (a full disk, an I/O error). The partition rolls back to what it had
// synced and retries the appends waiting on it, with backoff, until a write
// and sync succeed; PartitionStats shows it failing meanwhile. Produce
// returns it only when the log closes before the retry succeeds.
type WriteError struct {
	Topic     string
	Partition int32
	Op        string // "write", "sync", "roll", "roll back"
	Err       error
}

func (e *WriteError) Error() string {
	return fmt.Sprintf("log: %s/%d: %s failed: %v (appends wait and are retried; free space on the disk or fix it)", e.Topic, e.Partition, e.Op, e.Err)
}

func (e *WriteError) Unwrap() error { return e.Err }

// DataLossError reports that a partition's offsets [From, To) were lost:
// recovery found them damaged and quarantined them. Records before From
// and from To on are intact. Whatever was built from this partition (a
// mirrored table) cannot be trusted past From until it is rebuilt from the
// source: the repair is a re-snapshot of that table.
type DataLossError struct {
	Topic     string
	Partition int32
	From, To  int64 // lost offsets [From, To)
	Reason    string
}

func (e *DataLossError) Error() string {
	return fmt.Sprintf("log: %s/%d: offsets [%d, %d) were lost (%s); "+
		"re-snapshot the table fed by this topic (cdcd snapshot -c FILE --replace TABLE)",
		e.Topic, e.Partition, e.From, e.To, e.Reason)
}

// Unwrap makes errors.Is(err, ErrDataLost) true.
func (e *DataLossError) Unwrap() error { return ErrDataLost }
