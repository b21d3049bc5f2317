package postgres

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
)

// tableInfo is what the catalog says about a table that pgoutput's Relation
// message does not: the key, NOT NULL columns, type names and declared
// array dimensions. The catalog is read when the message arrives, so these
// may already reflect later DDL; the columns and their types come from the
// message itself and are exact.
type tableInfo struct {
	key       []string // the replica identity index's columns, else the primary key's
	notNull   map[string]bool
	typeNames map[string]string // column -> format_type(atttypid, atttypmod)
	dims      map[string]int    // column -> attndims
}

// relation is one version of a captured table as pgoutput described it.
type relation struct {
	id    uint32
	table *schema.Table
	types []*pgdecode.Type
	oids  []uint32 // the columns' type OIDs, to render a faulty value
	// checkUTF8: text values are checked to be valid UTF-8 (the database's
	// encoding is SQL_ASCII, which stores any bytes unchecked).
	checkUTF8 bool
}

// buildRelation turns a Relation message and its columns' types into a
// table version. The key comes from the catalog (tableInfo.key), not from
// the message's flags, which under REPLICA IDENTITY FULL mark every column.
func buildRelation(msg *pglogrepl.RelationMessage, info tableInfo, types []*pgdecode.Type) (*relation, error) {
	qn := msg.Namespace + "." + msg.RelationName
	if len(types) != len(msg.Columns) {
		return nil, fmt.Errorf("postgres: table %s: %d column types for %d columns", qn, len(types), len(msg.Columns))
	}
	t := &schema.Table{Namespace: msg.Namespace, Name: msg.RelationName}
	r := &relation{id: msg.RelationID, table: t, types: types, oids: make([]uint32, len(msg.Columns))}
	for i, mc := range msg.Columns {
		r.oids[i] = mc.DataType
		c := types[i].Col
		c.Name = mc.Name
		c.SourceType = types[i].Name // the message's type, not the catalog's now
		if c.SourceType == "" {
			c.SourceType = info.typeNames[mc.Name]
		}
		c.Nullable = !info.notNull[mc.Name]
		t.Columns = append(t.Columns, c)
	}
	for _, k := range info.key {
		i := t.ColumnIndex(k)
		if i < 0 {
			return nil, &TableError{Table: qn, Err: fmt.Errorf("key column %q is not in the replication stream", k)}
		}
		t.Key = append(t.Key, i)
	}
	if len(t.Key) == 0 {
		return nil, errNoKey(qn)
	}
	return r, nil
}

// errNoKey refuses a table without a primary key or replica identity index.
func errNoKey(table string) error {
	return &TableError{Table: table, Err: fmt.Errorf("has no primary key; cdcd needs one to place and fold its changes "+
		"(and PostgreSQL rejects its UPDATEs and DELETEs once it is published). Fix: add one (ALTER TABLE %s ADD PRIMARY KEY (...)), "+
		"or name a unique index over NOT NULL columns (ALTER TABLE %s REPLICA IDENTITY USING INDEX ...), "+
		"or remove the table from source.postgres.tables", table, table)}
}

// errReplicaIdentityNothing refuses a table whose updates and deletes
// could not be published.
func errReplicaIdentityNothing(table string) error {
	return &TableError{Table: table, Err: fmt.Errorf("has REPLICA IDENTITY NOTHING: its UPDATEs and DELETEs carry no key, so "+
		"PostgreSQL refuses them while the table is published and cdcd could not place them. Fix: ALTER TABLE %s "+
		"REPLICA IDENTITY DEFAULT (with a primary key), USING INDEX ..., or FULL; or remove the table from source.postgres.tables", table)}
}

// rowAlloc gives the stream's decoded rows their memory: rows cut from
// chunks of values, and numbers and texts boxed from a slab
// (pgdecode.Slab), a few allocations per chunk where a row took one per
// value and one for itself. A write-once rowAlloc (the zero value) fills
// each chunk once and leaves it to the collector, so a row may be kept (it
// keeps its chunks alive). A reusable one (newRowAlloc(true)) keeps its
// standard chunks and its slab's, and reset hands them out again: the
// stream resets it once the Emitter has taken a batch and nothing else
// refers to its rows (streamer.recycleRows); otherwise it forgets them.
// The changes' positions are always cut from write-once chunks (a kept
// position keeps its chunk of 512, 6 KB, alive: the emitter keeps copies of
// its newest positions, but a log that appends after Submit returned reads
// the records' position headers then).
type rowAlloc struct {
	vals   []any
	scalar pgdecode.Slab
	pos    []byte
	// reuse: chunks holds the standard chunks of values cut since they
	// were made, in order, and reset hands them out again from the first;
	// next is the index of the next one to hand out.
	reuse  bool
	chunks [][]any
	next   int
}

// newRowAlloc returns a rowAlloc, reusable (reset) when reuse is set.
func newRowAlloc(reuse bool) rowAlloc {
	a := rowAlloc{reuse: reuse}
	if reuse {
		a.scalar = *pgdecode.NewReusableSlab()
	}
	return a
}

const (
	rowChunk = 4096 // values per chunk of rows
	posChunk = 512  // positions per chunk
)

// position returns the position (commitLSN, idx), its capacity its own.
func (a *rowAlloc) position(commitLSN uint64, idx uint32) source.Position {
	if cap(a.pos)-len(a.pos) < pgpos.Len {
		a.pos = make([]byte, 0, posChunk*pgpos.Len)
	}
	start := len(a.pos)
	a.pos = pgpos.Append(a.pos, commitLSN, idx)
	return source.Position(a.pos[start:len(a.pos):len(a.pos)])
}

// row returns n values, all nil, that no other row shares.
func (a *rowAlloc) row(n int) []any {
	if cap(a.vals)-len(a.vals) < n {
		a.vals = a.chunk(n)
	}
	start := len(a.vals)
	a.vals = a.vals[:start+n]
	return a.vals[start : start+n : start+n]
}

// chunk returns an empty chunk for at least n values: a kept one after
// reset, else a new one (kept when reusable and of the standard size; a
// row wider than a chunk gets its own, left to the collector).
func (a *rowAlloc) chunk(n int) []any {
	if !a.reuse || n > rowChunk {
		return make([]any, 0, max(rowChunk, n))
	}
	if a.next < len(a.chunks) {
		a.next++
		return a.chunks[a.next-1][:0]
	}
	c := make([]any, 0, rowChunk)
	a.chunks = append(a.chunks, c)
	a.next = len(a.chunks)
	return c
}

// reset makes a reusable rowAlloc cut its rows and box its values from its
// first chunks again: every row and value it gave out is overwritten by
// the next ones. REQUIRES: nothing refers to a row or value it gave out
// since the last reset or forget.
func (a *rowAlloc) reset() {
	for _, c := range a.chunks[:a.next] {
		clear(c[:cap(c)]) // rows are handed out with every value nil
	}
	a.vals, a.next = nil, 0
	a.scalar.Reset()
}

// forget leaves the chunks given out so far to whatever still refers to
// their rows and values: a reusable rowAlloc makes new ones.
func (a *rowAlloc) forget() {
	if a.reuse {
		*a = rowAlloc{reuse: true, scalar: *pgdecode.NewReusableSlab(), pos: a.pos}
	}
}

// decodeTuple decodes a pgoutput tuple into a row (from a, when given).
// Columns the tuple marks as unchanged TOAST become schema.Unchanged;
// values of types without a binary form arrive as text. A value cdcd
// cannot carry (valueError) does not stop the others: the row comes back
// with nil in its place, with a *ValueError for the first such column.
func decodeTuple(r *relation, cols []tupleColumn, present bool, a *rowAlloc) ([]any, error) {
	if !present {
		return nil, nil
	}
	if len(cols) != len(r.types) {
		return nil, fmt.Errorf("postgres: %s: tuple has %d columns, relation has %d",
			r.table.QualifiedName(), len(cols), len(r.types))
	}
	var row []any
	var slab *pgdecode.Slab
	if a != nil {
		row, slab = a.row(len(cols)), &a.scalar
	} else {
		row = make([]any, len(cols))
	}
	var bad *ValueError
	for i, col := range cols {
		switch col.kind {
		case pglogrepl.TupleDataTypeNull:
		case pglogrepl.TupleDataTypeToast:
			row[i] = schema.Unchanged
		case pglogrepl.TupleDataTypeBinary, pglogrepl.TupleDataTypeText:
			if (col.kind == pglogrepl.TupleDataTypeText) != r.types[i].Text {
				return nil, fmt.Errorf("postgres: %s column %q: %w: tuple data type %q", r.table.QualifiedName(), r.table.Columns[i].Name, pgdecode.ErrBadValue, col.kind)
			}
			v, err := r.decodeValue(i, col.data, slab)
			if err != nil {
				if bad == nil {
					bad = err
				}
				continue
			}
			row[i] = v
		default:
			return nil, fmt.Errorf("postgres: %s column %q: %w: tuple data type %q", r.table.QualifiedName(), r.table.Columns[i].Name, pgdecode.ErrBadValue, col.kind)
		}
	}
	if bad != nil {
		return row, bad
	}
	return row, nil
}

// decodeValue decodes column i's value b (from the slab s, when given and
// the type has a slab decoder), checking text is UTF-8 where the database
// does not.
func (r *relation) decodeValue(i int, b []byte, s *pgdecode.Slab) (any, *ValueError) {
	if len(b) > source.MaxChangeBytes { // refused before it is copied
		return nil, r.valueError(i, &source.TooLargeError{Bytes: len(b)}, nil)
	}
	var v any
	var err error
	if t := r.types[i]; t.Slab != nil && s != nil {
		v, err = t.Slab(b, s)
	} else {
		v, err = t.Decode(b)
	}
	if err == nil && r.checkUTF8 && !validText(v) {
		err = errInvalidUTF8
	}
	if err != nil {
		return nil, r.valueError(i, err, b)
	}
	return v, nil
}

// decodeFieldsInto decodes a row of a binary COPY (nil fields are NULL)
// into row, which has a slot per column. Like decodeTuple, a value cdcd
// cannot carry leaves nil in its place and the first is returned as a
// *ValueError.
func decodeFieldsInto(r *relation, fields [][]byte, row []any, s *pgdecode.Slab) error {
	if len(fields) != len(r.types) || len(row) != len(r.types) {
		return fmt.Errorf("postgres: copy of %s returned %d columns, want %d", r.table.QualifiedName(), len(fields), len(r.types))
	}
	var bad *ValueError
	for i, f := range fields {
		if f == nil {
			row[i] = nil
			continue
		}
		v, err := r.decodeValue(i, f, s)
		if err != nil && bad == nil {
			bad = err
		}
		row[i] = v
	}
	if bad != nil {
		return bad
	}
	return nil
}

// valueError says which value of the row failed; raw is its encoded form.
func (r *relation) valueError(i int, err error, raw []byte) *ValueError {
	c := r.table.Columns[i]
	return &ValueError{Table: r.table.QualifiedName(), Column: c.Name, Type: c.SourceType, Index: i,
		Raw: append([]byte(nil), raw...), Err: err}
}

// txState is the transaction being decoded.
type txState struct {
	xid        uint32
	commitLSN  uint64 // the LSN of the commit record (Begin's FinalLSN, Stream Commit's CommitLSN)
	commitTime time.Time
	next       uint32 // index of the next change in the transaction
	lsn        uint64 // the WAL position of the message being decoded
	// alloc, when set, gives positions and key-only before images their
	// memory (the stream's rowAlloc; txState is made anew each transaction).
	alloc *rowAlloc
}

// errTooManyChanges: a transaction's change index would wrap.
var errTooManyChanges = errors.New("postgres: transaction has more than 2^32-1 changes; positions cannot order them")

func (tx *txState) change(t *schema.Table, op source.Op, before, after []any) (source.Change, error) {
	if tx.next == math.MaxUint32 {
		return source.Change{}, errTooManyChanges
	}
	var pos source.Position
	if tx.alloc != nil {
		pos = tx.alloc.position(tx.commitLSN, tx.next)
	} else {
		pos = pgpos.New(tx.commitLSN, tx.next)
	}
	c := source.Change{
		Table: t, Op: op, Before: before, After: after,
		Pos: pos, LSN: tx.commitLSN, EventLSN: tx.lsn,
		TxID: uint64(tx.xid), CommitTime: tx.commitTime,
	}
	tx.next++
	return c, nil
}

// keysDiffer reports whether an update changed the key.
func keysDiffer(t *schema.Table, before, after []any) bool {
	for _, k := range t.Key {
		if !pgdecode.Equal(before[k], after[k]) {
			return true
		}
	}
	return false
}

// updateChanges turns an Update message, its rows decoded, into changes:
// one update, or a delete of the old key plus an insert of the new one when
// the key changed.
func (tx *txState) updateChanges(r *relation, m *rowMessage, before, after []any, out []source.Change) ([]source.Change, error) {
	if before != nil && keysDiffer(r.table, before, after) {
		unchanged := false
		for i, v := range after {
			// The insert of the new key needs every value; the old row has
			// the unchanged ones under REPLICA IDENTITY FULL.
			if schema.IsUnchanged(v) && m.oldKind == pglogrepl.UpdateMessageTupleTypeOld && !schema.IsUnchanged(before[i]) {
				after[i] = before[i]
			}
			unchanged = unchanged || schema.IsUnchanged(after[i])
		}
		del, err := tx.change(r.table, source.OpDelete, before, nil)
		if err != nil {
			return out, err
		}
		del.KeyChange = unchanged
		// Otherwise the insert carries the old key as its before image, so
		// a consumer can take the unchanged values from the old key's row.
		var from []any
		if unchanged {
			from = before
		}
		ins, err := tx.change(r.table, source.OpCreate, from, after)
		if err != nil {
			return out, err
		}
		return append(out, del, ins), nil
	}
	if before == nil {
		// The key did not change and the replica identity sent no old row:
		// the before image is the key as far as the source knows it.
		if tx.alloc != nil {
			before = tx.alloc.row(len(after))
		} else {
			before = make([]any, len(after))
		}
		for _, k := range r.table.Key {
			before[k] = after[k]
		}
	}
	c, err := tx.change(r.table, source.OpUpdate, before, after)
	if err != nil {
		return out, err
	}
	return append(out, c), nil
}
