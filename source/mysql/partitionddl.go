package mysql

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Partition DDL moves rows without row events: ALTER TABLE t DROP
// PARTITION and TRUNCATE PARTITION delete a partition's rows, EXCHANGE
// PARTITION p WITH TABLE u swaps the rows of t's partition and of u, and
// MariaDB's CONVERT PARTITION p TO TABLE u and CONVERT TABLE u TO
// PARTITION p move a partition's rows out of t into a new table u, or u's
// rows into t. The binlog carries the statement only, so a mirror left
// alone would keep rows the source dropped, or lack rows it gained — a
// retention job's DROP PARTITION is a daily event. ALTER TABLE … IMPORT
// [PARTITION …] TABLESPACE replaces rows the same way. cdcd recognises these
// clauses (the statement kinds, not their partition definitions) and:
//   - rows left t (DROP, TRUNCATE, EXCHANGE, CONVERT PARTITION): t stops
//     at the statement, naming it, with both fixes (re-snapshot it to
//     match the source, or resume it to keep the rows as an archive);
//   - rows only entered t (CONVERT TABLE … TO PARTITION): t is read again
//     by an incremental snapshot, which adds them;
//   - t's rows were replaced (IMPORT TABLESPACE): t is read again by a
//     replacing snapshot;
//   - u, when captured, is read again by a replacing snapshot (EXCHANGE:
//     all its rows changed), or is emptied like a dropped table (CONVERT
//     TABLE: it is gone).

// partitionOp is a row-moving partition clause of an ALTER TABLE.
type partitionOp struct {
	kind  string    // "DROP PARTITION", "TRUNCATE PARTITION", "EXCHANGE PARTITION", "CONVERT PARTITION", "CONVERT TABLE"
	other [2]string // EXCHANGE's and CONVERT's other table, lower-cased
}

// removes reports whether rows leave the altered table (an imported
// tablespace replaces them: read again whole instead).
func (op partitionOp) removes() bool {
	return op.kind != "CONVERT TABLE" && op.kind != "IMPORT TABLESPACE"
}

// parsePartitionOps reads the row-moving partition clauses of an ALTER
// TABLE statement and the table it alters (lower-cased); ok is false for
// any other statement.
func parsePartitionOps(q, defaultDB string) (table [2]string, ops []partitionOp, ok bool) {
	tk, table, ok := alterTable(q, defaultDB)
	if !ok {
		return table, nil, false
	}
	for !tk.done() {
		w := tk.word()
		switch {
		case w == "":
			tk.skip()
		case (w == "DROP" || w == "TRUNCATE") && tk.peekWord() == "PARTITION":
			tk.word()
			ops = append(ops, partitionOp{kind: w + " PARTITION"})
		case w == "EXCHANGE" && tk.peekWord() == "PARTITION":
			tk.word()
			tk.ident()
			if tk.word() == "WITH" && tk.word() == "TABLE" {
				if other, ok := tk.name(defaultDB); ok {
					ops = append(ops, partitionOp{kind: "EXCHANGE PARTITION", other: other})
				}
			}
		case w == "CONVERT" && tk.peekWord() == "PARTITION":
			tk.word()
			tk.ident()
			if tk.word() == "TO" && tk.word() == "TABLE" {
				if other, ok := tk.name(defaultDB); ok {
					ops = append(ops, partitionOp{kind: "CONVERT PARTITION", other: other})
				}
			}
		case w == "IMPORT":
			// IMPORT TABLESPACE, IMPORT PARTITION p[, ...] TABLESPACE.
			ops = append(ops, partitionOp{kind: "IMPORT TABLESPACE"})
		case w == "CONVERT" && tk.peekWord() == "TABLE":
			tk.word()
			if other, ok := tk.name(defaultDB); ok {
				ops = append(ops, partitionOp{kind: "CONVERT TABLE", other: other})
			}
		}
	}
	return table, ops, true
}

// partitionMoves acts on an ALTER TABLE statement's row-moving partition
// clauses (see above), before the tables are described again.
func (s *streamer) partitionMoves(ctx context.Context, stmt, defaultDB string) error {
	table, ops, ok := parsePartitionOps(stmt, defaultDB)
	if !ok || len(ops) == 0 {
		return nil
	}
	for _, qn := range slices.Sorted(maps.Keys(s.captured)) {
		d := s.captured[qn]
		if !s.stoppable(qn) {
			continue
		}
		key := [2]string{strings.ToLower(d.db), strings.ToLower(d.name)}
		t := s.shape(qn)
		for _, op := range ops {
			switch {
			case key == table && op.removes():
				fix := "to make the mirror equal the source, re-snapshot the table: cdcd snapshot -c FILE --replace " + qn +
					"; to keep those rows in the mirror (an archive of what the source dropped), resume it as it is: cdcd table skip -c FILE " + qn
				if op.kind == "EXCHANGE PARTITION" {
					fix = "re-snapshot the table: cdcd snapshot -c FILE --replace " + qn +
						" (or, accepting that the mirror differs from the source, cdcd table skip -c FILE " + qn + ")"
				}
				reason := "ALTER TABLE … " + op.kind + " moved rows out of " + qn + " without row events in the binlog, so the mirror still holds them"
				if op.kind == "EXCHANGE PARTITION" {
					reason += " and lacks the rows that came in"
				}
				s.stopTable(qn, t, &source.Fault{Reason: reason, Fix: fix}, "statement", stmtText(stmt))
				s.tx.idx++
			case key == table && op.kind == "IMPORT TABLESPACE":
				s.r.logger.Info("a captured table's rows were replaced by an imported tablespace without row events: reading the table again",
					"table", qn, "statement", stmtText(stmt))
				if err := s.r.inc.Restart(ctx, snapshot.Request{Table: qn, Replace: true, Origin: "tablespace-imported"}); err != nil {
					return err
				}
			case key == table:
				s.r.logger.Info("a table's rows became a partition of a captured table without row events: reading the table again",
					"table", qn, "statement", stmtText(stmt))
				if err := s.r.inc.Restart(ctx, snapshot.Request{Table: qn, Origin: "partition-attached"}); err != nil {
					return err
				}
			case key == op.other && op.kind == "EXCHANGE PARTITION":
				s.r.logger.Info("a captured table's rows were exchanged with a partition's without row events: reading them again",
					"table", qn, "statement", stmtText(stmt))
				if err := s.r.inc.Restart(ctx, snapshot.Request{Table: qn, Replace: true, Origin: "partition-exchanged"}); err != nil {
					return err
				}
			case key == op.other && op.kind == "CONVERT TABLE":
				s.r.logger.Warn("a captured table became a partition of another table: it is gone, so its mirror is emptied at this point "+
					"(earlier Iceberg snapshots keep the rows)", "table", qn, "statement", stmtText(stmt))
				s.truncate(qn)
			}
		}
	}
	return nil
}
