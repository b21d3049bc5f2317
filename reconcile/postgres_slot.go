package reconcile

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"

	"github.com/cdcd-dev/cdcd/internal/pgident"
)

// The pipeline's position, from its replication slot: the reader confirms
// a position only once every change before it is durable in the log
// (DESIGN.md, exactly-once stage 1), so a confirmed_flush_lsn at or after
// a read's High says the log holds every change that read could see.

// RowHash is hashtextextended(text, 0).
func (p *Postgres) RowHash(text []byte) uint64 { return pgHash(text, 0) }

// reconcileMessage is the prefix of the message Covered writes so a
// running reader confirms past a read although the tables are idle.
const reconcileMessage = "cdcd.reconcile"

// Covered reports whether the slot has confirmed high, and whether a
// reader streams from it. While it has not, it writes a non-transactional
// logical message (after high): the reader confirms the position of such a
// message once everything before it is durable.
func (p *Postgres) Covered(ctx context.Context, high []byte) (bool, bool, error) {
	st, err := p.Slot(ctx)
	if err != nil {
		return false, false, err
	}
	if bytes.Compare(st.Confirmed, high) >= 0 {
		return true, st.Active, nil
	}
	if st.Active {
		if _, err := p.primary.Exec(ctx, "SELECT pg_logical_emit_message(false, $1::text, ''::text)", reconcileMessage); err != nil {
			return false, true, fmt.Errorf("reconcile: write a logical message (the pipeline's role needs EXECUTE on pg_logical_emit_message): %w", err)
		}
	}
	return false, st.Active, nil
}

// Pending adds to u the keys of t that changes the slot holds (not read
// by the stopped pipeline yet) up to high change: it peeks at the slot
// (pg_logical_slot_peek_binary_changes), which consumes nothing.
func (p *Postgres) Pending(ctx context.Context, t *Table, high []byte, u *unsettled) error {
	ns, name, err := pgident.Split(t.Name)
	if err != nil {
		return err
	}
	rows, err := p.primary.Query(ctx, `SELECT data FROM pg_logical_slot_peek_binary_changes($1, $2::pg_lsn, NULL,
		'proto_version', '1', 'publication_names', $3)`, p.cfg.Slot, posLSN(high).String(), p.cfg.Publication)
	if err != nil {
		return fmt.Errorf("reconcile: read the changes the slot %s holds: %w", p.cfg.Slot, err)
	}
	defer rows.Close()
	var relID uint32
	var keyCols []int // the key columns' indexes in the relation's tuples
	lits := make([][]string, len(t.Key))
	addTuple := func(tup *pglogrepl.TupleData) {
		if tup == nil {
			return
		}
		for i, ci := range keyCols {
			if ci >= len(tup.Columns) || tup.Columns[ci].DataType != pglogrepl.TupleDataTypeText {
				return
			}
			lits[i] = append(lits[i], string(tup.Columns[ci].Data))
		}
	}
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return err
		}
		msg, err := pglogrepl.Parse(data)
		if err != nil {
			return fmt.Errorf("reconcile: a change the slot %s holds: %w", p.cfg.Slot, err)
		}
		switch m := msg.(type) {
		case *pglogrepl.RelationMessage:
			if m.Namespace != ns || m.RelationName != name {
				continue
			}
			relID, keyCols = m.RelationID, nil
			for _, ci := range t.Key {
				for j, c := range m.Columns {
					if c.Name == t.Columns[ci].Name {
						keyCols = append(keyCols, j)
					}
				}
			}
			if len(keyCols) != len(t.Key) {
				u.all = true // another shape of the key: every key may have changed
			}
		case *pglogrepl.InsertMessage:
			if m.RelationID == relID {
				addTuple(m.Tuple)
			}
		case *pglogrepl.UpdateMessage:
			if m.RelationID == relID {
				addTuple(m.OldTuple)
				addTuple(m.NewTuple)
			}
		case *pglogrepl.DeleteMessage:
			if m.RelationID == relID {
				addTuple(m.OldTuple)
			}
		case *pglogrepl.TruncateMessage:
			for _, id := range m.RelationIDs {
				if id == relID {
					u.all = true
				}
			}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reconcile: read the changes the slot %s holds: %w", p.cfg.Slot, err)
	}
	return p.canonKeys(ctx, t, lits, u)
}

// canonKeys turns key literals (per key column) into canonical keys, by
// the server.
func (p *Postgres) canonKeys(ctx context.Context, t *Table, lits [][]string, u *unsettled) error {
	if len(lits) == 0 || len(lits[0]) == 0 {
		return nil
	}
	var sel, from []string
	args := make([]any, len(t.Key))
	for i, ci := range t.Key {
		c := t.Columns[ci]
		alias := fmt.Sprintf("k%d", i)
		// The canonical SQL names the column; here it reads the literal.
		sel = append(sel, strings.ReplaceAll(c.SQL, pgQuote(c.Name), fmt.Sprintf("(%s.v::%s)", alias, c.Type)))
		args[i] = lits[i]
		join := fmt.Sprintf("unnest($%d::text[]) WITH ORDINALITY %s(v, o)", i+1, alias)
		if i > 0 {
			join += " ON " + alias + ".o = k0.o"
			from = append(from, "JOIN "+join)
		} else {
			from = append(from, join)
		}
	}
	rows, err := p.primary.Query(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM "+strings.Join(from, " "), args...)
	if err != nil {
		return fmt.Errorf("reconcile: %s: read pending keys: %w", t.Name, err)
	}
	defer rows.Close()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return err
		}
		u.add(textsOf(vals))
	}
	return rows.Err()
}
