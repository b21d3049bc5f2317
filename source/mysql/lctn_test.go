package mysql

import (
	"fmt"
	"testing"

	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
	"github.com/cdcd-dev/cdcd/source"
)

// TestLowerCaseTableNames: on a server that folds table names
// (lower_case_table_names=1, the default of MySQL on Windows and macOS
// and a common setting of managed servers), a statement may name a
// captured table in any case. TRUNCATE TABLE T empties the mirror of t,
// and ALTER TABLE T adding a column with a default that the rows already
// there hold reads t again. Both were missed: the truncate was dropped
// (the mirror kept every row) and the rows kept a NULL the source does
// not have, with no word.
func TestLowerCaseTableNames(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, mariadbtest.NewServer(t, mariadbserver.Options{Args: []string{"--lower-case-table-names=1"}}))
	wt := e.grantWatermarks(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)")
	d := newDedupe(1)
	e.reader(t, newMemState(), d, "t", func(c *Config) { c.WatermarkTable = wt })
	e.exec(t, "INSERT INTO t VALUES (10)")
	d.waitFor(t, "the reader streaming", func(cs []source.Change) bool { return len(cs) > 0 })
	e.exec(t, "TRUNCATE TABLE T", "INSERT INTO t VALUES (3)")
	got := d.waitFor(t, "the insert after the truncate", func(cs []source.Change) bool {
		return len(cs) > 0 && fmt.Sprint(cs[len(cs)-1].After) == "[3]"
	})
	truncated := false
	for _, c := range got {
		truncated = truncated || c.Op == source.OpTruncate
	}
	if !truncated {
		t.Errorf("TRUNCATE TABLE T sent no truncate of %s.t; changes %v", e.name, got)
	}
	e.exec(t, "ALTER TABLE T ADD COLUMN c INT DEFAULT 5", "INSERT INTO t VALUES (4, 6)")
	got = d.waitFor(t, "table t read again after ALTER TABLE T", func(cs []source.Change) bool {
		for _, c := range cs {
			if c.Snapshot && len(c.After) == 2 && fmt.Sprint(c.After[0]) == "3" {
				return true
			}
		}
		return false
	})
	for _, c := range got {
		if c.Snapshot && len(c.After) == 2 && fmt.Sprint(c.After[0]) == "3" && fmt.Sprint(c.After[1]) != "5" {
			t.Errorf("row 3 read again as %v, want c = 5", c.After)
		}
	}
}

// TestTableNamesCaseKept: on a server that tells t from T
// (lower_case_table_names 0, Linux's default), DROP TABLE T is no drop of
// captured table t: t's mirror was emptied, with only a warning, while t
// kept its rows at the source.
func TestTableNamesCaseKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var lctn string
	if err := e.db.QueryRow("SELECT @@lower_case_table_names").Scan(&lctn); err != nil || lctn != "0" {
		t.Fatalf("lower_case_table_names %q (%v): the test needs a server that tells t from T", lctn, err)
	}
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY)", "CREATE TABLE T (id INT PRIMARY KEY)")
	d := newDedupe(1)
	e.reader(t, newMemState(), d, "t")
	e.exec(t, "INSERT INTO t VALUES (1)")
	d.waitFor(t, "the reader streaming", func(cs []source.Change) bool { return len(cs) > 0 })
	e.exec(t, "DROP TABLE T", "INSERT INTO t VALUES (2)")
	got := d.waitFor(t, "the insert after DROP TABLE T", func(cs []source.Change) bool {
		return len(cs) > 0 && fmt.Sprint(cs[len(cs)-1].After) == "[2]"
	})
	for _, c := range got {
		if c.Op == source.OpTruncate {
			t.Errorf("DROP TABLE T emptied the mirror of t; changes %v", got)
		}
	}
}
