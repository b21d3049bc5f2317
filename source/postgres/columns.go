package postgres

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/cdcd-dev/cdcd/schema"
)

// The columns of each captured table, kept in the reader's state so that
// what a new version changed is known across restarts:
//
//   - a column added with a default that the destination cannot give to
//     the rows already there (reReadAdded) is noticed at the first Relation
//     message after a restart too, when the ALTER came while cdcd was
//     stopped (or before it had streamed the table since its start);
//   - a column dropped at the source is named in every later version's
//     schema.Table.Dropped, so a sink that keeps the column writes NULL
//     there, not the value rows that predate the column hold.

// tableColumns is a table's record: the column names of its latest version
// (with their attnums, when the version was described from the catalog)
// and the columns dropped since they were seen (in the order they went).
type tableColumns struct {
	Columns []string `json:"columns"`
	IDs     []int    `json:"ids,omitempty"`
	Dropped []string `json:"dropped,omitempty"`
	// At is the newest commit LSN whose Relation message changed the
	// record: after a crash the stream replays older versions, whose
	// differences from the record are the record's past, not new DDL.
	At uint64 `json:"at,omitempty"`
}

// moved are the columns of a version (names, with their attnums ids when
// known) whose values at the source are not what the mirror's column of
// that name holds, though no change was sent for the rows:
//
//   - recreated: the name is recorded but the column is another one,
//     dropped since it was seen, or of another attnum (dropped and added
//     again between two versions, or while cdcd was stopped); the rows
//     hold the new column's default (or NULL), the mirror the old values;
//   - renamed: a new name with a recorded attnum (RENAME COLUMN); the rows
//     hold the values under the new name, the mirror's new column nothing.
func (rec *tableColumns) moved(names []string, ids []int) (recreated, renamed []string) {
	known := ids != nil && len(rec.IDs) == len(rec.Columns)
	for i, n := range names {
		j := slices.Index(rec.Columns, n)
		switch {
		case slices.Contains(rec.Dropped, n):
			recreated = append(recreated, n)
		case !known || ids[i] == 0:
		case j >= 0 && rec.IDs[j] != ids[i]:
			recreated = append(recreated, n)
		case j < 0 && slices.Contains(rec.IDs, ids[i]):
			renamed = append(renamed, n)
		}
	}
	return recreated, renamed
}

func (r *Reader) columnsKey(qualified string) string {
	return r.stateKey() + "/columns/" + qualified
}

// columnsOf is the table's record, read from the state once; nil when none
// was saved.
func (r *Reader) columnsOf(ctx context.Context, qualified string) (*tableColumns, error) {
	if tc, ok := r.cols[qualified]; ok {
		return tc, nil
	}
	var tc tableColumns
	found, err := loadJSON(ctx, r.state, r.columnsKey(qualified), &tc)
	if err != nil {
		return nil, err
	}
	if !found {
		r.cols[qualified] = nil
		return nil, nil
	}
	r.cols[qualified] = &tc
	return &tc, nil
}

// version interns t (known.intern) after setting its Dropped columns from
// the table's record; ids are its columns' attnums (nil when not described
// from the catalog), at the commit LSN of the transaction whose Relation
// message described it (0: not from the stream). When t's columns differ
// from the recorded ones, added is called with the recorded ones (when
// there are any; without those recreated) and the moved ones before t's
// are recorded, so what it starts is durable first — unless the stream
// replays a version from before the record (at ≤ its At).
func (r *Reader) version(ctx context.Context, t *schema.Table, ids []int, at uint64, added func(prev, recreated, renamed []string) error) (*schema.Table, error) {
	qn := t.QualifiedName()
	rec, err := r.columnsOf(ctx, qn)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = c.Name
	}
	var recreated, renamed []string
	replay := rec != nil && at != 0 && at <= rec.At
	if rec != nil && !replay {
		recreated, renamed = rec.moved(names, ids)
		if len(recreated)+len(renamed) == 0 && slices.Equal(rec.Columns, names) && (ids == nil || slices.Equal(rec.IDs, ids)) {
			t.Dropped = rec.Dropped
			return r.known.intern(t), nil
		}
	}
	next := &tableColumns{Columns: names, IDs: ids, At: at}
	if rec != nil {
		next.At = max(at, rec.At)
		for _, d := range slices.Concat(rec.Dropped, rec.Columns) {
			if !slices.Contains(names, d) && !slices.Contains(next.Dropped, d) {
				next.Dropped = append(next.Dropped, d)
			}
		}
		if added != nil && !replay {
			prev := slices.DeleteFunc(slices.Clone(rec.Columns), func(n string) bool { return slices.Contains(recreated, n) })
			if err := added(prev, recreated, renamed); err != nil {
				return nil, err
			}
		}
	}
	t.Dropped = next.Dropped
	if err := saveJSON(ctx, r.state, r.columnsKey(qn), next); err != nil {
		return nil, err
	}
	r.cols[qn] = next
	return r.known.intern(t), nil
}

// catalogSettle bounds the wait for a just-committed ALTER to show in the
// catalog (describeCurrent).
const catalogSettle = 3 * time.Second

// describeCurrent is describeTable for a Relation message m of a
// transaction that committed at committed. PostgreSQL flushes a commit
// record (which the walsender may then decode and send) a moment before
// the transaction becomes visible to other sessions: a catalog read in
// that moment misses the columns the transaction added, and the version
// would lack their NOT NULL and their default. So while a column of m is
// missing from the catalog and the commit is recent, the catalog is read
// again; an older commit's column may have been dropped since, and is
// described as it is. A version cdcd would refuse (no key: the commit
// that added the primary key back may not show yet) is read again the
// same way before it stops the table.
func describeCurrent(ctx context.Context, q querier, m *pglogrepl.RelationMessage, committed time.Time) (*catalogTable, error) {
	deadline := time.Now().Add(catalogSettle)
	for {
		ct, err := describeTable(ctx, q, m.RelationID)
		refused := errors.As(err, new(*TableError)) && !errors.Is(err, errNoTable)
		if (err != nil && !refused) || err == nil && !missingColumn(ct, m) || time.Since(committed) > catalogSettle || time.Now().After(deadline) {
			return ct, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// missingColumn reports whether a column of m is not in ct.
func missingColumn(ct *catalogTable, m *pglogrepl.RelationMessage) bool {
	for _, mc := range m.Columns {
		if ct.column(mc.Name).name == "" {
			return true
		}
	}
	return false
}
