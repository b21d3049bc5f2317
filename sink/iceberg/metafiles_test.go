package iceberg

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestOldMetadataRemoved: the tables cdcd creates drop metadata.json files
// once they leave the metadata log, also for the sink's own commits (which
// go through the catalog, not iceberg-go's transaction), so the files do
// not pile up one a commit.
func TestOldMetadataRemoved(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	// No maintenance commits (iceberg-go's transactions remove dropped
	// metadata files themselves) and no orphan sweep: they would hide
	// whether the sink's own commits do.
	w.s.cfg.Maintenance = MaintenanceConfig{MaxDataManifests: 1 << 30, RetainSnapshots: 1 << 30, ExpireEvery: 1 << 30}
	w.s.cfg.Compaction = CompactionConfig{Disabled: true}
	want := model{}
	commit := func(i int64) {
		t.Helper()
		c := change{table: kv, env: &schema.Envelope{Op: 'c', After: []any{i, "v", i}}}
		want.apply(c)
		c.env.Source.Position = []byte(fmt.Sprintf("%012d", i))
		w.buf = []change{encoded(c)}
		w.next[0] = i + 1
		if err := w.commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	commit(0)
	if got := w.tbl.Properties()[table.MetadataDeleteAfterCommitEnabledKey]; got != "true" {
		t.Fatalf("%s = %q on a created table", table.MetadataDeleteAfterCommitEnabledKey, got)
	}
	const keep = 5
	tx := w.tbl.NewTransaction()
	if err := tx.SetProperties(iceberg.Properties{table.MetadataPreviousVersionsMaxKey: fmt.Sprint(keep)}); err != nil {
		t.Fatal(err)
	}
	tbl, err := tx.Commit(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	w.tbl = tbl
	for i := int64(1); i <= 30; i++ {
		commit(i)
	}
	dir := filepath.Join(strings.TrimPrefix(w.tbl.Location(), "file://"), "metadata")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var jsons []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".metadata.json") {
			jsons = append(jsons, e.Name())
		}
	}
	// The log's files and the current one; a few more only if a removal
	// failed, which it must not here.
	if len(jsons) > keep+1 {
		t.Errorf("%d metadata.json files after 32 commits, want at most %d", len(jsons), keep+1)
	}
	logged := map[string]bool{filepath.Base(w.tbl.MetadataLocation()): true}
	for e := range w.tbl.Metadata().PreviousFiles() {
		logged[filepath.Base(e.MetadataFile)] = true
	}
	for _, f := range jsons {
		if !logged[f] {
			t.Errorf("%s is neither current nor in the metadata log", f)
		}
	}
	if got := scanTable(t, cat, w.cfg.Ident); len(got) != len(want) {
		t.Errorf("scan: %d rows, want %d", len(got), len(want))
	}
	w.close()
}
