package postgres

import (
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// tableInfo is what the catalog says about a table that pgoutput's Relation
// message does not: the primary key, NOT NULL columns and type names.
type tableInfo struct {
	key       []string
	notNull   map[string]bool
	typeNames map[string]string // column -> format_type(atttypid, atttypmod)
}

// relation is one version of a captured table as pgoutput described it.
type relation struct {
	id       uint32
	table    *schema.Table
	decoders []decodeFunc
}

// buildRelation turns a Relation message into a table version. The key comes
// from the catalog's primary key (not from the replica identity flags, which
// under REPLICA IDENTITY FULL mark every column).
func buildRelation(msg *pglogrepl.RelationMessage, info tableInfo) (*relation, error) {
	qn := msg.Namespace + "." + msg.RelationName
	t := &schema.Table{Namespace: msg.Namespace, Name: msg.RelationName}
	r := &relation{id: msg.RelationID, table: t}
	for _, mc := range msg.Columns {
		typeName := info.typeNames[mc.Name]
		if typeName == "" {
			typeName = fmt.Sprintf("oid %d", mc.DataType)
		}
		c, dec, err := columnKind(qn, mc.Name, mc.DataType, mc.TypeModifier, typeName)
		if err != nil {
			return nil, err
		}
		c.Nullable = !info.notNull[mc.Name]
		t.Columns = append(t.Columns, c)
		r.decoders = append(r.decoders, dec)
	}
	for _, k := range info.key {
		i := t.ColumnIndex(k)
		if i < 0 {
			return nil, fmt.Errorf("postgres: table %s: primary-key column %q is not in the replication stream", qn, k)
		}
		t.Key = append(t.Key, i)
	}
	if len(t.Key) == 0 {
		return nil, errNoPrimaryKey(qn)
	}
	return r, nil
}

func errNoPrimaryKey(table string) error {
	return fmt.Errorf("postgres: table %s has no primary key; cdcd needs one to place and fold its changes: "+
		"add one (ALTER TABLE %s ADD PRIMARY KEY (...)) or remove the table from source.postgres.tables", table, table)
}

// decodeTuple decodes a pgoutput tuple (binary format) into a row. Columns
// the tuple marks as unchanged TOAST become schema.Unchanged.
func decodeTuple(r *relation, tup *pglogrepl.TupleData) ([]any, error) {
	if tup == nil {
		return nil, nil
	}
	if len(tup.Columns) != len(r.decoders) {
		return nil, fmt.Errorf("postgres: %s: tuple has %d columns, relation has %d",
			r.table.QualifiedName(), len(tup.Columns), len(r.decoders))
	}
	row := make([]any, len(tup.Columns))
	for i, col := range tup.Columns {
		switch col.DataType {
		case pglogrepl.TupleDataTypeNull:
		case pglogrepl.TupleDataTypeToast:
			row[i] = schema.Unchanged
		case pglogrepl.TupleDataTypeBinary:
			v, err := r.decoders[i](col.Data)
			if err != nil {
				return nil, fmt.Errorf("postgres: %s column %q: %w", r.table.QualifiedName(), r.table.Columns[i].Name, err)
			}
			row[i] = v
		default:
			return nil, fmt.Errorf("postgres: %s column %q: tuple data type %q; cdcd asks for binary tuples",
				r.table.QualifiedName(), r.table.Columns[i].Name, col.DataType)
		}
	}
	return row, nil
}

// txState is the transaction being decoded.
type txState struct {
	xid        uint32
	commitLSN  uint64 // Begin's FinalLSN: the LSN of the commit record
	commitTime time.Time
	next       uint32 // index of the next change in the transaction
}

func (tx *txState) change(t *schema.Table, op source.Op, before, after []any) source.Change {
	c := source.Change{
		Table: t, Op: op, Before: before, After: after,
		Pos: source.PGPosition(tx.commitLSN, tx.next), LSN: tx.commitLSN,
		TxID: uint64(tx.xid), CommitTime: tx.commitTime,
	}
	tx.next++
	return c
}

// keysDiffer reports whether an update changed the primary key.
func keysDiffer(t *schema.Table, before, after []any) bool {
	for _, k := range t.Key {
		if !sameValue(before[k], after[k]) {
			return true
		}
	}
	return false
}

func sameValue(a, b any) bool {
	if ab, ok := a.([]byte); ok {
		bb, ok := b.([]byte)
		return ok && string(ab) == string(bb)
	}
	return a == b
}

// updateChanges turns an Update message into changes: one update, or a
// delete of the old key plus an insert of the new one when the key changed.
func (tx *txState) updateChanges(r *relation, m *pglogrepl.UpdateMessage, out []source.Change) ([]source.Change, error) {
	after, err := decodeTuple(r, m.NewTuple)
	if err != nil {
		return out, err
	}
	before, err := decodeTuple(r, m.OldTuple)
	if err != nil {
		return out, err
	}
	if before != nil && keysDiffer(r.table, before, after) {
		for i, v := range after {
			if schema.IsUnchanged(v) {
				// The insert of the new key needs the value; the old row has it
				// under REPLICA IDENTITY FULL, otherwise the sink resolves it.
				if !schema.IsUnchanged(before[i]) && m.OldTupleType == pglogrepl.UpdateMessageTupleTypeOld {
					after[i] = before[i]
				}
			}
		}
		out = append(out, tx.change(r.table, source.OpDelete, before, nil))
		return append(out, tx.change(r.table, source.OpCreate, nil, after)), nil
	}
	if before == nil {
		// REPLICA IDENTITY DEFAULT and the key did not change: the key is
		// the before image as far as the source knows it.
		before = make([]any, len(after))
		for _, k := range r.table.Key {
			before[k] = after[k]
		}
	}
	return append(out, tx.change(r.table, source.OpUpdate, before, after)), nil
}
