package config

// Incremental configures incremental snapshots (source.postgres.incremental):
// tables read by key chunks while their changes stream (tables added to
// the pipeline, `cdcd snapshot`, the signal table, snapshot: incremental).
type Incremental struct {
	// ChunkRows is the most rows one chunk reads; default 8192. Between
	// two chunks the table's streamed changes flow; a larger chunk reads
	// faster and holds more rows in memory.
	ChunkRows int `yaml:"chunk_rows"`
	// MaxRowsPerSecond throttles each snapshot; default 0 (unthrottled).
	MaxRowsPerSecond int `yaml:"max_rows_per_second"`
	// SignalTable is a Debezium-compatible signal table, "schema.table"
	// (columns id, type, data; see the README); default none. cdcd adds it
	// to the publication; its rows never reach the log.
	SignalTable string `yaml:"signal_table,omitempty"`
}

// The snapshot modes of source.postgres.snapshot.
const (
	SnapshotInitial     = "initial"     // a consistent COPY of every table first (the slot's exported snapshot)
	SnapshotIncremental = "incremental" // tables read by chunks while the slot streams
	SnapshotNever       = "never"       // existing rows are not read
)

func (in *Incremental) applyDefaults(explicit func(string) bool) {
	const p = "source.postgres.incremental."
	orDefault(&in.ChunkRows, 8192, explicit(p+"chunk_rows"))
	if in.SignalTable != "" {
		in.SignalTable = normalizeTable(in.SignalTable)
	}
}

func (v *validator) incremental(pg *Postgres) {
	const p = "source.postgres.incremental."
	switch pg.Snapshot {
	case SnapshotInitial, SnapshotIncremental, SnapshotNever:
	default:
		v.fail("source.postgres.snapshot", ErrInvalid, "must be initial, incremental or never, got %s", shortQuote(pg.Snapshot))
	}
	in := pg.Incremental
	if in.ChunkRows < 1 || in.ChunkRows > 1<<20 {
		v.fail(p+"chunk_rows", ErrInvalid, "must be between 1 and %d, got %d", 1<<20, in.ChunkRows)
	}
	if in.MaxRowsPerSecond < 0 {
		v.fail(p+"max_rows_per_second", ErrInvalid, "must not be negative (0: unthrottled), got %d", in.MaxRowsPerSecond)
	}
	for _, t := range pg.Tables {
		if in.SignalTable != "" && normalizeTable(t) == in.SignalTable {
			v.fail(p+"signal_table", ErrInvalid, "%s is also in source.postgres.tables: the signal table is read, not mirrored; "+
				"use a table of its own", in.SignalTable)
		}
	}
}
