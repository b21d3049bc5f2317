package iceberg

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
)

func TestWriteParts(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	for _, c := range []struct {
		rows        int
		partitioned bool
		want        int
	}{
		{0, false, 1}, {writePartRows - 1, false, 1}, {2*writePartRows - 1, false, 1},
		{2 * writePartRows, false, 2}, {100 * writePartRows, false, 2}, {100 * writePartRows, true, 1},
	} {
		if got := writeParts(c.rows, c.partitioned); got != c.want {
			t.Errorf("writeParts(%d, %v) = %d, want %d", c.rows, c.partitioned, got, c.want)
		}
	}
	runtime.GOMAXPROCS(8)
	if got := writeParts(100*writePartRows, false); got != maxWriteParts {
		t.Errorf("writeParts on 8 processors = %d, want %d", got, maxWriteParts)
	}
}

// TestWriteRowsInKeyRanges commits buffers large enough to be written in
// key ranges at once (writeRows): each range a file of its own, the index
// pointing every key at its file and position, an updated row keeping its
// _row_id when its file was written by a range (the ids remembered per
// file), and the table equal to the model after inserts, updates, deletes
// and a restart.
func TestWriteRowsInKeyRanges(t *testing.T) {
	defer func(n int) { writePartRows = n }(writePartRows)
	writePartRows = 40
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, version := range []int{3, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			cat := testCatalog(t)
			w := upsertWriter(t, cat, version, 1)
			rng := rand.New(rand.NewPCG(uint64(version), 41))
			want := model{}
			var off int64
			commit := func(what string, ops ...byte) {
				t.Helper()
				w.buf = nil
				ids := rng.Perm(400)
				for i, op := range ops {
					id := int64(ids[i])
					env := &schema.Envelope{Op: op, After: []any{id, fmt.Sprintf("%s-%d", what, id), int64(rng.IntN(50))}}
					if op == 'd' {
						env.After, env.Before = nil, []any{id, nil, nil}
					}
					env.Source.Position = fmt.Appendf(nil, "%012d", off)
					c := change{table: kv, env: env, offset: off}
					want.apply(c)
					w.buf = append(w.buf, encoded(c))
					off++
				}
				w.next[0] = off
				if err := w.commit(t.Context()); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
				live := 0
				for _, op := range ops {
					if op != 'd' {
						live++
					}
				}
				// Every range is a file of its own.
				added := w.tbl.CurrentSnapshot().Summary.Properties["added-data-files"]
				if live >= 4*writePartRows && added != "4" {
					t.Errorf("%s: %d live rows written in %s new files, want 4 ranges", what, live, added)
				}
			}
			repeat := func(op byte, n int) []byte {
				out := make([]byte, n)
				for i := range out {
					out[i] = op
				}
				return out
			}
			commit("load", repeat('r', 400)...) // 4 ranges of 100
			var before map[int64]lineage
			if version == 3 {
				before = scanLineage(t, cat, w.cfg.Ident)
			}
			commit("update", repeat('u', 200)...) // rows of the loaded files, ids from their first_row_id
			commit("again", repeat('u', 300)...)  // many of them in files the ranges wrote, with explicit ids
			if version == 3 {
				after := scanLineage(t, cat, w.cfg.Ident)
				for k, l := range before {
					if after[k].rowID != l.rowID {
						t.Errorf("key %d: row id %d after two updates, had %d", k, after[k].rowID, l.rowID)
					}
				}
			}
			mixed := append(append(repeat('u', 150), repeat('d', 100)...), repeat('c', 50)...)
			rng.Shuffle(len(mixed), func(i, j int) { mixed[i], mixed[j] = mixed[j], mixed[i] })
			commit("mixed", mixed...)
			dir, next := w.s.cfg.IndexDir, w.next[0]
			w.close()
			w = upsertWriter(t, cat, version, 1)
			w.s.cfg.IndexDir = dir
			if err := w.load(t.Context()); err != nil {
				t.Fatal(err)
			}
			w.next[0] = next
			commit("restarted", repeat('u', 250)...)
			w.close()
			if version == 3 {
				checkInvariants(t, cat, w.cfg.Ident)
			}
			_, chk := verifyIndexOf(t, cat, w.cfg.Ident, dir)
			if len(chk.Problems) > 0 || chk.LiveRows != int64(len(want)) || chk.IndexKeys != chk.LiveRows {
				t.Fatalf("the index: %+v, want %d rows and no problems", chk, len(want))
			}
		})
	}
}
