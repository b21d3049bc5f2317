package iceberg

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun/driver/sqliteshim"
)

// pgConnectTimeout bounds each new catalog connection to PostgreSQL when
// the URI sets no connect_timeout (pgx's default is to wait forever).
const pgConnectTimeout = 10 * time.Second

// sqlCatalog is iceberg-go's SQL catalog over a database handle it owns:
// Close closes the handle too (iceberg-go leaves a handle given to
// sqlcat.NewCatalog open).
type sqlCatalog struct {
	*sqlcat.Catalog
	db *sql.DB
	// file is the SQLite file (nil for PostgreSQL), checked before every
	// commit.
	file *catalogFile
	// name is the catalog's name (its rows' catalog_name); postgres: the
	// database is PostgreSQL (its placeholders are $n). For commitOn.
	name     string
	postgres bool
}

func (c *sqlCatalog) Close() error {
	return errors.Join(c.Catalog.Close(), c.db.Close())
}

// openSQL opens the SQL catalog on SQLite or PostgreSQL.
func openSQL(ctx context.Context, cfg CatalogConfig) (*sqlCatalog, error) {
	var (
		db      *sql.DB
		dialect sqlcat.SupportedDialect
		err     error
	)
	switch scheme(cfg.URI) {
	case "sqlite":
		db, err = openSQLite(cfg.URI)
		dialect = sqlcat.SQLite
	case "postgres", "postgresql":
		db, err = openPostgres(ctx, cfg.URI)
		dialect = sqlcat.Postgres
	default:
		return nil, openErr(ErrCatalog, nil, "a sql catalog needs a sqlite:// or postgres:// URI, got %s (sink.iceberg.catalog.uri)", safeURI(cfg.URI))
	}
	if err != nil {
		return nil, err
	}
	if err := ensureWarehouse(cfg.Warehouse); err != nil {
		db.Close()
		return nil, err
	}
	cat, err := sqlcat.NewCatalog(cfg.Name, db, dialect, ioProps(cfg))
	if err != nil {
		db.Close()
		return nil, openErr(ErrCatalog, err, "create the catalog's tables at %s: %v", safeURI(cfg.URI), err)
	}
	out := &sqlCatalog{Catalog: cat, db: db, name: cfg.Name, postgres: dialect == sqlcat.Postgres}
	if dialect == sqlcat.SQLite {
		if out.file, err = openCatalogFile(strings.TrimPrefix(cfg.URI, "sqlite://")); err != nil {
			out.Close()
			return nil, openErr(ErrCatalog, err, "the sqlite catalog file: %v", err)
		}
	}
	return out, nil
}

// openSQLite opens the embedded catalog file, creating its directory.
func openSQLite(uri string) (*sql.DB, error) {
	path := strings.TrimPrefix(uri, "sqlite://")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, openErr(ErrCatalog, err, "catalog directory: %v", err)
	}
	// WAL and a busy timeout on every pooled connection: the sink's table
	// loops commit concurrently. Transactions begin IMMEDIATE: iceberg-go's
	// create and commit read before they write, and under WAL a read
	// transaction that cannot upgrade to a write gets SQLITE_BUSY at once,
	// never waiting the busy timeout (tables created together at a first
	// start failed so; TestSQLiteConcurrentCreate).
	db, err := sql.Open(sqliteshim.ShimName, "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return nil, openErr(ErrCatalog, err, "open sqlite catalog %s: %v", path, err)
	}
	return db, nil
}

// openPostgres connects to a PostgreSQL catalog database through pgx's
// database/sql adapter (stdlib.OpenDB, not sql.Open with a registered
// driver name) and checks that it answers.
func openPostgres(ctx context.Context, uri string) (*sql.DB, error) {
	where := safeURI(uri)
	pc, err := pgx.ParseConfig(uri)
	if err != nil {
		return nil, openErr(ErrCatalog, err, "sink.iceberg.catalog.uri %s is not a valid PostgreSQL URL: %v", where, err)
	}
	if pc.ConnectTimeout == 0 {
		pc.ConnectTimeout = pgConnectTimeout
	}
	db := stdlib.OpenDB(*pc)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, pgOpenError(where, pc.Database, err)
	}
	return db, nil
}

// pgOpenError classifies a failed first connection to the catalog database.
func pgOpenError(where, database string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "28P01" || pgErr.Code == "28000": // invalid_password, invalid_authorization_specification
			return openErr(ErrCatalogAuth, err, "PostgreSQL at %s refused the login (%s): check the user and password in sink.iceberg.catalog.uri (use ${ENV} for the password)", where, pgErr.Message)
		case pgErr.Code == "3D000": // invalid_catalog_name
			return openErr(ErrCatalog, err, "database %q does not exist on PostgreSQL at %s: create it (CREATE DATABASE %s) or fix sink.iceberg.catalog.uri", database, where, pgx.Identifier{database}.Sanitize())
		}
		return openErr(ErrCatalog, err, "PostgreSQL at %s: %s (SQLSTATE %s)", where, pgErr.Message, pgErr.Code)
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return openErr(ErrCatalogUnreachable, err, "cannot reach PostgreSQL at %s: %v; check the host and port in sink.iceberg.catalog.uri and that the server accepts connections", where, err)
	}
	return openErr(ErrCatalogUnreachable, err, "connect to PostgreSQL at %s: %v", where, err)
}

// ensureWarehouse creates a local warehouse's directory.
func ensureWarehouse(w string) error {
	if !strings.HasPrefix(w, "file://") {
		return nil
	}
	if err := os.MkdirAll(strings.TrimPrefix(w, "file://"), 0o755); err != nil {
		return openErr(ErrWarehouse, err, "warehouse directory: %v", err)
	}
	return nil
}

// MetadataLocation returns the metadata file the catalog's row names for
// the table ("" when there is no such row): one indexed read, for a
// watcher that polls for new commits (cdcd bench) without loading and
// parsing the table's metadata each time. Only tables whose row rowKey
// names; others report ok false.
func (c *sqlCatalog) MetadataLocation(ctx context.Context, ident table.Identifier) (loc string, ok bool, err error) {
	nsKey, name, plain := c.rowKey(ident)
	if !plain {
		return "", false, nil
	}
	q := `SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?`
	if c.postgres {
		q = `SELECT metadata_location FROM iceberg_tables WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3`
	}
	var l sql.NullString
	switch err := c.db.QueryRowContext(ctx, q, c.name, nsKey, name).Scan(&l); {
	case errors.Is(err, sql.ErrNoRows):
		return "", true, nil
	case err != nil:
		return "", true, err
	}
	return l.String, true, nil
}
