package mysql

import (
	"context"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/source"
)

// TestStatementLoggedChange: a session that logs its changes as statements
// (SET SESSION binlog_format = 'STATEMENT', which a privileged user may do
// whatever the server's setting) writes rows the binlog does not carry.
// The captured table it wrote is stopped with the reason and the fix; a
// table whose name merely contains the captured name is not, and the other
// captured table streams on.
func TestStatementLoggedChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))", "CREATE TABLE u (id INT PRIMARY KEY)",
		"CREATE TABLE t_archive (id INT PRIMARY KEY)")
	d := newDedupe(1)
	e.reader(t, newMemState(), d, "t", func(c *Config) { c.Tables = []string{e.name + ".t", e.name + ".u"} })
	ctx := context.Background()
	conn, err := e.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{"SET SESSION binlog_format = 'STATEMENT'", "INSERT INTO t_archive VALUES (1)",
		"BEGIN", "INSERT INTO `t` VALUES (1, 'lost as rows')", "COMMIT"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	e.exec(t, "INSERT INTO u VALUES (1)", "INSERT INTO t VALUES (2, 'row')")
	got := d.waitFor(t, "u's and t's rows", func(cs []source.Change) bool {
		n := 0
		for _, c := range cs {
			if c.Fault == nil && c.Op == source.OpCreate {
				n++
			}
		}
		return n >= 2
	})
	var faults []source.Change
	for _, c := range got {
		if c.Fault != nil {
			faults = append(faults, c)
		}
	}
	if len(faults) != 1 {
		t.Fatalf("%d faults, want one (table t): %+v", len(faults), faults)
	}
	f, qn := faults[0].Fault, e.name+".t"
	if faults[0].Table.QualifiedName() != qn || faults[0].After != nil || faults[0].Before != nil {
		t.Errorf("fault on %s with rows %v / %v, want %s with no row", faults[0].Table.QualifiedName(), faults[0].Before, faults[0].After, qn)
	}
	if !strings.Contains(f.Reason, "logged as statements") || !strings.Contains(f.Reason, qn) ||
		!strings.Contains(f.Fix, "SET GLOBAL binlog_format = 'ROW'") || !strings.Contains(f.Fix, "cdcd snapshot -c FILE --replace "+qn) {
		t.Errorf("fault %+v", f)
	}
	if got[0].Fault == nil {
		t.Errorf("the first change is %s %v, want the fault (it precedes every later change)", got[0].Op, got[0].After)
	}
}

func TestIdentifiers(t *testing.T) {
	ids := identifiers("UPDATE `sh``op`.orders_archive o JOIN items ON o.id = items.id SET o.note = 'orders' WHERE x = \"t\"")
	for _, want := range []string{"sh`op", "orders_archive", "items", "o", "note"} {
		if !ids[want] {
			t.Errorf("identifier %q not found in %v", want, ids)
		}
	}
	for _, not := range []string{"orders", "t"} {
		if ids[not] {
			t.Errorf("%q (inside a name or a string) taken for an identifier", not)
		}
	}
	if s := parseStatement("/* app */ insert into t values (1)", "db"); s.kind != stmtDML {
		t.Errorf("insert: kind %d", s.kind)
	}
}
