package config

import (
	"fmt"
	"time"
)

// Reconcile configures cdcd reconcile (the reconcile: section): the
// comparison of each mirror with its source, by the CLI, the admin API and
// the daemon's own schedule.
type Reconcile struct {
	// ReplicaDSN, when set, is a streaming replica of the source where the
	// rows are read (hashed by key range); the slot is still read on
	// source.postgres.dsn. Default: the source's DSN. Its password is
	// redacted by Config.String.
	ReplicaDSN string `yaml:"replica_dsn,omitempty" secret:"true"`
	// ChunkRows is the most rows one read covers (one short snapshot);
	// default 8192.
	ChunkRows int `yaml:"chunk_rows"`
	// BlockRows is how many rows one hash covers; default 256. A range
	// whose hashes differ is read again key by key.
	BlockRows int `yaml:"block_rows"`
	// MaxRowsPerSecond throttles the reads of the source, all parallel
	// reads together; default 0 (unthrottled).
	MaxRowsPerSecond int `yaml:"max_rows_per_second"`
	// Parallel is how many key ranges of a table are read from the
	// source at once, each on a connection of its own; default 2. A
	// MySQL source reads one at a time.
	Parallel int `yaml:"parallel"`
	// StatementTimeout bounds each statement on the source; default 60s.
	StatementTimeout time.Duration `yaml:"statement_timeout"`
	// Interval runs a reconcile of Tables from the daemon every interval;
	// default 0 (only on demand: cdcd reconcile, POST /cdcd/reconcile).
	Interval time.Duration `yaml:"interval"`
	// Tables the scheduled reconcile compares; default every table.
	Tables []string `yaml:"tables,omitempty"`
	// Repair makes the scheduled reconcile re-snapshot the keys it finds
	// different (as cdcd reconcile --repair); default false.
	Repair bool `yaml:"repair"`
}

const (
	defaultReconcileChunk   = 8192
	defaultReconcileBlock   = 256
	defaultReconcileLanes   = 2
	maxReconcileLanes       = 16
	defaultReconcileTimeout = 60 * time.Second
)

func (r *Reconcile) applyDefaults(explicit func(string) bool) {
	const p = "reconcile."
	orDefault(&r.ChunkRows, defaultReconcileChunk, explicit(p+"chunk_rows"))
	orDefault(&r.BlockRows, defaultReconcileBlock, explicit(p+"block_rows"))
	orDefault(&r.Parallel, defaultReconcileLanes, explicit(p+"parallel"))
	orDefault(&r.StatementTimeout, defaultReconcileTimeout, explicit(p+"statement_timeout"))
}

func (v *validator) reconcile() {
	const p = "reconcile."
	r := v.c.Reconcile
	if r.ChunkRows < 1 || r.ChunkRows > 1<<20 {
		v.fail(p+"chunk_rows", ErrInvalid, "must be between 1 and %d, got %d", 1<<20, r.ChunkRows)
	}
	if r.BlockRows < 1 || r.BlockRows > r.ChunkRows {
		v.fail(p+"block_rows", ErrInvalid, "must be between 1 and reconcile.chunk_rows (%d), got %d", r.ChunkRows, r.BlockRows)
	}
	if r.Parallel < 1 || r.Parallel > maxReconcileLanes {
		v.fail(p+"parallel", ErrInvalid, "must be between 1 and %d, got %d", maxReconcileLanes, r.Parallel)
	}
	if r.MaxRowsPerSecond < 0 {
		v.fail(p+"max_rows_per_second", ErrInvalid, "must not be negative (0: unthrottled), got %d", r.MaxRowsPerSecond)
	}
	if r.StatementTimeout < 0 {
		v.fail(p+"statement_timeout", ErrInvalid, "must not be negative, got %s", r.StatementTimeout)
	}
	if r.Interval < 0 || r.Interval > 0 && r.Interval < time.Minute {
		v.fail(p+"interval", ErrInvalid, "must be 0 (off) or at least 1m, got %s", r.Interval)
	}
	if r.ReplicaDSN != "" && v.c.Source.Postgres == nil {
		v.fail(p+"replica_dsn", ErrInvalid, "is for a PostgreSQL source (source.postgres)")
	}
	names := map[string]bool{}
	for _, t := range v.c.Source.TableNames() {
		names[t] = true
	}
	for i, t := range r.Tables {
		if !names[t] && !names[normalizeTable(t)] {
			v.fail(fmt.Sprintf("%stables[%d]", p, i), ErrInvalid, "%s is not one of the source's tables", shortQuote(t))
		}
	}
}
