package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/cdcd-dev/cdcd/source"
)

// Watermarks of the incremental load (DBLog): the engine writes a low
// watermark, selects a chunk (readChunk), writes a high watermark; the
// rows of the watermark table come back through the binlog in commit
// order, among the other changes. The reader hands them to the Emitter as
// changes of the watermark table, in stream order, so an engine that wraps
// the Emitter sees exactly which changes fall between the two marks of a
// chunk (IsWatermark tells them apart) and never passes them to the log.

// watermarkDDL creates the watermark table (one row per load run, updated
// at each mark). Frozen column names.
const watermarkDDL = `CREATE TABLE IF NOT EXISTS %s (
	id VARCHAR(64) NOT NULL PRIMARY KEY,
	mark VARCHAR(8) NOT NULL,
	chunk BIGINT NOT NULL,
	written TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
)`

// Watermark is one mark as the stream returns it.
type Watermark struct {
	ID    string // the load run's id
	Mark  string // "low" or "high"
	Chunk int64  // the chunk's sequence number in the run
	Pos   source.Position
}

// Watermarks writes the marks of an incremental load into a table of the
// source database.
type Watermarks struct {
	db    *sql.DB
	table string // quoted db.table
	qn    string
}

// NewWatermarks creates the table qualified (database.table) if missing.
// REQUIRES: the user may CREATE, INSERT and UPDATE it.
func NewWatermarks(ctx context.Context, db *sql.DB, qualified string) (*Watermarks, error) {
	dbName, name, err := splitTable(qualified)
	if err != nil {
		return nil, err
	}
	q := quoteIdent(dbName) + "." + quoteIdent(name)
	if _, err := db.ExecContext(ctx, fmt.Sprintf(watermarkDDL, q)); err != nil {
		return nil, &PreconditionError{What: fmt.Sprintf("cannot create the watermark table %s: %v", qualified, err),
			Fix: fmt.Sprintf("GRANT CREATE, INSERT, UPDATE ON %s.%s TO <the dsn's user>, or create it yourself", quoteIdent(dbName), quoteIdent(name))}
	}
	return &Watermarks{db: db, table: q, qn: qualified}, nil
}

// Write commits one mark (its own transaction, so its binlog position is
// the moment it was written).
func (w *Watermarks) Write(ctx context.Context, id, mark string, chunk int64) error {
	_, err := w.db.ExecContext(ctx, "INSERT INTO "+w.table+" (id, mark, chunk) VALUES (?, ?, ?) "+
		"ON DUPLICATE KEY UPDATE mark = VALUES(mark), chunk = VALUES(chunk), written = CURRENT_TIMESTAMP(6)", id, mark, chunk)
	if err != nil {
		return fmt.Errorf("mysql: write the %s watermark of run %s chunk %d into %s: %w", mark, id, chunk, w.qn, err)
	}
	return nil
}

// IsWatermark reports whether a change is a row of the watermark table
// named qualified, and decodes it.
func IsWatermark(c *source.Change, qualified string) (Watermark, bool) {
	if c.Table == nil || c.Table.QualifiedName() != qualified || c.After == nil {
		return Watermark{}, false
	}
	get := func(name string) any {
		if i := c.Table.ColumnIndex(name); i >= 0 {
			return c.After[i]
		}
		return nil
	}
	id, _ := get("id").(string)
	mark, _ := get("mark").(string)
	chunk, _ := get("chunk").(int64)
	if id == "" || mark == "" {
		return Watermark{}, false
	}
	return Watermark{ID: id, Mark: mark, Chunk: chunk, Pos: c.Pos}, true
}

// ensureWatermarkTable creates the watermark table when it is missing (an
// existing one needs no CREATE privilege).
func ensureWatermarkTable(ctx context.Context, db *sql.DB, qualified string) error {
	dbName, name, err := splitTable(qualified)
	if err != nil {
		return err
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		dbName, name).Scan(&n); err != nil {
		return fmt.Errorf("mysql: look for the watermark table %s: %w", qualified, err)
	}
	if n > 0 {
		return nil
	}
	_, err = NewWatermarks(ctx, db, qualified)
	return err
}
