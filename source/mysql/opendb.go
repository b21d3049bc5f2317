package mysql

import "database/sql"

// OpenDB opens a small pool for queries on the server a DSN names (the
// config's mysql:// URL or a go-sql-driver DSN), with the reader's session
// settings: for tools and the daemon's polls beside a running reader.
func OpenDB(dsn string) (*sql.DB, error) {
	ci, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	return ci.open()
}
