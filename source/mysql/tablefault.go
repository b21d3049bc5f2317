package mysql

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// While streaming, a captured table the reader cannot read faithfully any
// more stops alone: a fault of the whole table (no row) goes to the
// Emitter, which pauses that table with the reason and the fix, and the
// other tables stream on. Its rows that cannot be carried are passed over
// (they take their positions, so a replay passes them over the same way);
// the fix ends with a re-snapshot of the table, which replaces them.

// resnapshot is the end of every such fix.
func resnapshot(qn string) string {
	return "then re-snapshot the table: cdcd snapshot -c FILE --replace " + qn
}

// stopTable sends f for table qn (shape t) at the next position of the
// transaction; the caller advances the index. Each reason is logged once
// per table: every event of the table sends the fault again (the Emitter
// keeps a known pause as it is).
func (s *streamer) stopTable(qn string, t *schema.Table, f *source.Fault, attrs ...any) {
	if s.faultLogged[qn] != f.Reason {
		if s.faultLogged == nil {
			s.faultLogged = map[string]string{}
		}
		s.faultLogged[qn] = f.Reason
		s.r.logger.Error("a captured table cannot be read faithfully from the binlog; it pauses",
			append([]any{"table", qn, "reason", f.Reason, "what_to_do", f.Fix}, attrs...)...)
	}
	s.add(source.Change{Table: t, Pos: Position(s.tx.ord, s.tx.idx), TxID: s.tx.ord, CommitTime: s.tx.ts, Fault: f})
}

// shape is captured table qn's newest shape: its last table map's, else
// the information schema's.
func (s *streamer) shape(qn string) *schema.Table {
	if v := s.latest[qn]; v != nil {
		return v.table
	}
	return s.captured[qn].table
}

// stoppable reports whether qn is a configured table (cdcd's own watermark
// and signal tables stop the reader instead).
func (s *streamer) stoppable(qn string) bool { return slices.Contains(s.r.cfg.Tables, qn) }

// shapeFault is the fault of a table whose new shape cdcd cannot map (a
// column type without a mapping, no primary key any more).
func shapeFault(te *TableError) *source.Fault {
	fix := "change the table back (the column's type, the primary key) or remove it from source.mysql.tables; "
	if errors.Is(te, errNoMetadata) {
		fix = "SET GLOBAL binlog_row_metadata = FULL (and in the server's config file); "
	}
	return &source.Fault{Reason: strings.TrimPrefix(te.Error(), "mysql: "), Fix: fix + resnapshot(te.Table)}
}

// imageFault is the fault of a row event that lacks columns.
func imageFault(qn string) *source.Fault {
	return &source.Fault{Reason: "table " + qn + ": a row image lacks columns (binlog_row_image is not FULL for the session that wrote it)",
		Fix: "SET GLOBAL binlog_row_image = 'FULL' (and in the server's config file; sessions that set it themselves need " +
			"their SUPER or BINLOG ADMIN privilege revoked); " + resnapshot(qn)}
}

// eventFault is the fault of a row event kind cdcd cannot decode.
func eventFault(qn string, kind fmt.Stringer) *source.Fault {
	return &source.Fault{Reason: fmt.Sprintf("table %s: row event %s is not supported (partial JSON updates?)", qn, kind),
		Fix: "SET GLOBAL binlog_row_value_options = '' (and in the server's config file); " + resnapshot(qn)}
}

// statementChanges stops every captured table a data change logged as a
// statement may have written (a session with binlog_format STATEMENT or
// MIXED): its rows are not in the binlog, so the mirror would miss them.
// The statement is not parsed: a table it names (statementNames) is
// stopped (a false alarm costs a re-snapshot; a miss would lose changes
// silently).
func (s *streamer) statementChanges(stmt, defaultDB string) {
	refs := statementNames(stmt)
	for _, qn := range slices.Sorted(maps.Keys(s.captured)) {
		d := s.captured[qn]
		if !refs.names(d.db, d.name, defaultDB) || !s.stoppable(qn) {
			continue
		}
		s.stopTable(qn, s.shape(qn), &source.Fault{
			Reason: fmt.Sprintf("data changes of %s were logged as statements, not as rows (binlog_format is STATEMENT or MIXED for "+
				"the session that ran them), so cdcd cannot read what they changed", qn),
			Fix: "make every session log rows: SET GLOBAL binlog_format = 'ROW' (and in the server's config file; sessions that set " +
				"binlog_format themselves need their SUPER or BINLOG ADMIN privilege revoked); " + resnapshot(qn),
		}, "statement", stmtText(stmt))
		s.tx.idx++
	}
}

// nameRefs are the names a statement holds, lower-cased: bare names, and
// qualified pairs "a.b" (a database and a table, or a table and a column).
type nameRefs struct {
	bare      map[string]bool
	qualified map[[2]string]bool
}

// names reports whether the statement may name table db.table, run with
// defaultDB as its default database: qualified, or bare in its database.
func (r nameRefs) names(db, table, defaultDB string) bool {
	db, table = strings.ToLower(db), strings.ToLower(table)
	return r.qualified[[2]string{db, table}] || r.bare[table] && strings.EqualFold(db, defaultDB)
}

// statementNames reads the names of a statement: bare words and
// back-quoted names, string literals skipped, so a table name is found
// whole, never inside a longer name or a string.
func statementNames(q string) nameRefs {
	r := nameRefs{bare: map[string]bool{}, qualified: map[[2]string]bool{}}
	prev := "" // the name before a '.'
	for s := q; s != ""; {
		if c := s[0]; c == '\'' || c == '"' {
			end := 1
			for end < len(s) && s[end] != c {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			s, prev = s[min(end+1, len(s)):], ""
			continue
		}
		id, rest, ok := parseIdent(s)
		if !ok {
			s, prev = s[1:], ""
			continue
		}
		id = strings.ToLower(id)
		if prev != "" {
			r.qualified[[2]string{prev, id}] = true
		} else {
			r.bare[id] = true
		}
		prev, s = "", rest
		if strings.HasPrefix(rest, ".") {
			prev, s = id, rest[1:]
		}
	}
	return r
}

// stmtText is a statement as the log shows it: at most 200 bytes (cut on
// a rune boundary, the cut marked), printable.
func stmtText(stmt string) string {
	if n := 200; len(stmt) > n {
		for n > 0 && !utf8.RuneStart(stmt[n]) {
			n--
		}
		stmt = stmt[:n] + "…"
	}
	return source.Printable(stmt)
}
