package config

import (
	"fmt"
	"hash/fnv"
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
	// Snapshot is "initial" (load existing rows first; default) or "never".
	Snapshot string `yaml:"snapshot"`
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
	}
}
