package log

import (
	"errors"
	"fmt"
	"time"
)

// SyncPolicy says when appended batches are fsynced.
type SyncPolicy int

const (
	// SyncBatch (the default, and cdcd's CDC default) fsyncs every group
	// commit before Produce returns and before Fetch can see the records: an
	// acknowledged record survives a power loss.
	SyncBatch SyncPolicy = iota
	// SyncInterval writes each group commit to the file and returns at once,
	// fsyncing every Options.SyncInterval. Weaker: records acknowledged (and
	// fetched) in the last interval are lost if the machine (not just the
	// process) crashes, and their offsets are then given to new records, so
	// a consumer that stored offsets elsewhere may skip those. Opt-in, for
	// data that can be re-read from the source and consumers that do not
	// keep offsets outside the log.
	SyncInterval
)

func (p SyncPolicy) String() string {
	switch p {
	case SyncBatch:
		return "batch"
	case SyncInterval:
		return "interval"
	}
	return fmt.Sprintf("SyncPolicy(%d)", int(p))
}

// Options configures the embedded log. The zero value gives the defaults.
type Options struct {
	// SegmentBytes is the size at which a partition's active segment is
	// closed and a new one started. Default 128 MiB; 1 KiB to 1 GiB.
	SegmentBytes int64
	// SegmentMaxAge closes an active segment at the next append once its
	// first record is older than this (so time retention can delete it).
	// Default 24h.
	SegmentMaxAge time.Duration
	// IndexIntervalBytes is the distance in bytes between entries of the
	// sparse offset and time indexes. Default 4 KiB.
	IndexIntervalBytes int
	// Sync is the fsync policy; default SyncBatch.
	Sync SyncPolicy
	// SyncInterval is the fsync period under SyncInterval; default 1s.
	SyncInterval time.Duration
	// CleanupInterval is how often retention and compaction run in the
	// background. Default 1m; negative disables the background cleaner
	// (Cleanup can still be called).
	CleanupInterval time.Duration
	// FS is the file system the log is stored in; default OSFS. Tests put
	// a crash-simulating or error-injecting one here.
	FS FS
	// ReadOnly opens the directory without taking its lock, for tools that
	// inspect a log while the daemon runs. It sees the durable data present
	// at Open (it fsyncs the tail it reads, so nothing it shows can vanish
	// in a crash), never truncates, and every write returns ErrReadOnly.
	ReadOnly bool
	// Compression is how Produce stores the records of the batches it
	// builds; default CompressionS2 (a batch whose records compress by
	// less than a tenth, or take under 1 KiB, is stored as it is).
	// Readers read every batch whatever this says. A log that has written
	// compressed batches cannot be read by a cdcd older than this setting
	// (see "Compressed batches" in the package doc).
	Compression Compression

	// now is the clock (tests replace it); nil means time.Now.
	now func() time.Time
}

func (o *Options) setDefaults() {
	if o.SegmentBytes == 0 {
		o.SegmentBytes = 128 << 20
	}
	if o.SegmentMaxAge == 0 {
		o.SegmentMaxAge = 24 * time.Hour
	}
	if o.IndexIntervalBytes == 0 {
		o.IndexIntervalBytes = 4 << 10
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = time.Second
	}
	if o.CleanupInterval == 0 {
		o.CleanupInterval = time.Minute
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.FS == nil {
		o.FS = OSFS
	}
}

// Validate rejects out-of-range settings; call it after defaults apply
// (Open does both).
func (o *Options) Validate() error {
	var errs []error
	if o.SegmentBytes < 1<<10 || o.SegmentBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("log: SegmentBytes %d outside [1 KiB, 1 GiB]", o.SegmentBytes))
	}
	if o.SegmentMaxAge < 0 {
		errs = append(errs, fmt.Errorf("log: SegmentMaxAge %v is negative", o.SegmentMaxAge))
	}
	if o.IndexIntervalBytes < 0 {
		errs = append(errs, fmt.Errorf("log: IndexIntervalBytes %d is negative", o.IndexIntervalBytes))
	}
	if o.Sync != SyncBatch && o.Sync != SyncInterval {
		errs = append(errs, fmt.Errorf("log: unknown sync policy %v", o.Sync))
	}
	if o.SyncInterval < 0 {
		errs = append(errs, fmt.Errorf("log: SyncInterval %v is negative", o.SyncInterval))
	}
	if o.Compression != CompressionS2 && o.Compression != CompressionNone {
		errs = append(errs, fmt.Errorf("log: unknown compression %v", o.Compression))
	}
	return errors.Join(errs...)
}

// String describes the options for logs.
func (o Options) String() string {
	return fmt.Sprintf("segment_bytes=%d segment_max_age=%v index_interval=%d sync=%v sync_interval=%v cleanup_interval=%v read_only=%v compression=%v",
		o.SegmentBytes, o.SegmentMaxAge, o.IndexIntervalBytes, o.Sync, o.SyncInterval, o.CleanupInterval, o.ReadOnly, o.Compression)
}
