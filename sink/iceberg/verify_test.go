package iceberg

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestVerifyIndex: a sink's index passes VerifyIndex after commits and a
// compaction, in both format versions; an index made wrong in each way the
// check looks for fails it, each way named.
func TestVerifyIndex(t *testing.T) {
	for _, version := range []int{3, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			cat := testCatalog(t)
			w := upsertWriter(t, cat, version, 1)
			w.s.cfg.Compaction = CompactionConfig{MinGroup: 3}
			w.s.cfg.Compaction = w.s.cfg.Compaction.WithDefaults()
			rng := rand.New(rand.NewPCG(uint64(version), 5))
			want := model{}
			var off int64
			for i := range 12 {
				w.buf = randomChanges(rng, want, 1+rng.IntN(60), &off)
				w.next[0] = off
				if err := w.commit(t.Context()); err != nil {
					t.Fatal(err)
				}
				if i == 8 {
					compactAll(t, w)
				}
			}
			dir := w.s.cfg.IndexDir
			w.close()
			tbl, chk := verifyIndexOf(t, cat, w.cfg.Ident, dir)
			if len(chk.Problems) > 0 || chk.LiveRows != int64(len(want)) || chk.IndexKeys != chk.LiveRows || chk.IndexSnapshot != chk.TableSnapshot {
				t.Fatalf("a sound index: %+v, want %d rows and no problems", chk, len(want))
			}

			// Break it: one key moved, one dropped, two stale keys added,
			// and the tag set back.
			x, err := openIndex(filepath.Join(dir, identString(w.cfg.Ident)), indexOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var keys [][]byte
			var locs []location
			it, err := x.db.NewIter(nil)
			if err != nil {
				t.Fatal(err)
			}
			for it.First(); it.Valid() && len(keys) < 2; it.Next() {
				if k := it.Key(); k[0] == idxPrefixKey {
					loc, _, err := x.get(k[1:])
					if err != nil {
						t.Fatal(err)
					}
					keys, locs = append(keys, slices.Clone(k[1:])), append(locs, loc)
				}
			}
			it.Close()
			b := x.newBatch()
			b.set(keys[0], location{file: locs[0].file, pos: locs[0].pos + 100000})
			b.del(keys[1])
			b.set([]byte("no such key"), locs[0])
			b.set([]byte("nor this one"), locs[1])
			if err := b.apply(x.snapshot - 1); err != nil {
				t.Fatal(err)
			}
			x.close()
			chk, err = VerifyIndex(t.Context(), tbl, dir)
			if err != nil {
				t.Fatal(err)
			}
			all := strings.Join(chk.Problems, "\n")
			for _, want := range []string{"tagged with snapshot", "the index says", "is not in the index", fmt.Sprintf("holds %d keys for %d live rows", chk.LiveRows+1, chk.LiveRows)} {
				if !strings.Contains(all, want) {
					t.Errorf("problems of a broken index do not say %q:\n%s", want, all)
				}
			}
		})
	}
}

// compactAll plans a forced compaction of w's table, rewrites and commits
// it, with no sink commit in between.
func compactAll(t *testing.T, w *tableWriter) {
	t.Helper()
	if !compactOnce(t, w, nil) {
		t.Fatal("nothing to compact")
	}
}

// compactOnce runs one forced compaction of w's table through its
// compactor: the plan and the rewrite, then between (sink commits while
// the rewrite ran), then its commit. It reports whether there was anything
// to compact.
func compactOnce(t testing.TB, w *tableWriter, between func()) bool {
	t.Helper()
	ctx := context.Background()
	c := w.compactor()
	c.Force()
	c.Poll(ctx, false)
	done := c.Done()
	if done == nil {
		return false
	}
	<-done
	if between != nil {
		between()
	}
	if err := w.finishCompaction(ctx); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.LastErr != "" {
		t.Fatalf("compaction: %s", st.LastErr)
	}
	return true
}

// TestRebuildIndexInBatches: an index behind the table is rebuilt in
// batches and comes out right; one left half-rebuilt (a crash during the
// rebuild) is tagged so the next start rebuilds it again.
func TestRebuildIndexInBatches(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	rng := rand.New(rand.NewPCG(3, 3))
	want := model{}
	var off int64
	for range 6 {
		w.buf = randomChanges(rng, want, 40, &off)
		w.next[0] = off
		if err := w.commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	dir := w.s.cfg.IndexDir
	path := filepath.Join(dir, identString(w.cfg.Ident))
	w.close()
	reopen := func() *tableWriter {
		w2 := upsertWriter(t, cat, 3, 1)
		w2.s.cfg.IndexDir = dir
		w2.s.tune.rebuildBatch = 7
		if err := w2.load(t.Context()); err != nil {
			t.Fatal(err)
		}
		w2.close()
		chk, err := VerifyIndex(t.Context(), w2.tbl, dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(chk.Problems) > 0 || chk.IndexKeys != int64(len(want)) {
			t.Fatalf("rebuilt index: %d keys for %d rows: %v", chk.IndexKeys, len(want), chk.Problems)
		}
		return w2
	}
	// Lost: rebuilt from nothing.
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	reopen()
	// Half rebuilt: a data file unreadable in the middle of the rebuild
	// (as a crash would stop it), then readable again at the next start.
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	var victim string
	for p := range w.up.data {
		victim = strings.TrimPrefix(p, "file://")
	}
	if err := os.Rename(victim, victim+".away"); err != nil {
		t.Fatal(err)
	}
	w2 := upsertWriter(t, cat, 3, 1)
	w2.s.cfg.IndexDir = dir
	w2.s.tune.rebuildBatch = 7
	if err := w2.load(t.Context()); err == nil {
		t.Fatal("the rebuild read a missing data file")
	}
	w2.close()
	if err := os.Rename(victim+".away", victim); err != nil {
		t.Fatal(err)
	}
	reopen()
}
