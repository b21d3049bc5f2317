// Package iceberg writes the log's table topics into Apache Iceberg tables,
// committing each table's consumed log offsets in the same snapshot as its
// data, so the table itself says how far it has read (exactly once).
package iceberg

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/uptrace/bun/driver/sqliteshim"
)

// CatalogConfig says which catalog to open.
type CatalogConfig struct {
	// Type is "sql" (the only one built so far).
	Type string
	// URI is sqlite://PATH for the embedded catalog.
	URI string
	// Name of the catalog.
	Name string
	// Warehouse is the root of new tables' locations (file://... ).
	Warehouse string
}

// OpenCatalog opens (creating if needed) the configured catalog.
func OpenCatalog(ctx context.Context, cfg CatalogConfig) (catalog.Catalog, error) {
	if cfg.Type != "" && cfg.Type != "sql" {
		return nil, fmt.Errorf("iceberg: catalog type %q is not available yet; use sql", cfg.Type)
	}
	u, err := url.Parse(cfg.URI)
	if err != nil {
		return nil, fmt.Errorf("iceberg: catalog uri %q: %w", cfg.URI, err)
	}
	if u.Scheme != "sqlite" {
		return nil, fmt.Errorf("iceberg: catalog uri %q: only sqlite:// is available yet", cfg.URI)
	}
	path := strings.TrimPrefix(cfg.URI, "sqlite://")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("iceberg: catalog directory: %w", err)
	}
	if err := ensureWarehouse(cfg.Warehouse); err != nil {
		return nil, err
	}
	// WAL and a busy timeout on every pooled connection: the sink's table
	// loops commit concurrently.
	db, err := sql.Open(sqliteshim.ShimName, "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		return nil, fmt.Errorf("iceberg: open sqlite catalog %s: %w", path, err)
	}
	cat, err := sqlcat.NewCatalog(cfg.Name, db, sqlcat.SQLite, iceberg.Properties{"warehouse": cfg.Warehouse})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("iceberg: open sql catalog %s: %w", path, err)
	}
	return cat, nil
}

func ensureWarehouse(w string) error {
	if !strings.HasPrefix(w, "file://") {
		return nil
	}
	if err := os.MkdirAll(strings.TrimPrefix(w, "file://"), 0o755); err != nil {
		return fmt.Errorf("iceberg: warehouse directory: %w", err)
	}
	return nil
}
