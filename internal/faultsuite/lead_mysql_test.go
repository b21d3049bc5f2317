package faultsuite

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/mirror"
)

// TestMySQLStatementLoggedPausesTable: a privileged session switches its
// own binlog_format to STATEMENT and updates a captured table, so the
// binlog carries the statement, not the rows. That table alone pauses,
// with the reason and the fix in /status, the alert and `cdcd status`; the
// other table streams on; the fix (cdcd snapshot --replace) resumes it and
// its mirror equals the source, the statement's change included.
func TestMySQLStatementLoggedPausesTable(t *testing.T) {
	t.Parallel()
	p := newMyPipeline(t, []string{"CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))", "CREATE TABLE b (id INT PRIMARY KEY, v VARCHAR(20))",
		"INSERT INTO a VALUES (1, 'x'), (2, 'x')", "INSERT INTO b VALUES (1, 'x')"}, []string{"a", "b"}, "")
	p.start()
	p.waitLoaded(p.name + ".a")
	p.waitLoaded(p.name + ".b")
	p.waitMirror("a", "b")

	run, _ := p.session()
	run("SET SESSION binlog_format = 'STATEMENT'", "UPDATE a SET v = 'by statement' WHERE id = 1")
	p.sql("UPDATE a SET v = 'held' WHERE id = 2", "INSERT INTO b VALUES (2, 'y')")
	qa := p.name + ".a"
	p.waitPaused(qa, "logged as statements")
	p.requireAlert(daemon.AlertTablePaused, "a", "binlog_format = 'ROW'", "cdcd snapshot -c FILE --replace "+qa)
	p.waitMirror("b")
	if d := p.myDiff("a"); d.Equal() {
		t.Error("the mirror of a equals the source while a is paused: the statement's change was read after all?")
	}

	p.resnapshot(qa, 3)
	p.waitMirror("a", "b")
	for _, tb := range p.status().Tables {
		if tb.Paused {
			t.Errorf("%s still paused after the re-snapshot: %s", tb.Source, tb.PausedReason)
		}
	}
	if out, _, _ := p.cdcd("status", "-c", p.CfgPath); strings.Contains(out, "PAUSED") {
		t.Errorf("cdcd status still shows a paused table:\n%s", out)
	}
}

// TestMySQLColumnsWhileStopped (issue 22, MariaDB): what an ALTER does
// while cdcd is stopped is still carried, from the reader's record of
// each table's columns. A column added with a default on format 2 has the
// table's rows read again (nothing in the binlog gives them the value); a
// column that got an initial-default on format 3 and is dropped reads NULL
// in rows written after the drop through iceberg-go's scan, while rows
// nobody touched since keep the default.
func TestMySQLColumnsWhileStopped(t *testing.T) {
	t.Parallel()
	t.Run("added/v2", func(t *testing.T) {
		t.Parallel()
		p := newMyPipeline(t, []string{"CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))"}, []string{"t"}, "")
		p.format = 2
		p.writeMyConfig()
		p.myRowsT(200)
		p.start()
		p.waitLoaded(p.name + ".t")
		p.waitMirror("t")
		p.stop()
		p.sql("ALTER TABLE t ADD COLUMN c VARCHAR(10) DEFAULT 'red'")
		p.start()
		p.waitMirror("t")
		if !p.logContains("origin=added-default") {
			t.Error("the rows were not read again")
		}
	})
	t.Run("dropped/v3", func(t *testing.T) {
		t.Parallel()
		p := newMyPipeline(t, []string{"CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))"}, []string{"t"}, "")
		p.myRowsT(200)
		p.start()
		p.waitLoaded(p.name + ".t")
		p.sql("ALTER TABLE t ADD COLUMN c VARCHAR(10) DEFAULT 'red'", "INSERT INTO t VALUES (201, 'with c', 'blue')")
		p.waitMirror("t")
		p.stop()
		p.sql("ALTER TABLE t DROP COLUMN c")
		p.start()
		p.sql("INSERT INTO t VALUES (202, 'after the drop')", "UPDATE t SET v = 'updated' WHERE id <= 10 OR id = 201")
		p.waitMirror("t")
		got := p.icebergColumn(p.name+".t", "c", "id")
		bad := 0
		for id := 1; id <= 202; id++ {
			want := "red"
			if id <= 10 || id >= 201 {
				want = mirror.Null // written after the drop
			}
			if g := got[fmt.Sprint(id)]; g != want && bad < 5 {
				bad++
				t.Errorf("id %d: Iceberg column c reads %q, want %q", id, g, want)
			}
		}
	})
}

// myRowsT inserts rows 1..n into t (id, v).
func (p *myPipeline) myRowsT(n int) {
	p.t.Helper()
	var vals []string
	for i := 1; i <= n; i++ {
		vals = append(vals, fmt.Sprintf("(%d, 'v%d')", i, i))
	}
	p.sql("INSERT INTO t (id, v) VALUES " + strings.Join(vals, ", "))
}

// session opens one connection to the test's database (session settings
// and XA transactions hold to it) and returns a func that runs statements
// on it in order, and one that closes it (else the test's end does).
func (p *myPipeline) session() (run func(stmts ...string), end func()) {
	p.t.Helper()
	conn, err := p.db.Conn(p.ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	var once sync.Once
	end = func() {
		once.Do(func() {
			if err := conn.Close(); err != nil {
				p.t.Error(err)
			}
		})
	}
	p.t.Cleanup(end)
	return func(stmts ...string) {
		p.t.Helper()
		for _, q := range stmts {
			if _, err := conn.ExecContext(p.ctx, q); err != nil {
				p.t.Fatalf("%s: %v", q, err)
			}
		}
	}, end
}
