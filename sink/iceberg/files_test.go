package iceberg

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/table"
)

// unreferencedFiles lists the files under the table's location that no
// snapshot of it names (metadata.json files aside).
func unreferencedFiles(t *testing.T, tbl *table.Table) []string {
	t.Helper()
	ifs, err := tbl.FS(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, s := range tbl.Metadata().Snapshots() {
		named[strings.TrimPrefix(s.ManifestList, "file://")] = true
		mfs, err := s.Manifests(ifs)
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			named[strings.TrimPrefix(mf.FilePath(), "file://")] = true
			for e, err := range mf.Entries(ifs, false) {
				if err != nil {
					t.Fatal(err)
				}
				named[strings.TrimPrefix(e.DataFile().FilePath(), "file://")] = true
			}
		}
	}
	var out []string
	root := strings.TrimPrefix(tbl.Location(), "file://")
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !named[p] && !strings.HasSuffix(p, ".metadata.json") {
			out = append(out, strings.TrimPrefix(p, root))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFailedAttemptFilesRemoved (issue 24 item 5): the files a commit
// attempt wrote (data, Puffin, manifests, manifest list) are removed when
// it did not land — at once when the catalog refused it, once a later
// commit lands when the catalog may still have applied it — so retries do
// not pile up files.
func TestFailedAttemptFilesRemoved(t *testing.T) {
	refused := errors.New("requirement failed: branch \"main\" has changed: expected id 1, found 2")
	for _, c := range []struct {
		name string
		err  error
	}{{"refused", refused}, {"unknown", errors.New("connection reset while committing")}} {
		t.Run(c.name, func(t *testing.T) {
			sc := &scriptedCatalog{Catalog: testCatalog(t)}
			w := upsertWriter(t, sc, 3, 1)
			rng := rand.New(rand.NewPCG(11, 11))
			want := model{}
			var off int64
			for range 3 {
				w.buf = randomChanges(rng, want, 50, &off)
				w.next[0] = off
				if err := w.commit(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			failed := 0
			sc.calls.Store(0)
			sc.hook = func(n int32, commit func() (table.Metadata, string, error)) (table.Metadata, string, error) {
				if n <= 2 {
					failed++
					return nil, "", c.err
				}
				return commit()
			}
			w.buf = randomChanges(rng, want, 50, &off)
			w.next[0] = off
			if err := w.commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			if failed != 2 {
				t.Fatalf("%d attempts failed, want 2", failed)
			}
			if left := unreferencedFiles(t, w.tbl); len(left) > 0 {
				t.Errorf("failed attempts left %d files: %v", len(left), left)
			}
			compareModel(t, want, scanTable(t, sc, w.cfg.Ident))
			if len(w.up.dvs) == 0 {
				t.Fatal("no deletion vectors: the attempts wrote no Puffin file, the test proves less")
			}
		})
	}
}
