package iceberg

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	icebergio "github.com/apache/iceberg-go/io"
)

// TestLocalWarehouseSyncsWhatACommitRefersTo: every file the table's
// current metadata reaches — the metadata file, the snapshot's manifest
// list, its manifests, their data files and deletion vectors (or position
// delete files) — was synced by the local warehouse's IO, for both format
// versions, including the files of the table's creation. With LocalFS's
// unsynced writes (iceberg-go's own local IO) the set is empty and the
// test fails on the first file.
func TestLocalWarehouseSyncsWhatACommitRefersTo(t *testing.T) {
	var mu sync.Mutex
	synced := map[string]bool{}
	onLocalSynced = func(p string) {
		mu.Lock()
		synced[filepath.Clean(p)] = true
		mu.Unlock()
	}
	t.Cleanup(func() { onLocalSynced = nil })
	for _, version := range []int{3, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			cat := testCatalog(t)
			w := upsertWriter(t, cat, version, 1)
			defer w.close()
			rng := rand.New(rand.NewPCG(uint64(version), 11))
			want := model{}
			var off int64
			for round := 0; round < 6; round++ {
				w.buf = randomChanges(rng, want, 20+rng.IntN(40), &off)
				w.next[0] = off
				if err := w.commit(t.Context()); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			}
			tbl, err := cat.LoadTable(t.Context(), w.cfg.Ident)
			if err != nil {
				t.Fatal(err)
			}
			fs, err := tbl.FS(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := fs.(durableLocal); !ok {
				t.Fatalf("the table's IO is %T, want durableLocal", fs)
			}
			mu.Lock()
			defer mu.Unlock()
			check := func(what, loc string) {
				t.Helper()
				p := filepath.Clean(localOSPath(loc))
				if _, err := os.Stat(p); err != nil {
					t.Fatalf("%s %s: %v", what, loc, err)
				}
				if !synced[p] {
					t.Errorf("%s %s was never synced", what, loc)
				}
			}
			check("metadata file", tbl.MetadataLocation())
			snap := tbl.CurrentSnapshot()
			if snap == nil {
				t.Fatal("no snapshot")
			}
			check("manifest list", snap.ManifestList)
			mfs, err := snap.Manifests(fs)
			if err != nil {
				t.Fatal(err)
			}
			deletes := 0
			for _, mf := range mfs {
				check("manifest", mf.FilePath())
				for e, err := range mf.Entries(fs, true) {
					if err != nil {
						t.Fatal(err)
					}
					df := e.DataFile()
					check(fmt.Sprintf("file (content %d)", df.ContentType()), df.FilePath())
					if df.ContentType() != 0 {
						deletes++
					}
				}
			}
			if deletes == 0 {
				t.Fatal("no delete file in the table: the test did not reach the deletes' writer")
			}
		})
	}
}

// TestLocalWarehouseWriteFileAndRename: WriteFile and Rename of the local
// IO sync what they write or move, through file:// URLs and plain paths.
func TestLocalWarehouseWriteFileAndRename(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var got []string
	onLocalSynced = func(p string) {
		if strings.HasPrefix(p, dir) { // not another test's leftover goroutine's
			mu.Lock()
			got = append(got, p)
			mu.Unlock()
		}
	}
	t.Cleanup(func() { onLocalSynced = nil })
	fs, err := icebergio.LoadFS(t.Context(), nil, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	wfs, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		t.Fatalf("%T cannot write", fs)
	}
	a := filepath.Join(dir, "new", "sub", "a.json")
	if err := wfs.WriteFile("file://"+a, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(got) != 1 || got[0] != a {
		t.Fatalf("synced %q, want [%s]", got, a)
	}
	mu.Unlock()
	if b, err := os.ReadFile(a); err != nil || string(b) != "{}" {
		t.Fatalf("read back %q, %v", b, err)
	}
	for _, d := range []string{filepath.Join(dir, "new", "sub"), filepath.Join(dir, "new"), dir} {
		if _, ok := seenDirs.Load(d); !ok {
			t.Errorf("directory %s (new, or an ancestor of one) was not synced", d)
		}
	}
	b := filepath.Join(dir, "b.json")
	if err := fs.(interface{ Rename(string, string) error }).Rename(a, b); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b); err != nil {
		t.Fatal(err)
	}
}
