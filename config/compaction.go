package config

import "time"

// Compaction configures compaction and metadata maintenance of the
// Iceberg tables (upsert mode).
type Compaction struct {
	// Enabled turns compaction on; default true.
	Enabled bool `yaml:"enabled"`
	// Interval between compaction plans of a table; default 1m.
	Interval time.Duration `yaml:"interval"`
	// TargetFileSizeMB is the data-file size files are written and
	// compacted toward, in MiB; default 128.
	TargetFileSizeMB int `yaml:"target_file_size_mb"`
	// SmallFilePercent: a file under this share of the target is small;
	// default 75.
	SmallFilePercent int `yaml:"small_file_percent"`
	// MinFiles is the fewest small files of a partition worth compacting;
	// default 5.
	MinFiles int `yaml:"min_files"`
	// DeletePercent: a file with at least this share of its rows deleted is
	// rewritten on its own; default 30.
	DeletePercent int `yaml:"delete_percent"`
	// MaxInputMB caps the input of one compaction, in MiB; default 192
	// (two files under small_file_percent of the default target fit).
	MaxInputMB int `yaml:"max_input_mb"`
	// MaxInputRows caps the rows of one compaction's input and of each file
	// it writes; default 2,000,000. A compaction holds about 30 bytes a row
	// (key and new position) until it commits: this bounds its memory.
	MaxInputRows int `yaml:"max_input_rows"`
	// MergeMemoryMB bounds the read buffers of one compaction's merge, in
	// MiB: every input file is open at once with a page of each column
	// (about 512 KiB a column), so it merges at most this many MiB /
	// (columns × 0.5) files, never fewer than min_files; default 64.
	MergeMemoryMB int `yaml:"merge_memory_mb"`
	// OrphanAge is how old an unreferenced file must be to be removed;
	// default 24h, at least 1h.
	OrphanAge time.Duration `yaml:"orphan_age"`
	// RetainSnapshots is how many snapshots are always kept; default 100,
	// at least 2.
	RetainSnapshots int `yaml:"retain_snapshots"`
	// SnapshotMaxAge: older snapshots beyond RetainSnapshots expire;
	// default 1h.
	SnapshotMaxAge time.Duration `yaml:"snapshot_max_age"`
}

func (c *Compaction) applyDefaults(explicit func(string) bool) {
	const p = "sink.iceberg.compaction."
	orDefault(&c.Enabled, true, explicit(p+"enabled"))
	orDefault(&c.Interval, time.Minute, explicit(p+"interval"))
	orDefault(&c.TargetFileSizeMB, 128, explicit(p+"target_file_size_mb"))
	orDefault(&c.SmallFilePercent, 75, explicit(p+"small_file_percent"))
	orDefault(&c.MinFiles, 5, explicit(p+"min_files"))
	orDefault(&c.DeletePercent, 30, explicit(p+"delete_percent"))
	orDefault(&c.MaxInputMB, 192, explicit(p+"max_input_mb"))
	orDefault(&c.MaxInputRows, 2_000_000, explicit(p+"max_input_rows"))
	orDefault(&c.MergeMemoryMB, 64, explicit(p+"merge_memory_mb"))
	orDefault(&c.OrphanAge, 24*time.Hour, explicit(p+"orphan_age"))
	orDefault(&c.RetainSnapshots, 100, explicit(p+"retain_snapshots"))
	orDefault(&c.SnapshotMaxAge, time.Hour, explicit(p+"snapshot_max_age"))
}

func (v *validator) compaction(c Compaction) {
	const p = "sink.iceberg.compaction."
	positive := func(key string, n int, lo, hi int) {
		if n < lo || n > hi {
			v.fail(p+key, ErrInvalid, "must be between %d and %d, got %d", lo, hi, n)
		}
	}
	if c.Interval <= 0 {
		v.fail(p+"interval", ErrInvalid, "must be positive, got %s", c.Interval)
	}
	positive("target_file_size_mb", c.TargetFileSizeMB, 1, 1<<14)
	positive("small_file_percent", c.SmallFilePercent, 1, 100)
	positive("min_files", c.MinFiles, 2, 10000)
	positive("delete_percent", c.DeletePercent, 1, 100)
	positive("max_input_mb", c.MaxInputMB, 1, 1<<16)
	positive("max_input_rows", c.MaxInputRows, 1000, 1<<31-1)
	positive("merge_memory_mb", c.MergeMemoryMB, 1, 1<<16)
	positive("retain_snapshots", c.RetainSnapshots, 2, 1<<20)
	if c.OrphanAge < time.Hour {
		v.fail(p+"orphan_age", ErrInvalid, "must be at least 1h (a file younger than that may belong to a commit in flight), got %s", c.OrphanAge)
	}
	if c.SnapshotMaxAge < 0 {
		v.fail(p+"snapshot_max_age", ErrInvalid, "must not be negative, got %s", c.SnapshotMaxAge)
	}
}
