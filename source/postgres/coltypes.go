package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// ALTER TABLE ... ALTER COLUMN ... TYPE ... [USING expr] rewrites every
// row of the table into a new relation file, and the rewrite is not
// decoded: pgoutput sends nothing for those rows, so the mirror would keep
// their old values (a USING upper(v), n * 100, a numeric rounded to its
// new scale) with no word. The publication check (every start and
// PublicationCheckInterval) keeps each captured column's type and the
// table's relfilenode in the source's state (sourceState.ColumnTypes, so a
// change made while cdcd was stopped is seen at the next start). A column
// whose type changed while the relfilenode changed too (the table was
// rewritten) has the whole table read again by an incremental snapshot,
// origin "column-type-changed" (replacing the mirror when a key column
// changed: a USING may have changed the keys); a partitioned table has no relation file
// of its own (relfilenode 0), so any type change of one is read again. A
// change PostgreSQL makes without a rewrite (varchar(40) -> varchar(80),
// varchar -> text: binary-coercible, every stored value kept) reads
// nothing. A rewrite that keeps the type (VACUUM FULL, CLUSTER, or ALTER
// ... TYPE to the same type with a USING) changes the relfilenode alone
// and is not a trigger: the catalog cannot tell the two apart.

// tableTypes is a captured table's columns' types as last checked.
type tableTypes struct {
	OID uint32 `json:"oid"`
	// Rel is the table's relfilenode (0 for a partitioned table).
	Rel uint32 `json:"relfilenode"`
	// Types are format_type() of each captured column, by name.
	Types map[string]string `json:"types"`
}

// typeChange is one column whose type changed under a rewrite.
type typeChange struct {
	column, was, now string
}

// checkColumnTypes reads the captured tables' column types and
// relfilenodes and, against known (those of the last check; nil at the
// first), queues an incremental snapshot of each table a type change
// rewrote. It returns the types to keep once those snapshots are queued.
func (r *Reader) checkColumnTypes(ctx context.Context, q querier, checks []tableCheck, known map[string]tableTypes) (map[string]tableTypes, error) {
	names := map[uint32]string{}
	keys := map[string][]string{}
	var oids []uint32
	for _, tc := range checks {
		if tc.t != nil {
			oids = append(oids, tc.t.oid)
			names[tc.t.oid] = tc.name
			keys[tc.name] = tc.t.key
		}
	}
	if len(oids) == 0 {
		return known, nil
	}
	rows, err := q.Query(ctx, `SELECT c.oid, c.relfilenode, a.attname, format_type(a.atttypid, a.atttypmod)
		FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
		WHERE c.oid = ANY($1) AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''`, oids)
	if err != nil {
		return nil, fmt.Errorf("postgres: column types of the captured tables: %w", err)
	}
	now := map[string]tableTypes{}
	for rows.Next() {
		var oid, rel uint32
		var col, typ string
		if err := rows.Scan(&oid, &rel, &col, &typ); err != nil {
			rows.Close()
			return nil, err
		}
		name := names[oid]
		tt, ok := now[name]
		if !ok {
			tt = tableTypes{OID: oid, Rel: rel, Types: map[string]string{}}
		}
		tt.Types[col] = typ
		now[name] = tt
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: column types of the captured tables: %w", err)
	}
	for _, table := range slices.Sorted(maps.Keys(now)) {
		changes := retyped(known[table], now[table])
		if len(changes) == 0 {
			continue
		}
		cols := make([]string, len(changes))
		keyChanged := false
		msg := "a captured column's type changed and the table was rewritten, with no change pgoutput sends for its rows: reading the table again"
		if !(r.cfg.Snapshot || r.cfg.Incremental.Load) {
			msg = "a captured column's type changed and the table was rewritten, with no change pgoutput sends for its rows (snapshot: never, so not read again)"
		}
		for i, c := range changes {
			cols[i] = c.column
			keyChanged = keyChanged || slices.Contains(keys[table], c.column)
			r.logger.Warn(msg, "table", table, "column", c.column, "old_type", c.was, "new_type", c.now)
		}
		if keyChanged {
			if err := r.replaceRetyped(ctx, table, cols); err != nil {
				return nil, err
			}
			continue
		}
		if err := r.readAgain(ctx, table, nil, "column-type-changed",
			"a column's type changed (ALTER TABLE ... ALTER COLUMN ... TYPE) and the rewrite changed rows without a change pgoutput sends",
			"columns", strings.Join(cols, ", ")); err != nil {
			return nil, err
		}
	}
	return now, nil
}

// replaceRetyped queues a replacing snapshot of table, a key column of
// which changed its type under a rewrite: a USING may have changed the
// keys themselves, and a snapshot that only upserts would leave the old
// keys' rows in the mirror.
func (r *Reader) replaceRetyped(ctx context.Context, table string, cols []string) error {
	if !(r.cfg.Snapshot || r.cfg.Incremental.Load) {
		r.logger.Warn("a key column's type changed under a rewrite: the mirror may hold rows under keys the table no longer has (snapshot: never)",
			"table", table, "columns", strings.Join(cols, ", "), "what_to_do", "cdcd snapshot -c FILE --replace "+table)
		return nil
	}
	req := snapshot.Request{Table: table, Replace: true, Origin: "column-type-changed"}
	r.logger.Info("a key column's type changed under a rewrite: replacing the table's mirror with an incremental snapshot",
		"table", table, "columns", strings.Join(cols, ", "))
	if r.inc.Queued(table) {
		return r.inc.Restart(ctx, req)
	}
	return r.inc.Submit(ctx, req)
}

// retyped lists the columns whose type changed from was to now under a
// rewrite: the relfilenode changed, or the table is partitioned (its
// partitions' files are not followed). A table seen for the first time,
// or a new table under the name (another OID: a fault of its own), lists
// none.
func retyped(was, now tableTypes) []typeChange {
	if was.OID == 0 || was.OID != now.OID || (now.Rel != 0 && was.Rel == now.Rel) {
		return nil
	}
	var out []typeChange
	for _, col := range slices.Sorted(maps.Keys(now.Types)) {
		if old, ok := was.Types[col]; ok && old != now.Types[col] {
			out = append(out, typeChange{column: col, was: old, now: now.Types[col]})
		}
	}
	return out
}

// sameTypes reports whether a and b hold the same tables' types.
func sameTypes(a, b map[string]tableTypes) bool {
	return maps.EqualFunc(a, b, func(x, y tableTypes) bool {
		return x.OID == y.OID && x.Rel == y.Rel && maps.Equal(x.Types, y.Types)
	})
}
