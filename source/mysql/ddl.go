package mysql

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// stmtKind is what a binlogged statement means to the reader. cdcd parses
// no DDL beyond recognising these kinds: a table's new shape comes from
// its next table map.
type stmtKind int

const (
	stmtOther    stmtKind = iota // a standalone statement (DDL, GRANT, ...): ends its event group
	stmtBegin                    // BEGIN, XA START
	stmtInTx                     // SAVEPOINT, ROLLBACK TO, RELEASE SAVEPOINT, XA END: inside a transaction
	stmtCommit                   // COMMIT, XA COMMIT (a non-transactional engine's group)
	stmtRollback                 // ROLLBACK
	stmtTruncate                 // TRUNCATE [TABLE] name
	stmtDDL                      // ALTER, CREATE, DROP, RENAME: refresh the tables it names
	stmtDML                      // INSERT, UPDATE, DELETE, REPLACE, LOAD DATA logged as a statement
)

// statement is a recognised statement.
type statement struct {
	kind stmtKind
	// db and table of a TRUNCATE (db is the event's default database when
	// the statement does not name one).
	db, table string
}

// parseStatement recognises a binlogged statement's kind.
func parseStatement(q, defaultDB string) statement {
	rest := skipSpaceAndComments(q)
	word, after := nextWord(rest)
	switch word {
	case "BEGIN":
		return statement{kind: stmtBegin}
	case "COMMIT":
		return statement{kind: stmtCommit}
	case "ROLLBACK":
		if w, _ := nextWord(skipSpaceAndComments(after)); w == "TO" {
			return statement{kind: stmtInTx}
		}
		return statement{kind: stmtRollback}
	case "SAVEPOINT", "RELEASE":
		return statement{kind: stmtInTx}
	case "XA":
		switch w, _ := nextWord(skipSpaceAndComments(after)); w {
		case "START", "BEGIN":
			return statement{kind: stmtBegin}
		case "END":
			return statement{kind: stmtInTx}
		case "COMMIT":
			return statement{kind: stmtCommit}
		case "ROLLBACK":
			return statement{kind: stmtRollback}
		}
		return statement{kind: stmtOther}
	case "TRUNCATE":
		rest = skipSpaceAndComments(after)
		if w, a := nextWord(rest); w == "TABLE" {
			rest = skipSpaceAndComments(a)
		}
		db, table, ok := parseTableName(rest, defaultDB)
		if !ok {
			return statement{kind: stmtDDL}
		}
		return statement{kind: stmtTruncate, db: db, table: table}
	case "ALTER", "CREATE", "DROP", "RENAME":
		return statement{kind: stmtDDL}
	case "INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD", "WITH":
		return statement{kind: stmtDML}
	}
	return statement{kind: stmtOther}
}

// skipSpaceAndComments drops leading white space and comments.
func skipSpaceAndComments(s string) string {
	for {
		s = strings.TrimLeft(s, " \t\r\n")
		switch {
		case strings.HasPrefix(s, "/*"):
			end := strings.Index(s[2:], "*/")
			if end < 0 {
				return ""
			}
			s = s[end+4:]
		case strings.HasPrefix(s, "-- "), strings.HasPrefix(s, "#"):
			end := strings.IndexByte(s, '\n')
			if end < 0 {
				return ""
			}
			s = s[end+1:]
		default:
			return s
		}
	}
}

// nextWord returns the leading keyword of s in upper case and the rest.
func nextWord(s string) (string, string) {
	i := 0
	for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z' || s[i] == '_') {
		i++
	}
	return strings.ToUpper(s[:i]), s[i:]
}

// parseTableName reads "name", "`na“me`", "db.name" or "`db`.`name`".
func parseTableName(s, defaultDB string) (db, table string, ok bool) {
	first, rest, ok := parseIdent(s)
	if !ok {
		return "", "", false
	}
	if strings.HasPrefix(rest, ".") {
		second, _, ok := parseIdent(rest[1:])
		if !ok {
			return "", "", false
		}
		return first, second, true
	}
	return defaultDB, first, true
}

func parseIdent(s string) (ident, rest string, ok bool) {
	if strings.HasPrefix(s, "`") {
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i] == '`' {
				if i+1 < len(s) && s[i+1] == '`' {
					b.WriteByte('`')
					i++
					continue
				}
				return b.String(), s[i+1:], b.Len() > 0
			}
			b.WriteByte(s[i])
		}
		return "", "", false
	}
	i := 0
	for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z' || s[i] >= '0' && s[i] <= '9' ||
		s[i] == '_' || s[i] == '$' || s[i] >= 0x80) {
		i++
	}
	return s[:i], s[i:], i > 0
}

// query handles a statement event: transaction bounds, truncates, DDL.
func (s *streamer) query(ctx context.Context, e *replication.QueryEvent) error {
	st := parseStatement(string(e.Query), string(e.Schema))
	if (st.kind == stmtDDL || st.kind == stmtTruncate) && s.namesCaptured(string(e.Query)) {
		// Counted once handled: a snapshot chunk described before this
		// count is read again (myDatabase.described).
		defer s.r.ddl.Add(1)
	}
	switch st.kind {
	case stmtBegin, stmtInTx:
		if st.kind == stmtBegin && xaID(string(e.Query)) != "" {
			s.xaStart(string(e.Query)) // xa.go
		}
		return nil
	case stmtCommit, stmtRollback:
		if xaID(string(e.Query)) != "" {
			s.xaResolve(string(e.Query), st.kind == stmtRollback)
		}
		return s.commit(ctx)
	case stmtDML:
		s.statementChanges(string(e.Query), string(e.Schema))
		if s.flavor == FlavorMariaDB && s.tx.gtid.standalone {
			return s.commit(ctx)
		}
		return nil // its transaction's COMMIT or XID ends it
	}
	if !s.tx.active {
		return nil
	}
	if s.flavor == FlavorMariaDB && !s.tx.gtid.standalone {
		return nil // a statement inside a transaction group; its COMMIT or XID ends it
	}
	switch st.kind {
	case stmtTruncate:
		if desc := s.capturedNamed(st.db, st.table); desc != nil && !s.inc.isWatermarkTable(desc.qualified()) &&
			!s.inc.isSignalTable(desc.qualified()) {
			s.truncate(desc.qualified())
		}
	case stmtDDL:
		if err := s.moves(ctx, string(e.Query), string(e.Schema)); err != nil {
			return err
		}
		if err := s.columnMoves(ctx, string(e.Query), string(e.Schema)); err != nil {
			return err
		}
		if err := s.partitionMoves(ctx, string(e.Query), string(e.Schema)); err != nil {
			return err
		}
		if err := s.refresh(ctx, string(e.Query), string(e.Schema)); err != nil {
			return err
		}
		if err := s.loadCascades(ctx); err != nil {
			return err
		}
	}
	return s.commit(ctx)
}

// capturedNamed returns the captured table a statement names as db.table
// (nil: none): the one of that exact name, or, on a server that folds
// names (foldNames), the one whose name differs only in case. A server
// that does not fold them holds t and T as two tables.
func (s *streamer) capturedNamed(db, table string) *tableDesc {
	if d := s.captured[db+"."+table]; d != nil || !s.foldNames {
		return d
	}
	for _, d := range s.captured {
		if strings.EqualFold(d.db, db) && strings.EqualFold(d.name, table) {
			return d
		}
	}
	return nil
}

// namesCaptured reports whether a statement holds the bare name of a
// captured table, in any case (as refresh picks the tables a DDL statement
// may have changed; the statement is not parsed).
func (s *streamer) namesCaptured(stmt string) bool {
	stmt = strings.ToLower(stmt)
	for _, d := range s.captured {
		if strings.Contains(stmt, strings.ToLower(d.name)) {
			return true
		}
	}
	return false
}

// refresh reads again the information schema of the captured tables a DDL
// statement names (by their bare name: the statement is not parsed). A
// table that is gone (dropped, renamed) keeps its last description; its
// changes stop until a table of that name exists again.
func (s *streamer) refresh(ctx context.Context, stmt, defaultDB string) error {
	lower := strings.ToLower(stmt)
	for qn, d := range s.captured {
		// In any case, as namesCaptured: a server that folds names takes
		// ALTER TABLE T for t, and describing a table the statement did
		// not change costs only the query.
		if !strings.Contains(lower, strings.ToLower(d.name)) {
			continue
		}
		nd, err := describeTable(ctx, s.db, s.flavor, d.db, d.name)
		var te *TableError
		if errors.As(err, &te) {
			s.r.logger.Warn("a captured table changed so that it cannot be described now; keeping its last description",
				"table", qn, "statement", stmt, "err", err)
			continue
		}
		if err != nil {
			return &connError{err}
		}
		if err := s.reReadAdded(ctx, func(c string) bool { return d.table.ColumnIndex(c) >= 0 }, nd); err != nil {
			return err
		}
		rec, err := s.r.columnRecord(ctx, qn)
		if err != nil {
			return err
		}
		var dropped []string
		if rec != nil {
			dropped = rec.Dropped
		}
		nd.ahead = aheadColumns(d, nd, stmt, defaultDB, dropped)
		if err := s.syncColumns(ctx, nd, s.tx.ord, false); err != nil {
			return err
		}
		s.captured[qn] = nd
	}
	return nil
}

// reReadAdded queues a snapshot of a table a DDL statement added columns
// to whose value the rows already there hold with no row event ever sent
// for them (defaults.go), unless each such value is a constant the sink
// gives to rows written before the column existed (Config.KeepsDefault).
func (s *streamer) reReadAdded(ctx context.Context, had func(column string) bool, cur *tableDesc) error {
	var cols []string
	for i, c := range cur.cols {
		if !c.HasDefault || had(c.Name) {
			continue
		}
		if col := cur.table.Columns[i]; col.Default != nil && s.r.cfg.KeepsDefault != nil && s.r.cfg.KeepsDefault(col) {
			s.r.logger.Info("a column was added with a default that rows already there hold: the sink gives it to them",
				"table", cur.qualified(), "column", c.Name)
			continue
		}
		cols = append(cols, c.Name)
	}
	qn := cur.qualified()
	if len(cols) == 0 || !slices.Contains(s.r.cfg.Tables, qn) { // not the watermark or signal table
		return nil
	}
	s.r.logger.Info("columns were added with a default that rows already there hold, with no change sent for them: reading the table's rows again",
		"table", qn, "columns", cols)
	return s.r.inc.Restart(ctx, snapshot.Request{Table: qn, Origin: "added-default"})
}
