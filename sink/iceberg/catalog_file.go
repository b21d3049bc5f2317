package iceberg

import (
	"context"
	"fmt"
	"os"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// catalogFile is the embedded catalog's SQLite file as it was opened. A
// file deleted or replaced under a running daemon is not noticed by
// SQLite: its open connections go on writing into the unlinked file,
// which no reader (nor the next start) will ever see. So every commit
// first checks that the path still names the file that was opened.
type catalogFile struct {
	path string
	info os.FileInfo
}

// openCatalogFile notes the identity of the catalog file at path.
func openCatalogFile(path string) (*catalogFile, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	return &catalogFile{path: path, info: info}, nil
}

// check returns a *PauseError if the catalog file was deleted or
// replaced since it was opened.
func (f *catalogFile) check() error {
	if f == nil {
		return nil
	}
	now, err := os.Stat(f.path)
	what := ""
	switch {
	case os.IsNotExist(err):
		what = "deleted"
	case err != nil:
		return fmt.Errorf("iceberg: check the catalog file %s: %w", f.path, err)
	case !os.SameFile(f.info, now):
		what = "replaced by another file"
	default:
		return nil
	}
	return &PauseError{
		What: fmt.Sprintf("the catalog file %s was %s while cdcd was running: commits would go into a file no reader sees", f.path, what),
		Fix: "stop cdcd and put the catalog file back (from a backup), then start it; without one, start with a new catalog and rebuild each table " +
			"with a re-snapshot (cdcd snapshot -c FILE --replace TABLE)"}
}

// checkCatalog checks the catalog's file, when it has one, before a
// commit made through a table's transaction (whose table may come from
// the catalog iceberg-go wraps, not from this one).
func checkCatalog(cat catalog.Catalog) error {
	if c, ok := cat.(*sqlCatalog); ok {
		return c.file.check()
	}
	return nil
}

// CommitTable commits to the catalog after checking its file.
func (c *sqlCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	if err := c.file.check(); err != nil {
		return nil, "", err
	}
	return c.Catalog.CommitTable(ctx, ident, reqs, updates)
}

// CreateTable creates a table after checking the catalog's file.
func (c *sqlCatalog) CreateTable(ctx context.Context, ident table.Identifier, sc *iceberg.Schema, opts ...catalog.CreateTableOpt) (*table.Table, error) {
	if err := c.file.check(); err != nil {
		return nil, err
	}
	return c.Catalog.CreateTable(ctx, ident, sc, opts...)
}
