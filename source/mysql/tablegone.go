package mysql

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// A captured table can leave and come back by DDL whose rows the binlog
// does not carry:
//   - DROP TABLE, DROP DATABASE, or a RENAME that moves it away: the table
//     is gone, so its mirror is emptied at that point (a truncate there;
//     Iceberg's earlier snapshots keep the rows). Left as it was, the
//     mirror would keep rows a table created again under the name does not
//     have.
//   - a RENAME that moves another table to its name: that table's rows were
//     never captured under this name, so they are read again (a replacing
//     incremental snapshot).
//   - both in one statement (RENAME TABLE t TO t_old, t_new TO t): the
//     cut-over of an online schema change tool (gh-ost,
//     pt-online-schema-change), whose new table holds the same rows: the
//     stream goes on with the new table's shape, as Debezium's does.
//     cdcd reconcile checks the rows if in doubt.

// tableMoves is what a DDL statement does to which tables exist, as
// [database, table] pairs: lower-cased, or as the statement writes them
// (parseMoves' keepCase: a server that tells t from T).
type tableMoves struct {
	gone, in  [][2]string
	droppedDB string // DROP DATABASE / SCHEMA
}

// parseMoves reads a DROP TABLE, DROP DATABASE, RENAME TABLE or ALTER
// TABLE … RENAME statement; other statements move nothing. keepCase keeps
// the names' case (else they are lower-cased).
func parseMoves(q, defaultDB string, keepCase bool) tableMoves {
	var m tableMoves
	tk := newTokens(q)
	tk.keepCase = keepCase
	switch tk.word() {
	case "DROP":
		switch tk.word() {
		case "TABLE", "TABLES":
			tk.ifExists()
			for {
				n, ok := tk.name(defaultDB)
				if !ok {
					break
				}
				m.gone = append(m.gone, n)
				if !tk.punct(',') {
					break
				}
			}
		case "DATABASE", "SCHEMA":
			tk.ifExists()
			if id, ok := tk.ident(); ok {
				m.droppedDB = tk.fold(id)
			}
		}
	case "RENAME":
		if w := tk.word(); w != "TABLE" && w != "TABLES" {
			return m
		}
		tk.ifExists()
		for {
			from, ok := tk.name(defaultDB)
			if !ok {
				break
			}
			w := tk.word()
			switch w {
			case "WAIT":
				tk.ident() // the seconds
				w = tk.word()
			case "NOWAIT":
				w = tk.word()
			}
			if w != "TO" {
				break
			}
			to, ok := tk.name(defaultDB)
			if !ok {
				break
			}
			m.gone, m.in = append(m.gone, from), append(m.in, to)
			if !tk.punct(',') {
				break
			}
		}
	case "ALTER":
		w := tk.word()
		for w == "ONLINE" || w == "IGNORE" {
			w = tk.word()
		}
		if w != "TABLE" {
			return m
		}
		tk.ifExists()
		from, ok := tk.name(defaultDB)
		if !ok {
			return m
		}
		for !tk.done() {
			switch tk.word() {
			case "":
				tk.skip()
				continue
			case "RENAME":
			default:
				continue
			}
			switch tk.peekWord() {
			case "COLUMN", "INDEX", "KEY", "CONSTRAINT":
				continue
			case "TO", "AS":
				tk.word()
			}
			if to, ok := tk.name(defaultDB); ok {
				m.gone, m.in = append(m.gone, from), append(m.in, to)
			}
		}
	}
	return m
}

// moves acts on a DDL statement's moves of captured tables (see above)
// before the tables are described again.
func (s *streamer) moves(ctx context.Context, stmt, defaultDB string) error {
	// A server that does not fold names (lower_case_table_names 0) holds t
	// and T as two tables: DROP TABLE T must not empty t's mirror.
	m := parseMoves(stmt, defaultDB, !s.foldNames)
	if len(m.gone) == 0 && len(m.in) == 0 && m.droppedDB == "" {
		return nil
	}
	for _, qn := range slices.Sorted(maps.Keys(s.captured)) {
		d := s.captured[qn]
		if !s.stoppable(qn) {
			continue
		}
		key := [2]string{d.db, d.name}
		if s.foldNames {
			key = [2]string{strings.ToLower(d.db), strings.ToLower(d.name)}
		}
		gone := slices.Contains(m.gone, key) || m.droppedDB == key[0]
		in := slices.Contains(m.in, key)
		switch {
		case gone && in:
			s.r.logger.Info("a captured table was swapped for another in one statement, as online schema change tools do "+
				"(gh-ost, pt-online-schema-change): streaming goes on with the new table, whose rows are taken to be the same "+
				"(cdcd reconcile checks them)", "table", qn, "statement", stmtText(stmt))
		case gone:
			s.r.logger.Warn("a captured table was dropped or renamed away at the source: its mirror is emptied at this point "+
				"(earlier Iceberg snapshots keep the rows); a table created again under its name is captured from its creation",
				"table", qn, "statement", stmtText(stmt))
			s.truncate(qn)
		case in:
			s.r.logger.Info("another table was renamed to a captured table's name: its rows were never captured under this name, "+
				"reading them again", "table", qn, "statement", stmtText(stmt))
			if err := s.r.inc.Restart(ctx, snapshot.Request{Table: qn, Replace: true, Origin: "renamed-in"}); err != nil {
				return err
			}
		}
	}
	return nil
}

// truncate empties captured table qn's mirror at the transaction's next
// position.
func (s *streamer) truncate(qn string) {
	s.add(source.Change{Table: s.shape(qn), Op: source.OpTruncate, Pos: Position(s.tx.ord, s.tx.idx), TxID: s.tx.ord, CommitTime: s.tx.ts})
	s.tx.idx++
}

// tokens reads a statement's words, names and punctuation in order,
// comments and string literals skipped.
type tokens struct {
	s        string
	keepCase bool // name keeps names' case (else lower-cases them)
}

func newTokens(q string) *tokens { return &tokens{s: skipSpaceAndComments(q)} }

func (t *tokens) done() bool { return t.s == "" }

func (t *tokens) advance(rest string) { t.s = skipSpaceAndComments(rest) }

// word takes a bare keyword, upper-cased ("" when the next token is not one).
func (t *tokens) word() string {
	w, rest := nextWord(t.s)
	if w != "" {
		t.advance(rest)
	}
	return w
}

func (t *tokens) peekWord() string { w, _ := nextWord(t.s); return w }

// ident takes a name, bare or back-quoted.
func (t *tokens) ident() (string, bool) {
	id, rest, ok := parseIdent(t.s)
	if ok {
		t.advance(rest)
	}
	return id, ok
}

// name takes a table name, "t" (in defaultDB) or "db.t", lower-cased.
func (t *tokens) name(defaultDB string) ([2]string, bool) {
	first, ok := t.ident()
	if !ok {
		return [2]string{}, false
	}
	if !strings.HasPrefix(t.s, ".") {
		return [2]string{t.fold(defaultDB), t.fold(first)}, true
	}
	t.advance(t.s[1:])
	second, ok := t.ident()
	if !ok {
		return [2]string{}, false
	}
	return [2]string{t.fold(first), t.fold(second)}, true
}

// fold lower-cases a name unless the tokens keep names' case.
func (t *tokens) fold(name string) string {
	if t.keepCase {
		return name
	}
	return strings.ToLower(name)
}

// punct takes c if it comes next.
func (t *tokens) punct(c byte) bool {
	if strings.HasPrefix(t.s, string(c)) {
		t.advance(t.s[1:])
		return true
	}
	return false
}

// ifExists takes IF EXISTS.
func (t *tokens) ifExists() {
	if t.peekWord() == "IF" {
		t.word()
		t.word()
	}
}

// skip passes over the next token: a name, a string literal or one
// character.
func (t *tokens) skip() {
	if t.s == "" {
		return
	}
	if c := t.s[0]; c == '\'' || c == '"' {
		end := 1
		for end < len(t.s) && t.s[end] != c {
			if t.s[end] == '\\' {
				end++
			}
			end++
		}
		t.advance(t.s[min(end+1, len(t.s)):])
		return
	}
	if _, ok := t.ident(); !ok {
		t.advance(t.s[1:])
	}
}
