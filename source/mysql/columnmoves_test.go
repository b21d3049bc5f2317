package mysql

import (
	"fmt"
	"testing"
)

// TestParseColumnOps: the column clauses of ALTER TABLE statements, as
// MySQL and MariaDB write them; clauses about other things than columns,
// and other statements, give none.
func TestParseColumnOps(t *testing.T) {
	for _, c := range []struct {
		q, table, ops string
	}{
		{"ALTER TABLE t DROP COLUMN c, ADD COLUMN c VARCHAR(20) DEFAULT 'new, (x)'", "db.t", "d:c a:c"},
		{"alter table `My``DB`.`T` rename column x to `c c`", "my`db.t", "r:x>c c"},
		{"ALTER TABLE t CHANGE x c DECIMAL(10,2) NOT NULL, ALGORITHM=INSTANT", "db.t", "r:x>c"},
		{"ALTER TABLE t CHANGE COLUMN IF EXISTS c c BIGINT", "db.t", "r:c>c"},
		{"ALTER TABLE t ADD COLUMN IF NOT EXISTS c INT", "db.t", "a:c?"},
		{"ALTER TABLE t DROP COLUMN IF EXISTS c", "db.t", "d:c"},
		{"alter table t add (a int, b enum('x,y','z') default 'x,y'), drop d", "db.t", "a:a a:b d:d"},
		{"ALTER ONLINE IGNORE TABLE IF EXISTS t WAIT 5 ADD c int", "db.t", "a:c"},
		{"ALTER TABLE t NOWAIT ADD c INET6 /* MariaDB */, ADD INDEX i (c)", "db.t", "a:c"},
		{"ALTER TABLE t ADD PRIMARY KEY (id), DROP INDEX i, DROP FOREIGN KEY f, ADD CONSTRAINT k CHECK (a > 0)", "db.t", ""},
		{"ALTER TABLE t ADD COLUMN `key` INT, DROP `index`", "db.t", "a:key d:index"},
		{"ALTER TABLE t RENAME TO u", "db.t", ""},
		{"ALTER TABLE t RENAME INDEX i TO j, MODIFY c BIGINT", "db.t", ""},
		{"ALTER TABLE t ADD c INT AS (id + 1) VIRTUAL, ADD d JSON CHECK (json_valid(d))", "db.t", "a:c a:d"},
	} {
		table, ops, ok := parseColumnOps(c.q, "db")
		if !ok {
			t.Errorf("%s: not recognised", c.q)
			continue
		}
		got := ""
		for i, op := range ops {
			if i > 0 {
				got += " "
			}
			got += fmt.Sprintf("%c:%s", op.kind, op.name)
			if op.kind == 'r' {
				got += ">" + op.to
			}
			if op.ifNotExists {
				got += "?"
			}
		}
		if tn := table[0] + "." + table[1]; tn != c.table || got != c.ops {
			t.Errorf("%s: %s %q, want %s %q", c.q, tn, got, c.table, c.ops)
		}
	}
	for _, q := range []string{"CREATE TABLE t (c INT)", "DROP TABLE t", "ALTER DATABASE d CHARACTER SET utf8mb4", "RENAME TABLE a TO b"} {
		if _, ops, ok := parseColumnOps(q, "db"); ok || len(ops) > 0 {
			t.Errorf("%s: recognised as an ALTER TABLE (%v)", q, ops)
		}
	}
}
