package faultsuite

import (
	"testing"
	"time"
)

// TestColumnTypeChangedWithValues (PostgreSQL): ALTER COLUMN … TYPE with a
// USING expression rewrites every row and sends nothing on the
// replication stream; the mirror must read the new values all the same,
// with the daemon running through the statements and stopped across them.
// Before, 300 of 303 values stayed old. A key column's USING changes the
// keys: the mirror is replaced, or it would keep the old keys' rows.
func TestColumnTypeChangedWithValues(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"running", "stopped", "key"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			p := newPipeline(t, pipelineOptions{
				DDL: `CREATE TABLE t (id int PRIMARY KEY, v varchar(20), n int, m numeric(10,2));
					INSERT INTO t SELECT g, 'v' || g, g, g + 0.25 FROM generate_series(1, 300) g;`,
				Tables: []string{"public.t"},
			})
			p.start()
			p.waitCaughtUp()
			if mode == "stopped" {
				p.stop()
			}
			p.exec(`ALTER TABLE t ALTER COLUMN v TYPE text USING upper(v)`)
			p.exec(`ALTER TABLE t ALTER COLUMN n TYPE bigint USING n * 100`)
			p.exec(`ALTER TABLE t ALTER COLUMN m TYPE numeric(12,2) USING m * 2`)
			if mode == "key" {
				p.exec(`ALTER TABLE t ALTER COLUMN id TYPE bigint USING id + 1000`)
			}
			if mode == "stopped" {
				p.start()
			}
			p.exec(`INSERT INTO t VALUES (1301, 'after', 3, 1.5)`)
			p.waitCaughtUp()
			p.waitMirror("public.t", 3*time.Minute) // the re-read runs on after the catch-up
			if !p.logContains(`origin=column-type-changed`) {
				t.Error("the table's rows were not read again for the changed types")
			}
			if replaced := p.logContains(`replace=true where="" origin=column-type-changed`); replaced != (mode == "key") {
				t.Errorf("mode %s: the mirror replaced %t", mode, replaced)
			}
		})
	}
}

// TestMySQLColumnTypeChangedWithValues (MariaDB, a non-strict sql_mode):
// MODIFY to a charset without é writes '?' for it, MODIFY to a shorter
// VARCHAR cuts the values, and the binlog has only the DDL; the mirror
// must read the converted values, with the daemon running through the
// statements and stopped across them. Before, 200 values stayed old. A
// key column converted ('é' to '?') has the mirror replaced, or it would
// keep the old keys' rows.
func TestMySQLColumnTypeChangedWithValues(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"running", "stopped", "key"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			create := "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20) CHARACTER SET utf8mb4, s VARCHAR(20)) CHARACTER SET utf8mb4"
			if mode == "key" {
				create = "CREATE TABLE t (id INT, v VARCHAR(20) CHARACTER SET utf8mb4 PRIMARY KEY, s VARCHAR(20)) CHARACTER SET utf8mb4"
			}
			p := newMyPipeline(t, []string{create,
				"INSERT INTO t SELECT seq, CONCAT('café', seq), CONCAT('long', seq) FROM seq_1_to_100"}, []string{"t"}, "")
			p.start()
			p.waitLoaded(p.name + ".t")
			p.waitMirror("t")
			if mode == "stopped" {
				p.stop()
			}
			run, end := p.session()
			run("SET SESSION sql_mode = ''",
				"ALTER TABLE t MODIFY v VARCHAR(20) CHARACTER SET ascii",
				"ALTER TABLE t MODIFY s VARCHAR(4)")
			end()
			var converted int
			if err := p.db.QueryRow("SELECT COUNT(*) FROM t WHERE v LIKE 'caf?%' AND LENGTH(s) = 4").Scan(&converted); err != nil {
				t.Fatal(err)
			}
			if converted != 100 {
				t.Fatalf("the server converted %d rows, want all 100 (the test's premise)", converted)
			}
			if mode == "stopped" {
				p.start()
			}
			p.sql("INSERT INTO t VALUES (101, 'after', 'x')")

			p.waitMirror("t")
			if !p.logContains("origin=column-type-changed") {
				t.Error("the table's rows were not read again for the changed types")
			}
			if replaced := p.logContains(`replace=true where="" origin=column-type-changed`); replaced != (mode == "key") {
				t.Errorf("mode %s: the mirror replaced %t", mode, replaced)
			}
		})
	}
}
