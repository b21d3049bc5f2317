package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/go-mysql-org/go-mysql/replication"
)

// Foreign key actions are not in the binlog. InnoDB runs a foreign key's
// ON DELETE / ON UPDATE CASCADE, SET NULL and SET DEFAULT itself, below
// the layer that writes row events (MySQL bug 32506; MariaDB before
// MDEV-38243): a DELETE of a parent row is logged, the child rows the
// cascade deletes are not, and a replica repeats the cascade through its
// own foreign key. cdcd has no such key, so a captured child whose rows a
// cascade changed would keep them in its mirror without a word.
//
// The reader keeps the foreign keys with such an action whose chain ends
// at a captured table (read at the start and after each DDL statement),
// and watches the parents' row events: a DELETE of a parent row whose
// key's ON DELETE acts, or an UPDATE that changes the referenced columns
// of a key whose ON UPDATE acts, stops the captured child (a table fault,
// at that place in the binlog) with the reason and the fix. A chain
// (a → b → c, each cascading) stops c at a's event, since b's cascaded
// changes are not logged either. Where the parent's update cannot be
// decoded (its table map lacks a key or has a type cdcd does not map),
// every update of it stops the child: a false alarm costs a re-snapshot,
// a miss would lose changes silently.

// fkAction is one foreign key whose action changes the rows of child (its
// own table, or a table a chain of such keys leads to) when a row of
// parent is deleted (onDelete) or its referenced columns updated
// (onUpdate): "CASCADE", "SET NULL", "SET DEFAULT", or "" for none.
type fkAction struct {
	name          string // the constraint, as db.table.constraint of its own table
	parent, child string // db.table; child is the captured table it reaches
	via           string // the constraint's own table when it is not child
	refCols       []string
	onDelete      string
	onUpdate      string
}

// acts reports whether a rule changes the child's rows.
func acts(rule string) bool {
	switch strings.ToUpper(rule) {
	case "CASCADE", "SET NULL", "SET DEFAULT":
		return true
	}
	return false
}

// fkEdge is one foreign key, as KEY_COLUMN_USAGE shows it.
type fkEdge struct {
	db, table, name string
	refDB, refTable string
	refCols         []string
}

// readCascades reads the foreign keys of the captured tables' databases
// and returns, by parent db.table, the acting ones whose chain reaches a
// table of captured. The keys come from KEY_COLUMN_USAGE, their rules
// from SHOW CREATE TABLE: MariaDB shows REFERENTIAL_CONSTRAINTS rows only
// to a user with more than SELECT on the table, which cdcd's user need
// not have. A table whose definition cannot be read has its keys taken as
// acting (a false alarm costs a re-snapshot).
func readCascades(ctx context.Context, db *sql.DB, captured []string) (map[string][]fkAction, error) {
	var schemas []any
	for _, c := range captured {
		if d, _, ok := strings.Cut(c, "."); ok && !slices.Contains(schemas, any(d)) {
			schemas = append(schemas, d)
		}
	}
	if len(schemas) == 0 {
		return nil, nil
	}
	rows, err := db.QueryContext(ctx, `SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, REFERENCED_TABLE_SCHEMA, REFERENCED_TABLE_NAME,
		GROUP_CONCAT(REFERENCED_COLUMN_NAME ORDER BY ORDINAL_POSITION SEPARATOR '\n')
		FROM information_schema.KEY_COLUMN_USAGE
		WHERE REFERENCED_TABLE_NAME IS NOT NULL AND CONSTRAINT_SCHEMA IN (?`+strings.Repeat(", ?", len(schemas)-1)+`)
		GROUP BY CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, REFERENCED_TABLE_SCHEMA, REFERENCED_TABLE_NAME`, schemas...)
	if err != nil {
		return nil, fmt.Errorf("mysql: read the foreign keys: %w", err)
	}
	defer rows.Close()
	var edges []fkEdge
	for rows.Next() {
		var e fkEdge
		var cols string
		if err := rows.Scan(&e.db, &e.table, &e.name, &e.refDB, &e.refTable, &cols); err != nil {
			return nil, fmt.Errorf("mysql: read the foreign keys: %w", err)
		}
		e.refCols = strings.Split(cols, "\n")
		edges = append(edges, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: read the foreign keys: %w", err)
	}
	if len(edges) == 0 {
		return nil, nil
	}
	// The rules of the keys of the tables a chain passes, read once a table.
	rules := map[string]map[string][2]string{} // db.table → constraint → {on delete, on update}
	rule := func(e fkEdge) (onDelete, onUpdate string) {
		qn := e.db + "." + e.table
		if _, ok := rules[qn]; !ok {
			rules[qn] = foreignKeyRules(ctx, db, e.db, e.table)
		}
		if r, ok := rules[qn][e.name]; ok {
			return r[0], r[1]
		}
		return "CASCADE", "CASCADE" // unknown: taken as acting
	}
	return cascadesTo(edges, captured, rule), nil
}

// foreignKeyRules reads the ON DELETE and ON UPDATE rules of a table's
// foreign keys from SHOW CREATE TABLE (a rule not written is RESTRICT);
// nil if the definition cannot be read.
func foreignKeyRules(ctx context.Context, db *sql.DB, dbName, table string) map[string][2]string {
	var name, ddl string
	if err := db.QueryRowContext(ctx, "SHOW CREATE TABLE "+quoteIdent(dbName)+"."+quoteIdent(table)).Scan(&name, &ddl); err != nil {
		return nil
	}
	return parseForeignKeyRules(ddl)
}

// parseForeignKeyRules reads the rules of each CONSTRAINT … FOREIGN KEY
// line of a SHOW CREATE TABLE text, by constraint name.
func parseForeignKeyRules(ddl string) map[string][2]string {
	out := map[string][2]string{}
	for _, line := range strings.Split(ddl, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "CONSTRAINT ")
		if !ok {
			continue
		}
		name, rest, ok := parseIdent(rest)
		if !ok || !strings.Contains(rest, " FOREIGN KEY ") {
			continue
		}
		rule := func(on string) string {
			_, after, ok := strings.Cut(rest, " ON "+on+" ")
			if !ok {
				return "RESTRICT"
			}
			for _, r := range []string{"CASCADE", "SET NULL", "SET DEFAULT", "NO ACTION", "RESTRICT"} {
				if strings.HasPrefix(after, r) {
					return r
				}
			}
			return "CASCADE" // a rule cdcd does not know: taken as acting
		}
		out[name] = [2]string{rule("DELETE"), rule("UPDATE")}
	}
	return out
}

// cascadesTo returns, by parent, the actions of edges whose chain reaches
// a captured table: the edge into the captured table itself, and every
// edge into a table from which such a chain goes on (its cascaded changes
// are not logged, so its own keys act unseen). rule gives an edge's ON
// DELETE and ON UPDATE rules.
func cascadesTo(edges []fkEdge, captured []string, rule func(fkEdge) (onDelete, onUpdate string)) map[string][]fkAction {
	byChild := map[string][]fkEdge{}
	for _, e := range edges {
		byChild[e.db+"."+e.table] = append(byChild[e.db+"."+e.table], e)
	}
	out := map[string][]fkAction{}
	for _, c := range captured {
		seen := map[string]bool{c: true}
		queue := []string{c}
		for len(queue) > 0 {
			t := queue[0]
			queue = queue[1:]
			for _, e := range byChild[t] {
				parent := e.refDB + "." + e.refTable
				del, upd := rule(e)
				a := fkAction{name: e.db + "." + e.table + "." + e.name, parent: parent, child: c, refCols: e.refCols,
					onDelete: strings.ToUpper(del), onUpdate: strings.ToUpper(upd)}
				if !acts(a.onDelete) {
					a.onDelete = ""
				}
				if !acts(a.onUpdate) {
					a.onUpdate = ""
				}
				if a.onDelete == "" && a.onUpdate == "" {
					continue // RESTRICT, NO ACTION: the server refuses instead
				}
				if t != c {
					a.via = t
				}
				out[parent] = append(out[parent], a)
				if !seen[parent] {
					seen[parent] = true
					queue = append(queue, parent)
				}
			}
		}
	}
	return out
}

// describe says what a's action does, for a reason.
func (a fkAction) describe(deleted bool) string {
	rule, on := a.onUpdate, "ON UPDATE"
	if deleted {
		rule, on = a.onDelete, "ON DELETE"
	}
	s := fmt.Sprintf("foreign key %s (%s %s, referencing %s)", a.name, on, rule, a.parent)
	if a.via != "" {
		s += " and the keys from " + a.via + " on"
	}
	return s
}

// loadCascades reads the actions again (at the start and after DDL) and
// warns, once per action, of each that reaches a captured table.
func (s *streamer) loadCascades(ctx context.Context) error {
	fk, err := readCascades(ctx, s.db, s.r.cfg.Tables)
	if err != nil {
		return err
	}
	for parent, as := range fk {
		for _, a := range as {
			key := a.name + "→" + a.child
			if s.fkWarned[key] {
				continue
			}
			if s.fkWarned == nil {
				s.fkWarned = map[string]bool{}
			}
			s.fkWarned[key] = true
			s.r.logger.Warn("a foreign key's ON DELETE / ON UPDATE action changes a captured table without binlog rows: "+
				"the table pauses when the parent's rows are deleted or their keys updated",
				"table", a.child, "foreign_key", a.name, "parent", parent, "on_delete", a.onDelete, "on_update", a.onUpdate,
				"fix", "have the application change the child rows itself (the key ON DELETE / ON UPDATE RESTRICT)")
		}
	}
	s.fk = fk
	for id, v := range s.byID {
		if !v.captured && v.table == nil && fk[v.qn] != nil {
			delete(s.byID, id) // its next table map builds the version watchRows decodes
		}
	}
	return nil
}

// watchedVersion is the version of parent table map tm: decodable when it
// can be (updates are then judged by their referenced columns), else
// without a table.
func (s *streamer) watchedVersion(qn string, tm *replication.TableMapEvent) *tableVersion {
	db, name, _ := strings.Cut(qn, ".")
	v, err := buildVersion(&tableDesc{db: db, name: name}, tm, s.colls)
	if err != nil {
		return &tableVersion{tm: tm, qn: qn}
	}
	v.captured = false
	return v
}

// cascades stops the captured tables a parent's row event changes through
// a foreign key's action. v is the parent's version; it is not emitted
// (a captured parent's rows are read again by the caller).
func (s *streamer) cascades(h *replication.EventHeader, e *replication.RowsEvent, v *tableVersion) error {
	as := s.fk[v.qn]
	typ := e.Type()
	var hit []fkAction
	switch typ {
	case replication.EnumRowsEventTypeDelete:
		for _, a := range as {
			if a.onDelete != "" {
				hit = append(hit, a)
			}
		}
		s.stopChildren(hit, true, v.qn)
	case replication.EnumRowsEventTypeUpdate:
		var upd []fkAction
		for _, a := range as {
			if a.onUpdate != "" {
				upd = append(upd, a)
			}
		}
		if len(upd) == 0 {
			return nil
		}
		if v.table == nil {
			s.stopChildren(upd, false, v.qn)
			return nil
		}
		imgs, err := s.images(h, e, v)
		if err != nil {
			return err
		}
		var arena rowArena
		for imgs.more() {
			before, _, err := imgs.next(&arena)
			if err != nil {
				return err
			}
			after, _, err := imgs.next(&arena)
			if err != nil {
				return err
			}
			for i := 0; i < len(upd); i++ {
				if a := upd[i]; refChanged(v, a.refCols, before, after) {
					hit = append(hit, a)
					upd = slices.Delete(upd, i, i+1)
					i--
				}
			}
			if len(upd) == 0 {
				break
			}
		}
		s.stopChildren(hit, false, v.qn)
	}
	return nil
}

// refChanged reports whether an update changed one of cols (or a column
// cdcd cannot find: then it may have).
func refChanged(v *tableVersion, cols []string, before, after []any) bool {
	for _, c := range cols {
		i := v.table.ColumnIndex(c)
		if i < 0 || i >= len(before) || i >= len(after) {
			return true
		}
		if !sameValue(before[i], after[i]) {
			return true
		}
	}
	return false
}

// stopChildren stops each captured child of hit (once per child).
func (s *streamer) stopChildren(hit []fkAction, deleted bool, parent string) {
	done := map[string]bool{}
	for _, a := range hit {
		if done[a.child] || !s.stoppable(a.child) {
			continue
		}
		done[a.child] = true
		if s.captured[a.child] == nil {
			continue
		}
		what := "deleted"
		if !deleted {
			what = "had its referenced columns updated"
		}
		s.stopTable(a.child, s.shape(a.child), &source.Fault{
			Reason: fmt.Sprintf("a row of %s %s, and %s may have changed rows of %s: the server applies a foreign key's "+
				"actions without writing their rows to the binlog, so cdcd cannot read what they changed",
				parent, what, a.describe(deleted), a.child),
			Fix: "have the application change the child rows itself (define the foreign key ON DELETE / ON UPDATE RESTRICT and " +
				"delete or update the child rows first: those changes are in the binlog); " + resnapshot(a.child),
		}, "parent", parent, "foreign_key", a.name)
		s.tx.idx++
	}
}
