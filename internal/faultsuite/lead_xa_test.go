package faultsuite

import (
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
)

// TestMySQLXATransactions: XA transactions prepared, then committed or
// rolled back, and committed in one phase. Before, the prepare group was
// taken as committed when the next group began (a warning), and a
// rollback left its rows in the mirror (checked: 1 extra row, 1 differing
// value, no pause). Now a rollback's changes are taken back, and one
// prepared before a restart (its changes not kept) pauses the tables it
// changed, naming the re-snapshot.
func TestMySQLXATransactions(t *testing.T) {
	t.Parallel()
	p := newMyPipeline(t, []string{"CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))", "CREATE TABLE b (id INT PRIMARY KEY, v VARCHAR(20))",
		"INSERT INTO a VALUES (1, 'x'), (6, 'x')", "INSERT INTO b VALUES (1, 'x')"}, []string{"a", "b"}, "")
	p.start()
	p.waitLoaded(p.name + ".a")
	p.waitLoaded(p.name + ".b")
	p.waitMirror("a", "b")
	run, end := p.session()
	run("XA START 'x1'", "INSERT INTO a VALUES (2, 'committed')", "XA END 'x1'", "XA PREPARE 'x1'", "XA COMMIT 'x1'",
		"XA START 'x2'", "INSERT INTO a VALUES (3, 'rolled back')", "UPDATE a SET v = 'rolled back' WHERE id = 1",
		"DELETE FROM a WHERE id = 6", "UPDATE a SET id = 7 WHERE id = 2", "INSERT INTO b VALUES (2, 'rolled back')",
		"XA END 'x2'", "XA PREPARE 'x2'")
	p.sql("INSERT INTO b VALUES (3, 'between')") // another transaction while x2 is prepared
	run("XA ROLLBACK 'x2'",
		"XA START 'x3'", "INSERT INTO a VALUES (4, 'one phase')", "XA END 'x3'", "XA COMMIT 'x3' ONE PHASE",
		"INSERT INTO a VALUES (5, 'plain')")
	p.waitMirror("a", "b")
	requireNotPaused(t, p.status(), p.name+".a", p.name+".b")
	if !p.logContains("an XA transaction was rolled back after its PREPARE") {
		t.Error("the daemon's log does not say the rolled-back XA transaction's changes were taken back")
	}
	if p.logContains("a transaction began before the last one ended") {
		t.Error("a prepare group was not ended at its XA_PREPARE event")
	}

	// Prepared, then the daemon restarts: the checkpoint keeps that x4
	// changed a (not its changes), so its rollback pauses a.
	run("XA START 'x4'", "INSERT INTO a VALUES (8, 'prepared')", "XA END 'x4'", "XA PREPARE 'x4'")
	p.waitFor("x4's row in the mirror", 3*time.Minute, func(daemon.Status) bool { return len(p.myDiff("a").Extra) == 1 })
	p.stop()
	p.start()
	end() // x4 stays prepared without its session
	p.sql("XA ROLLBACK 'x4'", "INSERT INTO b VALUES (4, 'after')")
	qa := p.name + ".a"
	p.waitPaused(qa, "XA transaction", "was rolled back", "prepared before cdcd's last start")
	p.waitMirror("b")
	p.resnapshot(qa, 1) // the first of this process
	p.waitMirror("a", "b")
	requireNotPaused(t, p.status(), qa)
}
