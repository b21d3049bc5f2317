package iceberg

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
)

// TestCatalogFileDeleted (issue 24 item 6): the SQLite catalog file deleted
// or replaced under a running sink stops the next commit, as a pause
// naming the file and the fix, instead of committing into a file no reader
// sees.
func TestCatalogFileDeleted(t *testing.T) {
	for _, how := range []string{"deleted", "replaced"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "catalog.db")
			cat, err := OpenCatalog(t.Context(), CatalogConfig{Type: "sql", URI: "sqlite://" + path, Name: "test",
				Warehouse: "file://" + filepath.Join(dir, "warehouse")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cat.(interface{ Close() error }).Close() })
			w := upsertWriter(t, cat, 3, 1)
			w.buf = []change{kvInsert(1, "a", 0)}
			w.next[0] = 1
			if err := w.commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			switch how {
			case "deleted":
				err = os.Remove(path)
			case "replaced":
				if err = os.WriteFile(path+".new", nil, 0o644); err == nil {
					err = os.Rename(path+".new", path)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			w.buf = []change{kvInsert(2, "b", 1)}
			w.next[0] = 2
			err = w.commit(t.Context())
			if classify(err) != ErrPaused || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), how) {
				t.Fatalf("commit after the catalog file was %s: %v", how, err)
			}
			if pe := asPause("ns.tbl", err); !strings.Contains(pe.Fix, "put the catalog file back") {
				t.Errorf("fix %q", pe.Fix)
			}
		})
	}
}

// TestMissingDataFilePausesUntilReset (issue 24 item 6): a data file
// deleted from the warehouse stops the compaction that cannot read it,
// and the table pauses naming the file and the fix — at every retry while
// the file is still missing — until a re-snapshot's reset markers, whose
// truncate drops the file, resume it.
func TestMissingDataFilePausesUntilReset(t *testing.T) {
	cat := testCatalog(t)
	reg := memRegistry(t)
	f := newFeed(t, t.TempDir(), reg, 1)
	s := New(Config{Pipeline: "p", Group: "g", Mode: ModeUpsert, IndexDir: t.TempDir(),
		Tables:         []TableConfig{{Topic: "t", Ident: table.Identifier{"ns", "tbl"}}},
		CommitInterval: 50 * time.Millisecond, RetryInterval: 200 * time.Millisecond,
		Compaction: CompactionConfig{Interval: time.Hour, MinGroup: 2}}, cat, f.lg, reg, discardLogger())
	r := &runningSink{s: s}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	r.stop = func() { once.Do(func() { cancel(); <-done }) }
	defer r.stop()
	for i := range int64(4) {
		f.upsert(10*i+1, 10*i+2)
		waitFor(t, "committed", func() bool { return r.committedTo(f.end()) })
	}
	tbl, err := cat.LoadTable(t.Context(), table.Identifier{"ns", "tbl"})
	if err != nil {
		t.Fatal(err)
	}
	victim := ""
	err = filepath.WalkDir(strings.TrimPrefix(tbl.Location(), "file://")+"/data", func(p string, d os.DirEntry, err error) error {
		if err == nil && victim == "" && strings.HasSuffix(p, ".parquet") {
			victim = p
		}
		return err
	})
	if err != nil || victim == "" {
		t.Fatalf("no data file to delete: %v", err)
	}
	if err := os.Remove(victim); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact("ns.tbl"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "paused", func() bool { return r.paused() != "" })
	if why := r.paused(); !strings.Contains(why, victim) || !strings.Contains(why, "cdcd snapshot -c FILE --replace ns.tbl") {
		t.Errorf("pause reason %q does not name the file and the re-snapshot", why)
	}
	f.upsert(99)
	time.Sleep(time.Second) // retries: the file is still missing
	if r.paused() == "" {
		t.Fatal("resumed while the file is still missing")
	}
	f.truncate("run-1")
	f.upsert(7, 8)
	waitFor(t, "resumed and caught up", func() bool { return r.paused() == "" && r.committedTo(f.end()) })
	r.stop()
	wantKeys(t, tableKeys(t, cat), 7, 8)
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
