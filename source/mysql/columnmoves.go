package mysql

import (
	"context"
	"slices"
	"strings"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Column moves: DDL that changes which values a column name holds in rows
// the binlog sends no event for.
//
//   - ALTER TABLE … DROP COLUMN c, then (in the same statement or a later
//     one) ADD COLUMN c: a new column, whose default (or NULL) every row
//     already there holds at the source, where the mirror's c holds the
//     old column's values.
//   - ALTER TABLE … RENAME COLUMN x TO c, or CHANGE x c …: the rows hold
//     x's values as c, where the mirror's c is a new column.
//
// The information schema, read when the reader meets the statement, can
// be ahead of it (the stream lags), so it cannot tell a column re-added
// from one that never went; the statement does. cdcd recognises these
// clauses of ALTER TABLE (the column names only; the table's new shape
// still comes from the information schema) and reads the table's rows
// again, as PostgreSQL's reader does from attnums (source/postgres,
// columns.go).

// columnOp is one column clause of an ALTER TABLE statement.
type columnOp struct {
	kind        byte // 'a' ADD, 'd' DROP, 'r' RENAME or CHANGE
	name, to    string
	ifNotExists bool // ADD … IF NOT EXISTS: maybe nothing was added
}

// notColumn are the words after ADD or DROP that start a clause about
// something else than a column.
var notColumn = []string{"INDEX", "KEY", "PRIMARY", "UNIQUE", "FULLTEXT", "SPATIAL", "FOREIGN", "CONSTRAINT", "CHECK",
	"PARTITION", "PERIOD", "SYSTEM", "VERSIONING"}

// alterTable reads the head of an ALTER [ONLINE | IGNORE] TABLE [IF
// EXISTS] statement: the table it alters (lower-cased [database, table])
// and the tokens of its clauses; ok is false for any other statement.
func alterTable(q, defaultDB string) (tk *tokens, table [2]string, ok bool) {
	tk = newTokens(q)
	if tk.word() != "ALTER" {
		return nil, table, false
	}
	w := tk.word()
	for w == "ONLINE" || w == "IGNORE" {
		w = tk.word()
	}
	if w != "TABLE" {
		return nil, table, false
	}
	tk.ifExists()
	table, ok = tk.name(defaultDB)
	return tk, table, ok
}

// parseColumnOps reads the column clauses of an ALTER TABLE statement and
// the table it alters (lower-cased [database, table]); ok is false for
// any other statement.
func parseColumnOps(q, defaultDB string) (table [2]string, ops []columnOp, ok bool) {
	tk, table, ok := alterTable(q, defaultDB)
	if !ok {
		return table, nil, false
	}
	switch tk.peekWord() {
	case "WAIT":
		tk.word()
		tk.skip()
	case "NOWAIT":
		tk.word()
	}
	for !tk.done() {
		ops = append(ops, tk.columnClause()...)
		if tk.skipClause() != ',' {
			break
		}
	}
	return table, ops, true
}

// columnClause reads the start of one ALTER TABLE clause: the column ops
// it makes, if any.
func (t *tokens) columnClause() []columnOp {
	switch t.word() {
	case "ADD":
		column := t.peekWord() == "COLUMN"
		if column {
			t.word()
		}
		ifNot := false
		if t.peekWord() == "IF" {
			t.word()
			t.word()
			t.word()
			ifNot = true
		}
		if t.punct('(') { // ADD (c1 …, c2 …)
			var ops []columnOp
			for {
				if name, ok := t.ident(); ok {
					ops = append(ops, columnOp{kind: 'a', name: name, ifNotExists: ifNot})
				}
				if t.skipClause() != ',' {
					t.punct(')')
					return ops
				}
			}
		}
		if !column && slices.Contains(notColumn, t.peekWord()) {
			return nil
		}
		if name, ok := t.ident(); ok {
			return []columnOp{{kind: 'a', name: name, ifNotExists: ifNot}}
		}
	case "DROP":
		column := t.peekWord() == "COLUMN"
		if column {
			t.word()
		}
		t.ifExists()
		if !column && slices.Contains(notColumn, t.peekWord()) {
			return nil
		}
		if name, ok := t.ident(); ok {
			return []columnOp{{kind: 'd', name: name}}
		}
	case "CHANGE":
		if t.peekWord() == "COLUMN" {
			t.word()
		}
		t.ifExists()
		from, ok1 := t.ident()
		to, ok2 := t.ident()
		if ok1 && ok2 {
			return []columnOp{{kind: 'r', name: from, to: to}}
		}
	case "RENAME":
		if t.peekWord() != "COLUMN" {
			return nil
		}
		t.word()
		t.ifExists()
		from, ok1 := t.ident()
		if t.word() != "TO" {
			return nil
		}
		if to, ok2 := t.ident(); ok1 && ok2 {
			return []columnOp{{kind: 'r', name: from, to: to}}
		}
	}
	return nil
}

// skipClause passes over the rest of a clause, parentheses and string
// literals included, and returns what ended it: ',' (taken), ')' (an
// unmatched one, not taken) or 0 (the statement's end).
func (t *tokens) skipClause() byte {
	depth := 0
	for !t.done() {
		switch t.s[0] {
		case '(':
			depth++
		case ')':
			if depth == 0 {
				return ')'
			}
			depth--
		case ',':
			if depth == 0 {
				t.advance(t.s[1:])
				return ','
			}
		}
		t.skip()
	}
	return 0
}

// columnMoves reads a captured table's rows again when an ALTER TABLE
// statement recreated or renamed one of its columns (see above). It runs
// before the table is described again, so the description it knows is
// the one before the statement (or a later one, when the stream lags).
func (s *streamer) columnMoves(ctx context.Context, stmt, defaultDB string) error {
	table, ops, ok := parseColumnOps(stmt, defaultDB)
	if !ok || len(ops) == 0 {
		return nil
	}
	for qn, d := range s.captured {
		if !s.stoppable(qn) || [2]string{strings.ToLower(d.db), strings.ToLower(d.name)} != table {
			continue
		}
		rec, err := s.r.columnRecord(ctx, qn)
		if err != nil {
			return err
		}
		if rec != nil && s.tx.ord <= rec.At {
			continue // replayed after a crash: the record followed it already
		}
		in := func(names []string, c string) bool {
			return slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, c) })
		}
		// The columns the mirror has or had: not those the information
		// schema showed before the stream reached their ADD (aheadColumns).
		var known []string
		for _, c := range d.table.Columns {
			known = append(known, c.Name)
		}
		if rec != nil {
			known = append(known, rec.Columns...)
		}
		known = slices.DeleteFunc(known, func(c string) bool { return in(d.ahead, c) })
		if rec != nil {
			known = append(known, rec.Dropped...)
		}
		var gone, recreated, renamed []string
		for _, op := range ops {
			switch op.kind {
			case 'd':
				gone = append(gone, op.name)
			case 'a':
				// A column of the name the mirror knows is an old one: ADD
				// succeeds only when none is there (IF NOT EXISTS may
				// have added nothing unless it was dropped).
				was := in(known, op.name)
				if in(gone, op.name) || was && (!op.ifNotExists || rec != nil && in(rec.Dropped, op.name)) {
					recreated = append(recreated, op.name)
				}
			case 'r':
				if !strings.EqualFold(op.name, op.to) {
					renamed = append(renamed, op.to)
				}
			}
		}
		if len(recreated)+len(renamed) == 0 {
			continue
		}
		origin := "recreated-column"
		if len(recreated) == 0 {
			origin = "renamed-column"
		}
		s.r.logger.Info("columns were dropped and added again or renamed: rows already there hold other values under those names at the source, "+
			"with no change sent for them, than the mirror's columns of the names: reading the table's rows again",
			"table", qn, "recreated", recreated, "renamed", renamed, "statement", stmtText(stmt))
		if err := s.r.inc.Restart(ctx, snapshot.Request{Table: qn, Origin: origin}); err != nil {
			return err
		}
	}
	return nil
}

// aheadColumns are the columns of nd, the description of a captured table
// read at DDL statement stmt, that the stream has not yet seen added: the
// information schema is ahead of a stream that lags, and shows columns
// that later statements add. Without them a later ADD of such a column
// looks like one re-added (columnMoves), and the table is read again for
// nothing. A column is ahead when it is new since old (the description
// before the statement), or already was ahead, and the statement does not
// add, drop or rename it: an ALTER TABLE of this table whose clauses do
// not name it, or a statement that cannot name this table (an ALTER TABLE
// of another, or one run in another database that does not hold this
// one's name). Another statement (CREATE, RENAME TABLE, an ALTER form not
// recognised) may have added the new columns: none are taken for ahead
// after it, so a later ADD of one reads the table again (a needless
// re-read, never a missed one). Nor is a column the mirror had and saw
// dropped (dropped, the columns record's): its ADD is a re-added column.
func aheadColumns(old, nd *tableDesc, stmt, defaultDB string, dropped []string) []string {
	altered, ops, parsed := parseColumnOps(stmt, defaultDB)
	this := parsed && altered == [2]string{strings.ToLower(nd.db), strings.ToLower(nd.name)}
	other := parsed && !this ||
		!parsed && defaultDB != nd.db && !strings.Contains(strings.ToLower(stmt), strings.ToLower(nd.db))
	if !this && !other {
		return nil
	}
	touched := func(c string) bool {
		return this && slices.ContainsFunc(ops, func(op columnOp) bool {
			return strings.EqualFold(op.name, c) || op.kind == 'r' && strings.EqualFold(op.to, c)
		})
	}
	wasAhead := func(c string) bool {
		return slices.ContainsFunc(old.ahead, func(a string) bool { return strings.EqualFold(a, c) })
	}
	isNew := func(c string) bool {
		return !slices.ContainsFunc(old.table.Columns, func(oc schema.Column) bool { return strings.EqualFold(oc.Name, c) }) &&
			!slices.ContainsFunc(dropped, func(d string) bool { return strings.EqualFold(d, c) })
	}
	var out []string
	for _, c := range nd.table.Columns {
		if !touched(c.Name) && (wasAhead(c.Name) || isNew(c.Name)) {
			out = append(out, c.Name)
		}
	}
	return out
}
