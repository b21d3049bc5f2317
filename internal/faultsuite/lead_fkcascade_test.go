package faultsuite

import (
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/daemon"
)

// TestMySQLForeignKeyCascade: MariaDB runs a foreign key's ON DELETE / ON
// UPDATE actions inside InnoDB and writes no row events for what they
// change, so before, the child's mirror kept the rows a cascade deleted
// (checked: 2 extra rows, no pause, no word). Now the captured child
// pauses at the parent's event, naming the foreign key and the fix, the
// other tables stream on, and a re-snapshot makes the mirror equal. An
// update of a parent's other columns pauses nothing; a chain of cascades
// (g → m → l) pauses l at g's delete.
func TestMySQLForeignKeyCascade(t *testing.T) {
	t.Parallel()
	p := newMyPipeline(t, []string{
		"CREATE TABLE parent (id INT PRIMARY KEY, v VARCHAR(20))",
		"CREATE TABLE child (id INT PRIMARY KEY, pid INT, v VARCHAR(20), " +
			"CONSTRAINT child_parent FOREIGN KEY (pid) REFERENCES parent (id) ON DELETE CASCADE ON UPDATE CASCADE)",
		"CREATE TABLE other (id INT PRIMARY KEY, v VARCHAR(20))",
		"CREATE TABLE g (id INT PRIMARY KEY)",
		"CREATE TABLE m (id INT PRIMARY KEY, gid INT, FOREIGN KEY (gid) REFERENCES g (id) ON DELETE CASCADE)",
		"CREATE TABLE l (id INT PRIMARY KEY, mid INT, FOREIGN KEY (mid) REFERENCES m (id) ON DELETE SET NULL)",
		"INSERT INTO parent VALUES (1, 'x'), (2, 'x'), (3, 'x')",
		"INSERT INTO child VALUES (10, 1, 'a'), (11, 1, 'b'), (20, 2, 'c'), (30, 3, 'd')",
		"INSERT INTO other VALUES (1, 'x')",
		"INSERT INTO g VALUES (1), (2)", "INSERT INTO m VALUES (1, 1), (2, 2)", "INSERT INTO l VALUES (1, 1), (2, 2)",
	}, []string{"child", "other", "l"}, "")
	p.start()
	child, l := p.name+".child", p.name+".l"
	for _, tb := range []string{child, p.name + ".other", l} {
		p.waitLoaded(tb)
	}
	p.waitMirror("child", "other", "l")
	if !p.logContains("a foreign key's ON DELETE / ON UPDATE action changes a captured table") {
		t.Errorf("no WARN at the start names the foreign keys whose actions change captured tables; log:\n%s", p.logTail(4000))
	}

	// Not a key change: nothing pauses.
	p.sql("UPDATE parent SET v = 'y' WHERE id = 2", "UPDATE g SET id = id WHERE id = 1", "INSERT INTO child VALUES (21, 2, 'e')")
	p.waitMirror("child")
	requireNotPaused(t, p.status(), child, l)

	p.sql("DELETE FROM parent WHERE id = 1", "INSERT INTO other VALUES (2, 'y')")
	ts := p.waitPaused(child, "foreign key", "child_parent", "ON DELETE CASCADE", p.name+".parent", "binlog")
	if !strings.Contains(ts.PausedFix, "cdcd snapshot -c FILE --replace "+child) {
		t.Errorf("the fix does not name the re-snapshot: %s", ts.PausedFix)
	}
	p.waitMirror("other")
	if d := p.myDiff("child"); d.Equal() || len(d.Extra) != 2 {
		t.Errorf("the paused child's mirror should still hold the 2 rows the cascade deleted: %s", d)
	}
	p.resnapshot(child, 3+1)
	p.waitMirror("child")
	requireNotPaused(t, p.status(), child)

	// A key update cascades too.
	p.sql("UPDATE parent SET id = 33 WHERE id = 3")
	p.waitPaused(child, "ON UPDATE CASCADE", "had its referenced columns updated")
	p.resnapshot(child, 3+2)
	p.waitMirror("child")

	// A chain: g's delete cascades to m (not logged), m's to l.
	p.sql("DELETE FROM g WHERE id = 2")
	p.waitPaused(l, "ON DELETE CASCADE", p.name+".g", "keys from "+p.name+".m on")
	p.resnapshot(l, 3+3)
	p.waitMirror("l", "child", "other")
	requireNotPaused(t, p.status(), child, l)
}

func requireNotPaused(t *testing.T, st daemon.Status, tables ...string) {
	t.Helper()
	for _, tb := range st.Tables {
		for _, name := range tables {
			if (tb.Source == name || tb.Table == name) && tb.Paused {
				t.Errorf("%s paused: %s", name, tb.PausedReason)
			}
		}
	}
}
