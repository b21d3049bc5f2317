package faultsuite

import (
	"testing"

	"github.com/apache/iceberg-go/table"
)

// TestMirrorColumnRenamedByAnotherWriter: a mirror column renamed or
// dropped by another engine (cdcd never does either) is added again by
// the sink for the source's column, and the rows already in the table
// read NULL in it. That used to happen without a word; the sink now logs
// an ERROR naming the column and the fix (rename it back, or re-snapshot).
// Left for later: pausing the table instead (see the closing note of
// session 13).
func TestMirrorColumnRenamedByAnotherWriter(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE a (id int PRIMARY KEY, v text, w int);
			INSERT INTO a SELECT g, 'v' || g, g FROM generate_series(1, 100) g;`,
		Tables: []string{"public.a"},
	})
	p.start()
	p.waitCaughtUp()
	p.stop()
	cat := p.openCatalog()
	tbl, err := cat.LoadTable(p.ctx, table.Identifier{"cdc", "a"})
	if err != nil {
		t.Fatal(err)
	}
	tx := tbl.NewTransaction()
	if err := tx.UpdateSchema(true, false).RenameColumn([]string{"v"}, "v_renamed").Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(p.ctx); err != nil {
		t.Fatal(err)
	}
	closeCatalog(cat)
	p.start()
	p.exec(`UPDATE a SET v = 'u', w = -1 WHERE id <= 10`)
	p.waitCaughtUp()
	if !p.logContains("a column the table had is gone from its schema") || !p.logContains("column=v") {
		t.Error("the daemon's log does not say the mirror's column v was gone and added again")
	}
	if d := p.diff("public.a"); len(d.Differ) != 90 {
		t.Errorf("want the 90 rows not rewritten to read NULL in v (what the ERROR says): %s", d)
	}
}
