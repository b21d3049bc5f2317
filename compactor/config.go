package compactor

import "time"

// CompactionConfig configures the rewrite of a table's data files. The
// zero value of a field takes its default (WithDefaults), which is the
// config package's for the same key (sink.iceberg.compaction.*).
type CompactionConfig struct {
	// Disabled turns compaction (and the orphan sweep) off.
	Disabled bool
	// Interval between compaction plans of a table; default 1m.
	Interval time.Duration
	// TargetFileSize is the size toward which data files are written and
	// rewritten, in bytes; default 128 MiB (the sink passes its own).
	TargetFileSize int64
	// SmallFileRatio: files smaller than this share of the target file size
	// are small; default 0.75.
	SmallFileRatio float64
	// MinGroup is the fewest small files of one partition worth a rewrite;
	// default 5.
	MinGroup int
	// DeleteRatio: a file with at least this share of its rows deleted is
	// rewritten on its own; default 0.30.
	DeleteRatio float64
	// MaxBytes caps the input of one compaction; default 192 MiB (one and a
	// half times the default target, so two files under SmallFileRatio of
	// it fit in one compaction).
	MaxBytes int64
	// MaxRows caps the rows of one compaction's input and of each file it
	// writes; default 2,000,000. The rewrite holds every copied row's key
	// and new position until its commit (about 30 bytes a row with a
	// bigint key): narrow rows compress so well that a byte cap alone
	// would let one compaction take a large table whole.
	MaxRows int64
	// MergeMemory bounds the read buffers of one rewrite's merge. Every
	// input file is open at once (a k-way merge), each holding a page of
	// every column, compressed and decoded: about readBytesPerColumn a
	// column with the sink's 256 KiB pages. So a compaction merges at most
	// MergeMemory / (columns × readBytesPerColumn) files, and never fewer
	// than MinGroup; default 64 MiB. Without it a table committed every
	// second merged a hundred files at once and its daemon's RSS went
	// past 380 MB (BENCHMARKS.md, "The compactor's merge, bounded (lead,
	// session 22)").
	MergeMemory int64
	// OrphanAge is how old an unreferenced file must be before it is
	// removed; default 24h, never less than 1h.
	OrphanAge time.Duration
	// OrphanInterval between orphan sweeps of a table; default 6h.
	OrphanInterval time.Duration
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c CompactionConfig) WithDefaults() CompactionConfig {
	if c.Interval <= 0 {
		c.Interval = time.Minute
	}
	if c.TargetFileSize <= 0 {
		c.TargetFileSize = 128 << 20
	}
	if c.SmallFileRatio <= 0 {
		c.SmallFileRatio = 0.75
	}
	if c.MinGroup <= 0 {
		c.MinGroup = 5
	}
	if c.DeleteRatio <= 0 {
		c.DeleteRatio = 0.30
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 192 << 20
	}
	if c.MaxRows <= 0 {
		c.MaxRows = 2_000_000
	}
	if c.MergeMemory <= 0 {
		c.MergeMemory = 64 << 20
	}
	if c.OrphanAge < time.Hour {
		c.OrphanAge = 24 * time.Hour
	}
	if c.OrphanInterval <= 0 {
		c.OrphanInterval = 6 * time.Hour
	}
	return c
}

// MaintenanceConfig says when a table's metadata is maintained.
type MaintenanceConfig struct {
	// MaxDataManifests triggers a manifest merge when the current snapshot
	// has more data manifests; default 16.
	MaxDataManifests int
	// RetainSnapshots is how many snapshots are always kept; default 100,
	// at least 2.
	RetainSnapshots int
	// SnapshotMaxAge is the age beyond which snapshots past RetainSnapshots
	// expire. Zero is a setting (they expire at once), not unset: the
	// config package's default is 1h.
	SnapshotMaxAge time.Duration
	// ExpireEvery is how many commits pass between expiry runs; default 20.
	ExpireEvery int
}

// WithDefaults returns c with its unset fields set to their defaults.
func (c MaintenanceConfig) WithDefaults() MaintenanceConfig {
	if c.MaxDataManifests <= 0 {
		c.MaxDataManifests = 16
	}
	if c.RetainSnapshots < 2 {
		c.RetainSnapshots = max(c.RetainSnapshots, 100)
	}
	if c.SnapshotMaxAge < 0 {
		c.SnapshotMaxAge = 0
	}
	if c.ExpireEvery <= 0 {
		c.ExpireEvery = 20
	}
	return c
}
