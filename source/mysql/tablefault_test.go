package mysql

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/source"
)

// TestStatementLoggedChange: a session that logs its changes as statements
// (SET SESSION binlog_format = 'STATEMENT', which a privileged user may do
// whatever the server's setting) writes rows the binlog does not carry.
// The captured table it wrote is stopped with the reason and the fix; a
// table whose name merely contains the captured name is not, nor a table of
// that name in another database, and the other captured table streams on.
func TestStatementLoggedChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))", "CREATE TABLE u (id INT PRIMARY KEY)",
		"CREATE TABLE t_archive (id INT PRIMARY KEY)")
	d := newDedupe(1)
	e.reader(t, newMemState(), d, "t", func(c *Config) { c.Tables = []string{e.name + ".t", e.name + ".u"} })
	other := newEnv(t) // a database of another test, with a table of the same name
	other.exec(t, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
	e.session(t, "SET SESSION binlog_format = 'STATEMENT'", "INSERT INTO t_archive VALUES (1)",
		"INSERT INTO "+other.name+".t VALUES (1, 'other database')",
		"BEGIN", "INSERT INTO `t` VALUES (1, 'lost as rows')", "COMMIT")
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

func TestStatementNames(t *testing.T) {
	r := statementNames("UPDATE `sh``op`.orders_archive o JOIN items ON o.id = items.id SET o.note = 'orders' WHERE x = \"t\" AND `my.db`.`t`.c = 1")
	for _, tc := range []struct {
		db, table, defaultDB string
		want                 bool
	}{
		{"sh`op", "orders_archive", "other", true}, // qualified
		{"shop", "items", "shop", true},            // bare, in the default database
		{"other", "items", "shop", false},          // bare, another database
		{"shop", "orders", "shop", false},          // in a longer name and a string only
		{"shop", "t", "shop", false},               // a string, and qualified by another database
		{"my.db", "t", "shop", true},
		{"sh`op", "Orders_Archive", "x", true}, // names compare in lower case
	} {
		if got := r.names(tc.db, tc.table, tc.defaultDB); got != tc.want {
			t.Errorf("names(%q, %q, default %q) = %v, want %v", tc.db, tc.table, tc.defaultDB, got, tc.want)
		}
	}
	if s := parseStatement("/* app */ insert into t values (1)", "db"); s.kind != stmtDML {
		t.Errorf("insert: kind %d", s.kind)
	}
}

// TestTableStopsAlone: while streaming, a captured table whose rows cdcd
// cannot read faithfully any more stops alone, with the reason and the
// fix, and the other table streams on: a session that logs partial row
// images (binlog_row_image = MINIMAL), and a primary key dropped.
func TestTableStopsAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))", "CREATE TABLE u (id INT PRIMARY KEY)",
		"INSERT INTO t VALUES (1, 'a'), (2, 'b')")
	d := newDedupe(1)
	e.reader(t, newMemState(), d, "t", func(c *Config) { c.Tables = []string{e.name + ".t", e.name + ".u"} })
	e.session(t, "SET SESSION binlog_row_image = 'MINIMAL'", "UPDATE t SET v = 'minimal' WHERE id = 1")
	e.exec(t, "INSERT INTO u VALUES (1)", "UPDATE t SET v = 'full' WHERE id = 2",
		"ALTER TABLE u DROP PRIMARY KEY", "INSERT INTO u VALUES (2)", "INSERT INTO t VALUES (3, 'c')")
	got := d.waitFor(t, "t's row 3", func(cs []source.Change) bool {
		for _, c := range cs {
			if c.Fault == nil && c.Op == source.OpCreate && fmt.Sprint(c.After) == "[3 c]" {
				return true
			}
		}
		return false
	})
	var seen []string
	for _, c := range got {
		switch {
		case c.Fault != nil:
			seen = append(seen, "fault "+c.Table.Name+": "+c.Fault.Reason+" / "+c.Fault.Fix)
		default:
			seen = append(seen, fmt.Sprintf("%s %s %v", c.Op, c.Table.Name, c.After))
		}
	}
	want := []string{
		"fault t: table " + e.name + ".t: a row image lacks columns (binlog_row_image is not FULL",
		"c u [1]",
		"u t [2 full]",
		"fault u: table " + e.name + ".u: the binlog shows no primary key",
		"c t [3 c]",
	}
	if len(seen) != len(want) {
		t.Fatalf("changes:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(seen[i], w) {
			t.Errorf("change %d: %s\nwant it to begin %s", i, seen[i], w)
		}
	}
	for _, i := range []int{0, 3} {
		qn := got[i].Table.QualifiedName()
		if f := got[i].Fault; f == nil || !strings.Contains(f.Fix, "cdcd snapshot -c FILE --replace "+qn) {
			t.Errorf("fault %d names no re-snapshot of %s: %+v", i, qn, f)
		}
	}
	if f := got[0].Fault; f == nil || !strings.Contains(f.Fix, "SET GLOBAL binlog_row_image = 'FULL'") {
		t.Errorf("the partial image's fix: %+v", f)
	}
}

func TestShapeFaultFix(t *testing.T) {
	f := shapeFault(&TableError{Table: "shop.t", Err: errNoMetadata})
	if !strings.Contains(f.Fix, "SET GLOBAL binlog_row_metadata = FULL") || !strings.Contains(f.Fix, "--replace shop.t") {
		t.Errorf("no metadata: fix %q", f.Fix)
	}
	f = shapeFault(&TableError{Table: "shop.t", Column: "g", Type: "weird", Err: errors.New("no mapping")})
	if !strings.Contains(f.Reason, `column "g" (type weird)`) || !strings.Contains(f.Fix, "change the table back") {
		t.Errorf("unmapped type: %+v", f)
	}
}
