package faultsuite

import (
	"testing"
)

// TestMySQLColumnMoves (issue 22, MariaDB): as on PostgreSQL, a column
// dropped and added again under its name is a new column whose default
// the rows already there hold, and a renamed column holds its values
// under the new name, with no row event for either; the mirror must read
// the same, with the daemon running through the statements, stopped
// across them (the binlog still has them), and with a change between the
// DROP and the ADD. Before, 297 of 301 rows kept the old values.
func TestMySQLColumnMoves(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode   string
		stmts  []string
		origin string
	}{
		{"running", []string{"ALTER TABLE t DROP COLUMN c", "ALTER TABLE t ADD COLUMN c VARCHAR(20) DEFAULT 'new'"}, "recreated-column"},
		{"stopped", []string{"ALTER TABLE t DROP COLUMN c, ADD COLUMN c VARCHAR(20) DEFAULT 'new'"}, "recreated-column"},
		{"change-between", []string{"ALTER TABLE t DROP COLUMN c", "UPDATE t SET v = 'without c' WHERE id = 9",
			"ALTER TABLE t ADD COLUMN c VARCHAR(20)"}, "recreated-column"},
		{"running", []string{"ALTER TABLE t CHANGE c d VARCHAR(20)", "ALTER TABLE t RENAME COLUMN v TO c"}, "renamed-column"},
	} {
		t.Run(tc.mode+"/"+tc.origin, func(t *testing.T) {
			t.Parallel()
			p := newMyPipeline(t, []string{"CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), c VARCHAR(20))",
				"INSERT INTO t SELECT seq, CONCAT('v', seq), CONCAT('old', seq) FROM seq_1_to_300"}, []string{"t"}, "")
			p.start()
			p.waitLoaded(p.name + ".t")
			p.waitMirror("t")
			if tc.mode == "stopped" {
				p.stop()
			}
			p.sql(tc.stmts...)
			if tc.mode == "stopped" {
				p.start()
			}
			p.sql("INSERT INTO t (id) VALUES (301)", "UPDATE t SET id = id + 1000 WHERE id BETWEEN 6 AND 8")
			p.waitMirror("t")
			if !p.logContains("origin=" + tc.origin) {
				t.Errorf("the table's rows were not read again (origin=%s)", tc.origin)
			}
		})
	}
}
