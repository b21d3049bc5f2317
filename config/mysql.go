package config

import (
	"fmt"
	"hash/fnv"
	"net/url"
	"strings"
)

// MySQL configures the MySQL / MariaDB reader (source.mysql).
type MySQL struct {
	// DSN is mysql://user:password@host:3306/db; ${ENV} is expanded.
	// Required. Its password is redacted by Config.String.
	DSN string `yaml:"dsn" secret:"true"`
	// ServerID is the replica id cdcd registers with, unique among the
	// server's replicas; default derived from the pipeline name (a hash into
	// 1000000..2^31-1).
	ServerID int64 `yaml:"server_id"`
	// Flavor is "mysql" or "mariadb"; default: detected from the server.
	Flavor string `yaml:"flavor"`
	// Tables lists "database.table" names to capture. At least one.
	Tables []string `yaml:"tables"`
	// Snapshot is "initial" (default: every table is loaded by chunks
	// while the binlog streams, lock-free; so is a table added later) or
	// "never" (changes from now on). "incremental" is read as "initial".
	Snapshot string `yaml:"snapshot"`
	// WatermarkTable is the table ("database.table") where cdcd writes the
	// watermarks of its snapshots (one row per pipeline); created when
	// missing (or GRANT SELECT, INSERT, UPDATE on it). Default
	// <the dsn's database, else the first table's>.cdcd_watermark.
	WatermarkTable string `yaml:"watermark_table"`
	// ReadOnly: snapshots write nothing to the source (no watermark
	// table); their chunks are bracketed by binlog positions of consistent
	// snapshots. MariaDB only.
	ReadOnly bool `yaml:"read_only"`
	// Incremental configures the snapshots (chunk_rows,
	// max_rows_per_second, signal_table as "database.table").
	Incremental Incremental `yaml:"incremental"`
}

// TableNames lists the configured source's tables.
func (s Source) TableNames() []string {
	switch {
	case s.Postgres != nil:
		return s.Postgres.Tables
	case s.MySQL != nil:
		return s.MySQL.Tables
	}
	return nil
}

// defaultServerID derives a replica id from the pipeline name.
func defaultServerID(pipeline string) int64 {
	h := fnv.New32a()
	h.Write([]byte(pipeline))
	return 1_000_000 + int64(h.Sum32()%(1<<31-1_000_000))
}

func (c *Config) mysqlDefaults(explicit func(string) bool) {
	m := c.Source.MySQL
	if m == nil {
		return
	}
	orDefault(&m.ServerID, defaultServerID(c.Pipeline), explicit("source.mysql.server_id"))
	orDefault(&m.Snapshot, defaultSnapshot, explicit("source.mysql.snapshot"))
	if m.Snapshot == SnapshotIncremental {
		m.Snapshot = SnapshotInitial // the MySQL load is incremental either way
	}
	orDefault(&m.Incremental.ChunkRows, 8192, explicit("source.mysql.incremental.chunk_rows"))
	if m.WatermarkTable == "" {
		db := ""
		if u, err := url.Parse(m.DSN); err == nil {
			db = strings.TrimPrefix(u.Path, "/")
		}
		if db == "" && len(m.Tables) > 0 {
			db, _, _ = strings.Cut(m.Tables[0], ".")
		}
		if db != "" {
			m.WatermarkTable = db + ".cdcd_watermark"
		}
	}
}

// mysqlSource validates source.mysql.
func (v *validator) mysqlSource(m *MySQL) {
	const p = "source.mysql."
	switch s := scheme(m.DSN); {
	case strings.TrimSpace(m.DSN) == "":
		v.fail(p+"dsn", ErrInvalid, "required: a URL such as mysql://cdc:${MYSQL_PASSWORD}@127.0.0.1:3306/shop")
	case s != "mysql" && s != "mariadb":
		v.fail(p+"dsn", ErrInvalid, "must be a URL starting with mysql://, like mysql://cdc:${MYSQL_PASSWORD}@127.0.0.1:3306/shop")
	}
	if m.ServerID < 1 || m.ServerID > 1<<32-1 {
		v.fail(p+"server_id", ErrInvalid, "must be 1 to 4294967295 and unique among the server's replicas")
	}
	if f := m.Flavor; f != "" && f != "mysql" && f != "mariadb" {
		v.fail(p+"flavor", ErrInvalid, "must be mysql or mariadb (or left out to detect it), got %s", shortQuote(f))
	}
	if s := m.Snapshot; s != "initial" && s != "never" {
		v.fail(p+"snapshot", ErrInvalid, "must be initial or never, got %s", shortQuote(s))
	}
	if db, tbl, ok := strings.Cut(m.WatermarkTable, "."); m.WatermarkTable != "" && (!ok || db == "" || tbl == "" || strings.Contains(tbl, ".")) {
		v.fail(p+"watermark_table", ErrInvalid, "%s is not a table name: write database.table", shortQuote(m.WatermarkTable))
	}
	if in := m.Incremental; in.ChunkRows < 1 || in.ChunkRows > 1<<20 {
		v.fail(p+"incremental.chunk_rows", ErrInvalid, "must be between 1 and %d, got %d", 1<<20, in.ChunkRows)
	}
	if m.Incremental.MaxRowsPerSecond < 0 {
		v.fail(p+"incremental.max_rows_per_second", ErrInvalid, "must not be negative (0: unthrottled), got %d", m.Incremental.MaxRowsPerSecond)
	}
	if sig := m.Incremental.SignalTable; sig != "" {
		if db, tbl, ok := strings.Cut(sig, "."); !ok || db == "" || tbl == "" || strings.Contains(tbl, ".") {
			v.fail(p+"incremental.signal_table", ErrInvalid, "%s is not a table name: write database.table", shortQuote(sig))
		} else if sig == m.WatermarkTable {
			v.fail(p+"incremental.signal_table", ErrInvalid, "%s is also the watermark table: give the signal table a table of its own", sig)
		}
	}
	if len(m.Tables) == 0 && v.c.Outbox == nil { // an outbox relay may run alone
		v.fail(p+"tables", ErrInvalid, "at least one table is required, e.g. tables: [shop.orders]")
	}
	seen := map[string]int{}
	for i, t := range m.Tables {
		path := fmt.Sprintf("%stables[%d]", p, i)
		db, tbl, ok := strings.Cut(t, ".")
		if !ok || db == "" || tbl == "" || strings.Contains(tbl, ".") {
			v.fail(path, ErrInvalid, "%s is not a table name: write database.table", shortQuote(t))
			continue
		}
		if j, dup := seen[t]; dup {
			v.fail(path, ErrInvalid, "%s is listed twice (also as tables[%d]): remove one", t, j)
			continue
		}
		seen[t] = i
		if t == m.Incremental.SignalTable {
			v.fail(path, ErrInvalid, "%s is the signal table (source.mysql.incremental.signal_table): its rows are read, not mirrored; "+
				"use a table of its own", t)
		}
		if t == m.WatermarkTable {
			v.fail(path, ErrInvalid, "%s is the watermark table (source.mysql.watermark_table): its rows are cdcd's, not mirrored; "+
				"set watermark_table to a table of its own", t)
		}
	}
}
