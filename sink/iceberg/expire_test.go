package iceberg

import (
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"

	"github.com/cdcd-dev/cdcd/internal/s3test"
	"github.com/cdcd-dev/cdcd/schema"
)

// TestExpiredFilesRemoved: expiries remove what they leave unreferenced —
// manifest lists, manifests, replaced deletion-vector files — and nothing
// a kept snapshot still uses. Every commit updates rows of earlier commits,
// so each commit replaces vectors and rewrites the delete manifest. After
// the run every file in the table's folder (but metadata.json, which has
// its own rule) is named by a kept snapshot, every file a kept snapshot
// names in a live entry exists, and the scan equals the model. Part of the
// run starts with an empty manifest cache, as after a restart. On local
// storage, and on S3 (where removal goes through the bulk delete).
func TestExpiredFilesRemoved(t *testing.T) {
	t.Run("local", func(t *testing.T) {
		cat := testCatalog(t)
		testExpiredFilesRemoved(t, cat, func(p string) string { return strings.TrimPrefix(p, "file://") },
			func(root string) []string {
				var files []string
				if err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
					if err == nil && !d.IsDir() {
						files = append(files, p)
					}
					return err
				}); err != nil {
					t.Fatal(err)
				}
				return files
			})
	})
	t.Run("s3", func(t *testing.T) {
		srv := s3test.New(t, "lake")
		cat := openTest(t, CatalogConfig{Type: "sql", URI: "sqlite://" + filepath.Join(t.TempDir(), "catalog.db"), Name: "s3",
			Warehouse: "s3://lake/warehouse", S3: s3Config(srv)})
		testExpiredFilesRemoved(t, cat, func(p string) string { return strings.TrimPrefix(p, "s3://lake/") },
			func(root string) []string {
				keys, err := srv.Keys("lake", root+"/")
				if err != nil {
					t.Fatal(err)
				}
				return keys
			})
	})
}

// testExpiredFilesRemoved runs the test on cat; local maps a file's
// location to what list returns, and list lists the files under a table's
// (local) location.
func testExpiredFilesRemoved(t *testing.T, cat catalog.Catalog, local func(string) string, list func(root string) []string) {
	w := upsertWriter(t, cat, 3, 1)
	w.s.cfg.Maintenance = MaintenanceConfig{MaxDataManifests: 4, RetainSnapshots: 4, ExpireEvery: 3}
	w.s.cfg.Maintenance = w.s.cfg.Maintenance.WithDefaults()
	w.s.cfg.Compaction = CompactionConfig{Disabled: true}
	want := model{}
	var next int64
	for i := range 40 {
		if i == 25 {
			// As after a restart: a new compactor, whose expiry reads
			// back the manifests written so far, not recorded.
			w.comp = nil
		}
		var buf []change
		for range 20 {
			buf = append(buf, change{table: kv, env: &schema.Envelope{Op: 'c', After: []any{next, "v", int64(i)}}})
			next++
		}
		for j := range 10 { // updates of rows of every earlier commit
			id := (int64(i)*7919 + int64(j)*104729) % next
			buf = append(buf, change{table: kv, env: &schema.Envelope{Op: 'u', After: []any{id, fmt.Sprint("u", i), int64(j)}, Before: []any{id, nil, nil}}})
		}
		for j := range buf {
			want.apply(buf[j])
			buf[j].env.Source.Position = []byte(fmt.Sprintf("%012d%06d", i, j))
			buf[j] = encoded(buf[j])
		}
		w.buf = buf
		w.next[0] = int64(i + 1)
		if err := w.commit(t.Context()); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	if n := len(w.tbl.Metadata().Snapshots()); n > 4+3 {
		t.Fatalf("%d snapshots kept, want at most 7", n)
	}
	ifs, err := w.tbl.FS(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	named, live := map[string]bool{}, map[string]bool{}
	for _, s := range w.tbl.Metadata().Snapshots() {
		named[local(s.ManifestList)] = true
		mfs, err := s.Manifests(ifs)
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			named[local(mf.FilePath())] = true
			for e, err := range mf.Entries(ifs, false) {
				if err != nil {
					t.Fatal(err)
				}
				named[local(e.DataFile().FilePath())] = true
				if e.Status() != iceberg.EntryStatusDELETED {
					live[local(e.DataFile().FilePath())] = true
				}
			}
		}
	}
	onDisk := map[string]bool{}
	root := local(w.tbl.Location())
	for _, p := range list(root) {
		if !strings.HasSuffix(p, ".metadata.json") && !strings.HasSuffix(p, "version-hint.text") {
			onDisk[p] = true
		}
	}
	for p := range onDisk {
		if !named[p] {
			t.Errorf("%s is left in the table's folder; no kept snapshot names it", strings.TrimPrefix(p, root))
		}
	}
	for p := range live {
		if !onDisk[p] {
			t.Errorf("%s, live in a kept snapshot, was removed", strings.TrimPrefix(p, root))
		}
	}
	if len(onDisk) < len(named)/2 {
		t.Errorf("%d files in the folder for %d named: the walk missed the table's files", len(onDisk), len(named))
	}
	if got := scanTable(t, cat, w.cfg.Ident); !maps.Equal(got, want) {
		t.Errorf("scan: %d rows, want %d (or values differ)", len(got), len(want))
	}
	w.close()
}
