package faultsuite

import (
	"context"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/daemon"
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

	conn, err := p.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{"SET SESSION binlog_format = 'STATEMENT'", "UPDATE a SET v = 'by statement' WHERE id = 1"} {
		if _, err := conn.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
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
