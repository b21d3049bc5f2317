package postgres

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Columns added with a DEFAULT to a table with rows.
//
// ALTER TABLE … ADD COLUMN c … DEFAULT x gives every existing row c = x
// with no change in the WAL: a constant or stable default is stored once
// as the column's missing value (pg_attribute.attmissingval), read in
// place of the absent attribute; a volatile one (random(), clock_timestamp())
// rewrites the table, and logical decoding does not send a rewrite. No
// change event ever arrives for those rows, so a mirror would read them as
// NULL. The missing value becomes the column's schema.Column.Default (a
// sink that can give it to rows written before the column existed keeps
// them right: Iceberg's initial-default); where the sink cannot, or the
// value is not known, the table's rows are read again by an incremental
// snapshot when the stream first sees the column.

// fillDefaults sets the Default of rel's columns that have a missing value
// of a kind a Default may hold. The catalog is read now, as for
// tableInfo: a later rewrite (VACUUM FULL) clears the missing value.
func fillDefaults(ctx context.Context, q querier, ct *catalogTable, rel *relation) error {
	for i := range rel.table.Columns {
		c := &rel.table.Columns[i]
		cc := ct.column(c.Name)
		if !cc.hasMissing || !schema.DefaultKind(c.Kind) {
			continue
		}
		format := int16(pgx.BinaryFormatCode)
		if rel.types[i].Text {
			format = pgx.TextFormatCode
		}
		// attmissingval is an anyarray of one element; the cast through
		// text gives it its column's type, which the decoder reads.
		rows, err := q.Query(ctx, `SELECT (a.attmissingval::text::`+cc.typeName+`[])[1]
			FROM pg_attribute a WHERE a.attrelid = $1 AND a.attname = $2 AND a.atthasmissing`,
			pgx.QueryResultFormats{format}, ct.oid, c.Name)
		if err != nil {
			return fmt.Errorf("postgres: the value existing rows hold in %s column %q: %w", ct.qualified(), c.Name, err)
		}
		var raw []byte
		for rows.Next() {
			raw = append([]byte(nil), rows.RawValues()[0]...)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: the value existing rows hold in %s column %q: %w", ct.qualified(), c.Name, err)
		}
		if raw == nil { // NULL (or the missing value went since)
			continue
		}
		v, verr := rel.decodeValue(i, raw, nil)
		if verr != nil {
			// Not carried: the rows are read again instead (reReadAdded).
			continue
		}
		c.Default = v
	}
	return nil
}

// reReadAdded queues a snapshot of the table when cur adds to the columns
// of the version before it (prev, the reader's record: columns.go) a column
// with a default whose value the rows already there hold but the sink
// cannot be given (Config.KeepsDefault), or has columns recreated or
// renamed (columns.go, moved: the mirror's column of the name holds other
// values, whatever the default), so their changes are read again.
func (s *streamer) reReadAdded(ctx context.Context, ct *catalogTable, prev, recreated, renamed []string, cur *schema.Table) error {
	var cols []string
	for _, c := range cur.Columns {
		if slices.Contains(recreated, c.Name) || slices.Contains(renamed, c.Name) {
			cols = append(cols, c.Name)
			continue
		}
		cc := ct.column(c.Name)
		if slices.Contains(prev, c.Name) || !(cc.hasDefault || cc.hasMissing) {
			continue
		}
		if c.Default != nil && s.r.cfg.KeepsDefault != nil && s.r.cfg.KeepsDefault(c) {
			continue
		}
		cols = append(cols, c.Name)
	}
	if len(cols) == 0 {
		return nil
	}
	qn := cur.QualifiedName()
	origin := "added-default"
	switch {
	case len(recreated) > 0:
		origin = "recreated-column"
		s.r.logger.Info("columns were dropped and added again under their names: rows already there hold the new columns' values at the source, "+
			"with no change sent for them, where the mirror holds the old ones: reading the table's rows again", "table", qn, "columns", recreated)
	case len(renamed) > 0:
		origin = "renamed-column"
		s.r.logger.Info("columns were renamed: rows already there hold their values under the new names, with no change sent for them, "+
			"where the mirror's columns of those names are new: reading the table's rows again (the old names stay in the mirror, NULL from here on)",
			"table", qn, "columns", renamed)
	default:
		s.r.logger.Info("columns were added with a default that rows already there hold, with no change sent for them: reading the table's rows again",
			"table", qn, "columns", cols)
	}
	return s.r.inc.Restart(ctx, snapshot.Request{Table: qn, Origin: origin})
}
