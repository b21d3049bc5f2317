package mysql

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
)

// The columns of each configured table, kept in the reader's state so that
// what a table's shape changed is known across restarts (as
// source/postgres/columns.go does for PostgreSQL):
//
//   - a column added with a default while the reader was not there to see
//     the ALTER (cdcd stopped or killed, or the session began after it) is
//     noticed when the session starts: the information schema has it, the
//     record does not, and reReadAdded decides as at a DDL event;
//   - a column dropped at the source is named in every later version's
//     schema.Table.Dropped, so a sink that keeps the column writes NULL
//     there, not the initial-default that rows predating the column read.
//
// A table has no record until the first session that knows this record;
// from then on the record follows the information schema at the session's
// start and at each DDL statement that names the table.

// tableColumns is a table's record: the columns it had when last described
// and the columns dropped since they were seen (in the order they went).
type tableColumns struct {
	Columns []string `json:"columns"`
	// Types are the columns' types, in Columns' order (retyped.go); none
	// in a record saved before they were kept.
	Types   []columnType `json:"types,omitempty"`
	Dropped []string     `json:"dropped,omitempty"`
	// At is the ordinal of the newest DDL statement the record followed:
	// after a crash the binlog replays statements up to it, which
	// columnMoves must not take for new ones.
	At uint64 `json:"at,omitempty"`
}

func columnsKey(qn string) string { return "mysql/columns/" + qn }

// columnRecord is the table's record, read from the state once; nil when
// none was saved.
func (r *Reader) columnRecord(ctx context.Context, qn string) (*tableColumns, error) {
	r.colMu.Lock()
	defer r.colMu.Unlock()
	if rec, ok := r.columns[qn]; ok {
		return rec, nil
	}
	raw, err := r.state.Load(ctx, columnsKey(qn))
	if err != nil {
		return nil, err
	}
	var rec *tableColumns
	if raw != nil {
		rec = &tableColumns{}
		if err := json.Unmarshal(raw, rec); err != nil {
			return nil, fmt.Errorf("mysql: the stored columns of %s: %w", qn, err)
		}
	}
	if r.columns == nil {
		r.columns = map[string]*tableColumns{}
	}
	r.columns[qn] = rec
	return rec, nil
}

// syncColumns records d's columns, described at the DDL statement of
// ordinal at (0: at the session's start). With decide, columns d has and
// the record lacks are judged by reReadAdded first, so what it starts is
// durable before the record says the columns were seen.
func (s *streamer) syncColumns(ctx context.Context, d *tableDesc, at uint64, decide bool) error {
	qn := d.qualified()
	rec, err := s.r.columnRecord(ctx, qn)
	if err != nil {
		return err
	}
	names := make([]string, len(d.table.Columns))
	for i, c := range d.table.Columns {
		names[i] = c.Name
	}
	types := make([]columnType, len(d.cols))
	for i, c := range d.cols {
		types[i] = typeOf(c)
	}
	if rec != nil && slices.Equal(rec.Columns, names) && slices.Equal(rec.Types, types) && at <= rec.At {
		return nil
	}
	next := &tableColumns{Columns: names, Types: types, At: at}
	if rec != nil {
		next.At = max(at, rec.At)
		for _, c := range slices.Concat(rec.Dropped, rec.Columns) {
			if !slices.Contains(names, c) && !slices.Contains(next.Dropped, c) {
				next.Dropped = append(next.Dropped, c)
			}
		}
		if decide {
			if err := s.reReadAdded(ctx, func(c string) bool { return slices.Contains(rec.Columns, c) }, d); err != nil {
				return err
			}
		}
		if err := s.reReadRetyped(ctx, d, rec); err != nil {
			return err
		}
	}
	raw, err := json.Marshal(next)
	if err != nil {
		return err
	}
	if err := s.r.state.Save(ctx, columnsKey(qn), raw); err != nil {
		return err
	}
	s.r.colMu.Lock()
	s.r.columns[qn] = next
	s.r.colMu.Unlock()
	return nil
}

// dropped is what a version of table qn, which has the columns has says
// it has, lacks of the columns dropped at the source (from the record the
// session's start loaded).
func (r *Reader) dropped(qn string, has func(string) bool) []string {
	r.colMu.Lock()
	defer r.colMu.Unlock()
	rec := r.columns[qn]
	if rec == nil {
		return nil
	}
	var out []string
	for _, c := range rec.Dropped {
		if !has(c) {
			out = append(out, c)
		}
	}
	return out
}
