package mysql

import (
	"context"
	"fmt"
	"testing"

	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
)

// TestReadCascades: the foreign keys whose actions change a captured table
// are found by parent, through chains, and the ones that do not act
// (RESTRICT, NO ACTION) or do not reach a captured table are not.
func TestReadCascades(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, q := range []string{
		"CREATE TABLE g (id INT PRIMARY KEY)",
		"CREATE TABLE m (id INT PRIMARY KEY, gid INT, FOREIGN KEY (gid) REFERENCES g (id) ON DELETE CASCADE)",
		"CREATE TABLE l (id INT PRIMARY KEY, mid INT, CONSTRAINT l_m FOREIGN KEY (mid) REFERENCES m (id) ON DELETE SET NULL)",
		"CREATE TABLE p (a INT, b INT, PRIMARY KEY (a, b))",
		"CREATE TABLE c (id INT PRIMARY KEY, pa INT, pb INT, CONSTRAINT c_p FOREIGN KEY (pa, pb) REFERENCES p (a, b) ON UPDATE CASCADE)",
		"CREATE TABLE r (id INT PRIMARY KEY, pa INT, pb INT, FOREIGN KEY (pa, pb) REFERENCES p (a, b) ON DELETE RESTRICT ON UPDATE NO ACTION)",
		"CREATE TABLE uncaptured (id INT PRIMARY KEY, gid INT, FOREIGN KEY (gid) REFERENCES g (id) ON DELETE CASCADE)",
	} {
		if _, err := e.db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	n := e.name
	// As the replication user cdcd connects as (SELECT on every table).
	db, err := mariadbserver.OpenDSN(fmt.Sprintf("%s:%s@tcp(%s)/%s", mariadbserver.ReplUser, mariadbserver.ReplPassword, e.srv.Addr(), n))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fk, err := readCascades(context.Background(), db, []string{n + ".l", n + ".c", n + ".r"})
	if err != nil {
		t.Fatal(err)
	}
	if got := fk[n+".m"]; len(got) != 1 || got[0].child != n+".l" || got[0].onDelete != "SET NULL" || got[0].onUpdate != "" ||
		got[0].name != n+".l.l_m" || got[0].via != "" {
		t.Errorf("m's actions: %+v", got)
	}
	if got := fk[n+".g"]; len(got) != 1 || got[0].child != n+".l" || got[0].onDelete != "CASCADE" || got[0].via != n+".m" {
		t.Errorf("g's actions (through m, uncaptured's not): %+v", got)
	}
	if got := fk[n+".p"]; len(got) != 1 || got[0].child != n+".c" || got[0].onUpdate != "CASCADE" || got[0].onDelete != "" ||
		len(got[0].refCols) != 2 || got[0].refCols[0] != "a" || got[0].refCols[1] != "b" {
		t.Errorf("p's actions (r's RESTRICT not): %+v", got)
	}
	if len(fk) != 3 {
		t.Errorf("%d parents, want 3: %+v", len(fk), fk)
	}
}

func TestParseForeignKeyRules(t *testing.T) {
	ddl := "CREATE TABLE `c` (\n  `id` int(11) NOT NULL,\n  `pid` int(11) DEFAULT NULL,\n  PRIMARY KEY (`id`),\n" +
		"  KEY `pid` (`pid`),\n  CONSTRAINT `c_ibfk_1` FOREIGN KEY (`pid`) REFERENCES `p` (`id`) ON DELETE CASCADE,\n" +
		"  CONSTRAINT `odd``name` FOREIGN KEY (`pid`) REFERENCES `other`.`p` (`id`) ON DELETE SET NULL ON UPDATE SET DEFAULT,\n" +
		"  CONSTRAINT `plain` FOREIGN KEY (`pid`) REFERENCES `p` (`id`),\n" +
		"  CONSTRAINT `chk` CHECK (`id` > 0)\n) ENGINE=InnoDB"
	got := parseForeignKeyRules(ddl)
	want := map[string][2]string{"c_ibfk_1": {"CASCADE", "RESTRICT"}, "odd`name": {"SET NULL", "SET DEFAULT"}, "plain": {"RESTRICT", "RESTRICT"}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %v, want %v", k, got[k], w)
		}
	}
}
