package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
)

// ALTER TYPE ... RENAME VALUE changes the value of every row that holds
// the label, in place: no row is written, so pgoutput sends nothing, and
// the mirror would keep the old label. The publication check (every start
// and PublicationCheckInterval) keeps the labels of the enum types of the
// captured tables' columns by their pg_enum OID, which a rename keeps; a
// label whose text changed has the rows that hold it (the new text now)
// read again by an incremental snapshot of those rows only. Labels are
// only ever added or renamed, never dropped.

// enumColumn is a captured table's column of an enum type, or of an array
// of one, and one of the type's labels.
type enumColumn struct {
	table, column, typ string
	array              bool
	label              uint32
	text               string
}

// checkEnums reads the labels of the captured tables' enum columns and,
// against known (the labels of the last check; nil at the first), queues
// a read of the rows holding a renamed label. It returns the labels to
// keep.
func (r *Reader) checkEnums(ctx context.Context, q querier, checks []tableCheck, known map[uint32]string) (map[uint32]string, error) {
	var oids []uint32
	names := map[uint32]string{}
	for _, tc := range checks {
		if tc.t != nil {
			oids = append(oids, tc.t.oid)
			names[tc.t.oid] = tc.name
		}
	}
	if len(oids) == 0 {
		return known, nil
	}
	rows, err := q.Query(ctx, `SELECT a.attrelid, a.attname, format_type(e.enumtypid, NULL), t.typcategory = 'A', e.oid, e.enumlabel
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		JOIN pg_enum e ON e.enumtypid = CASE WHEN t.typcategory = 'A' THEN t.typelem ELSE t.oid END
		WHERE a.attrelid = ANY($1) AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''`, oids)
	if err != nil {
		return nil, fmt.Errorf("postgres: enum labels of the captured tables: %w", err)
	}
	var cols []enumColumn
	for rows.Next() {
		var c enumColumn
		var rel uint32
		if err := rows.Scan(&rel, &c.column, &c.typ, &c.array, &c.label, &c.text); err != nil {
			rows.Close()
			return nil, err
		}
		c.table = names[rel]
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: enum labels of the captured tables: %w", err)
	}
	labels := map[uint32]string{}
	where := map[string][]string{}
	var renamed map[string][]string
	for _, c := range cols {
		labels[c.label] = c.text
		old, ok := known[c.label]
		if !ok || old == c.text {
			continue
		}
		lit := quoteLiteral(c.text) + "::" + c.typ
		col := tableAlias + "." + pgx.Identifier{c.column}.Sanitize()
		cond := col + " = " + lit
		if c.array {
			cond = lit + " = ANY(" + col + ")"
		}
		where[c.table] = append(where[c.table], cond)
		if renamed == nil {
			renamed = map[string][]string{}
		}
		renamed[c.table] = append(renamed[c.table], old+" -> "+c.text)
	}
	for _, table := range slices.Sorted(maps.Keys(where)) {
		if err := r.readAgain(ctx, table, where[table], "enum-renamed",
			"an enum label was renamed (ALTER TYPE ... RENAME VALUE): the rows that hold it changed without a change pgoutput sends",
			"labels", renamed[table]); err != nil {
			return nil, err
		}
	}
	return labels, nil
}
