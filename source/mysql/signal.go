package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cdcd-dev/cdcd/source"
)

// The signal table (Config.SignalTable) is Debezium's, so existing
// runbooks work:
//
//	CREATE TABLE shop.debezium_signal (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048));
//	INSERT INTO shop.debezium_signal VALUES ('ad-hoc-1', 'execute-snapshot',
//	    '{"data-collections": ["shop.orders"], "type": "incremental"}');
//
// Its rows are decoded from the binlog like a captured table's and never
// emitted; an insert acts where the stream meets it (source/snapshot's
// HandleSignal: execute-, stop-, pause-, resume-snapshot). Like every row,
// each takes an index in its transaction, so positions do not depend on
// whether a signal table is configured.

// signalDDL is the table Debezium documents; the fix of a missing one.
const signalDDL = "CREATE TABLE %s (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048))"

// describeSignalTable describes the signal table, refusing one that is
// missing or cannot be read with what to run.
func describeSignalTable(ctx context.Context, db *sql.DB, flavor, qualified string) (*tableDesc, error) {
	dbName, name, err := splitTable(qualified)
	if err != nil {
		return nil, &PreconditionError{What: "source.mysql.incremental.signal_table: " + err.Error(), Fix: "name it database.table"}
	}
	d, err := describeTable(ctx, db, flavor, dbName, name)
	if err == nil {
		err = checkSelect(ctx, db, d)
	}
	if err == nil {
		for _, c := range []string{"id", "type", "data"} {
			if d.table.ColumnIndex(c) < 0 {
				err = fmt.Errorf("it has no column %q", c)
			}
		}
	}
	if err != nil && !retryable(err) {
		q := quoteIdent(dbName) + "." + quoteIdent(name)
		return nil, &PreconditionError{What: fmt.Sprintf("the signal table %s (source.mysql.incremental.signal_table): %v", qualified, err),
			Fix: fmt.Sprintf(signalDDL+"; GRANT SELECT ON %s TO <the dsn's user>; or remove signal_table", q, q)}
	}
	return d, err
}

// isSignalTable reports whether qn is the signal table (never emitted).
func (in *incStream) isSignalTable(qn string) bool {
	return in != nil && in.sigTable != "" && qn == in.sigTable
}

// signal handles a row of a table version: true when it is the signal
// table's. An insert acts at once; a signal that cannot act is logged and
// the stream goes on (a bad signal row never stops the pipeline).
func (in *incStream) signal(v *tableVersion, op source.Op, row []any) bool {
	if !in.isSignalTable(v.qn) {
		return false
	}
	if op != source.OpCreate {
		return true
	}
	col := func(name string) string {
		if i := v.table.ColumnIndex(name); i >= 0 && i < len(row) {
			s, _ := row[i].(string)
			return strings.Clone(s) // the engine keeps it; the row's values are the stream's reusable slab's
		}
		return ""
	}
	id, kind := col("id"), col("type")
	in.logger.Info("signal read", "signal", id, "type", kind)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := in.eng.HandleSignal(ctx, id, kind, col("data"), in.signalTable); err != nil {
		in.logger.Error("signal not applied", "signal", id, "type", kind, "err", err)
	}
	return true
}

// signalTable checks a data-collection ("database.table") is a table of
// the pipeline.
func (in *incStream) signalTable(name string) (string, error) {
	n := strings.ReplaceAll(strings.TrimSpace(name), "`", "")
	if !slices.Contains(in.tables, n) {
		return "", fmt.Errorf("%q is not a table of this pipeline (source.mysql.tables: %s)", name, strings.Join(in.tables, ", "))
	}
	return n, nil
}
