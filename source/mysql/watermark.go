package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/cdcd-dev/cdcd/internal/failpoint"
	"github.com/cdcd-dev/cdcd/source"
)

// Watermarks of incremental snapshots (DBLog): the snapshot engine writes
// a low watermark, selects a chunk, writes a high watermark; the rows of
// the watermark table come back through the binlog in commit order, among
// the other changes, and the stream hands each of this pipeline's marks to
// the engine (never to the log). One row per pipeline (its id: the
// reader's server_id), updated at each mark, so the table stays small.

// watermarkDDL creates the watermark table. Frozen column names.
const watermarkDDL = `CREATE TABLE IF NOT EXISTS %s (
	id VARCHAR(64) NOT NULL PRIMARY KEY,
	mark VARCHAR(255) NOT NULL,
	written TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
)`

// Watermarks writes one pipeline's marks into a table of the source
// database.
type Watermarks struct {
	db    *sql.DB
	table string // quoted db.table
	qn    string
	id    string
}

// watermarkFix says how to create the table and grant it.
func watermarkFix(qualified string) string {
	dbName, name, _ := splitTable(qualified)
	q := quoteIdent(dbName) + "." + quoteIdent(name)
	return fmt.Sprintf("create it and grant it: "+strings.Join(strings.Fields(watermarkDDL), " ")+"; GRANT SELECT, INSERT, UPDATE ON %s TO <the dsn's user> "+
		"(or GRANT CREATE, INSERT, UPDATE ON %s and cdcd creates it)", q, q, quoteIdent(dbName)+".*")
}

// NewWatermarks creates the table qualified (database.table) if missing;
// id names the pipeline's row.
// REQUIRES: the user may INSERT and UPDATE it (and CREATE it when missing).
func NewWatermarks(ctx context.Context, db *sql.DB, qualified, id string) (*Watermarks, error) {
	dbName, name, err := splitTable(qualified)
	if err != nil {
		return nil, err
	}
	q := quoteIdent(dbName) + "." + quoteIdent(name)
	if err := ensureWatermarkTable(ctx, db, qualified); err != nil {
		return nil, err
	}
	return &Watermarks{db: db, table: q, qn: qualified, id: id}, nil
}

// Write commits one mark (its own transaction, so its place in the binlog
// is the moment it was written).
func (w *Watermarks) Write(ctx context.Context, mark string) error {
	_, err := w.db.ExecContext(ctx, "INSERT INTO "+w.table+" (id, mark) VALUES (?, ?) "+
		"ON DUPLICATE KEY UPDATE mark = VALUES(mark), written = CURRENT_TIMESTAMP(6)", w.id, mark)
	if code := serverCode(err); code == 1142 || code == 1143 || code == 1146 {
		return &PreconditionError{What: fmt.Sprintf("cannot write the watermark table %s: %v", w.qn, err), Fix: watermarkFix(w.qn)}
	}
	if err != nil {
		return fmt.Errorf("mysql: write the watermark %s into %s: %w", mark, w.qn, err)
	}
	failpoint.Hit("source.mysql.after-watermark") // a window open (or a chunk read) with nothing emitted
	return nil
}

// watermarkOf returns the mark of a change of the watermark table when it
// is pipeline id's.
func watermarkOf(c *source.Change, id string) (string, bool) {
	if c.After == nil {
		return "", false
	}
	get := func(name string) string {
		if i := c.Table.ColumnIndex(name); i >= 0 {
			s, _ := c.After[i].(string)
			return s
		}
		return ""
	}
	if get("id") != id {
		return "", false
	}
	mark := get("mark")
	return mark, mark != ""
}

// ensureWatermarkTable creates the watermark table when it is missing (an
// existing one needs no CREATE privilege).
func ensureWatermarkTable(ctx context.Context, db *sql.DB, qualified string) error {
	dbName, name, err := splitTable(qualified)
	if err != nil {
		return &PreconditionError{What: "source.mysql.watermark_table: " + err.Error(), Fix: "name it database.table"}
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		dbName, name).Scan(&n); err != nil {
		return &connError{fmt.Errorf("mysql: look for the watermark table %s: %w", qualified, err)}
	}
	if n > 0 {
		return nil
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf(watermarkDDL, quoteIdent(dbName)+"."+quoteIdent(name))); err != nil {
		return &PreconditionError{What: fmt.Sprintf("the watermark table %s does not exist and cannot be created: %v", qualified, err),
			Fix: watermarkFix(qualified)}
	}
	return nil
}
