package faultsuite

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/daemon"
)

// TestMirrorColumnRenamedByAnotherWriter: a mirror column renamed or
// dropped by another engine (cdcd never does either). Added again for the
// source's column, every row already in the table would read NULL in it:
// the sink logged an ERROR and did that (session 13). Now the table
// pauses, naming the column, its new name and the fix; renamed back, it
// resumes and mirrors the source.
func TestMirrorColumnRenamedByAnotherWriter(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE a (id int PRIMARY KEY, v text, w int);
			INSERT INTO a SELECT g, 'v' || g, g FROM generate_series(1, 100) g;`,
		Tables:    []string{"public.a"},
		SinkExtra: "retry_interval: 2s", // the paused table is looked at again every 2 s
	})
	p.start()
	p.waitCaughtUp()
	p.stop()
	p.renameMirrorColumn("a", "v", "v_renamed")
	p.start()
	p.exec(`UPDATE a SET v = 'u', w = -1 WHERE id <= 10`)
	ts := p.waitPaused("cdc.a", `column "v"`, `named "v_renamed"`)
	if !strings.Contains(ts.PausedFix, "RENAME COLUMN v_renamed TO v") || !strings.Contains(ts.PausedFix, "--replace public.a") {
		t.Errorf("the pause does not name the rename back and the re-snapshot: %s", ts.PausedFix)
	}
	p.requireAlert("CdcdTablePaused", "cdc.a", "v_renamed")
	p.renameMirrorColumn("a", "v_renamed", "v")
	p.waitFor("table resumed", 3*time.Minute, func(st daemon.Status) bool {
		for _, tb := range st.Tables {
			if tb.Table == "cdc.a" {
				return !tb.Paused
			}
		}
		return false
	})
	p.waitCaughtUp()
	p.requireMirror()
	if !p.logContains("checked_again_every=2s") {
		t.Error("the pause does not follow sink.iceberg.retry_interval (2s)")
	}
}

// renameMirrorColumn renames a column of the mirror cdc.<name> as another
// engine would.
func (p *pipeline) renameMirrorColumn(name, from, to string) {
	p.t.Helper()
	cat := p.openCatalog()
	defer closeCatalog(cat)
	tbl, err := cat.LoadTable(p.ctx, table.Identifier{"cdc", name})
	if err != nil {
		p.t.Fatal(err)
	}
	tx := tbl.NewTransaction()
	if err := tx.UpdateSchema(true, false).RenameColumn([]string{from}, to).Commit(); err != nil {
		p.t.Fatal(err)
	}
	if _, err := tx.Commit(p.ctx); err != nil {
		p.t.Fatal(err)
	}
}
