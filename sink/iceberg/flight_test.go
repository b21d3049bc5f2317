package iceberg

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/schema"
)

// landedFailingCatalog lands the next fail.Load() commits and reports
// each as failed (an unknown outcome that landed).
type landedFailingCatalog struct {
	catalog.Catalog
	fail *atomic.Int32
}

func (c landedFailingCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	meta, loc, err := c.Catalog.CommitTable(ctx, ident, reqs, updates)
	if err == nil && c.fail.Add(-1) >= 0 {
		return nil, "", errors.New("injected failure after the commit")
	}
	return meta, loc, err
}

// TestCommitsInFlight: commits staged while the one before lands (the
// loop's pipeline), and commits landing in flight that the next waits for
// before it is staged (pipelineLanding; a buffer of inserts only, every
// seventh, staged ahead as by default: re-inserts of keys the flight may
// have deleted, which pebble does not know of yet), leave the table, its
// row lineage and the key index as the same commits made one after the
// other do. Random inserts, updates
// (some with unchanged values), deletes and re-inserts over 200 keys, so
// that most commits look up keys the flight before them wrote or deleted;
// with catalog commits failing under a flight (its next commit's files
// dropped, the flight settled, the table read again and the changes since
// fed again, its first commit then landed on the loop) or reported failed
// though they landed (adopted; the next commit, staged and dropped, made on
// the loop, the flight's vectors, which it may have changed in place, read
// again), and
// with restarts that leave a landed flight unadopted (the next load reads
// its outcome). Commits write several files each (key ranges), so a
// flight's files' row ids run on from one to the next.
func TestCommitsInFlight(t *testing.T) {
	// Commits of several files each (ranges written at once), whose row
	// ids run on from file to file.
	defer func(n int) { writePartRows = n }(writePartRows)
	writePartRows = 8
	for _, tc := range []struct {
		name                 string
		failEvery, stopEvery int
		landed               bool // the failing commits land all the same
	}{{"plain", 0, 0, false}, {"failures", 5, 0, false}, {"landed", 4, 0, true}, {"restarts", 0, 7, false}} {
		t.Run(tc.name, func(t *testing.T) {
			type outcome struct {
				rows             model
				lineage          map[int64]lineage
				launched, failed int
				insertsOnly      int // commits of a buffer of inserts only
				answered         int64
			}
			// pipeline: staged ahead of the flight; landing: in flight,
			// the next staged once it landed (pipelineLanding), and with
			// it a buffer of inserts only staged ahead (pipelineInserts,
			// the daemon's default) of a flight that has no overlay.
			run := func(pipeline, landing bool) outcome {
				base := testCatalog(t)
				fail := &atomic.Int32{}
				var cat catalog.Catalog = failingCatalog{base, fail}
				if tc.landed {
					cat = landedFailingCatalog{base, fail}
				}
				w := upsertWriter(t, cat, 3, 1)
				w.pipeline, w.pipelineLanding, w.pipelineInserts = pipeline, landing, landing
				rng := rand.New(rand.NewPCG(24, uint64(tc.failEvery*10+tc.stopEvery)))
				want := model{}
				var off int64
				var o outcome
				var all []change // the log: a change's offset is its index
				restart := func(round int, serialFirst bool) {
					w.waitFlight() // a stop that does not adopt the flight
					o.answered += w.up.sub.answered
					dir := w.s.cfg.IndexDir
					w.close()
					w = upsertWriter(t, cat, 3, 1)
					w.s.cfg.IndexDir, w.pipeline, w.pipelineLanding, w.pipelineInserts, w.serialFirst = dir, pipeline, landing, landing, serialFirst
					if err := w.load(t.Context()); err != nil {
						t.Fatal(err)
					}
				}
				for round := range 45 {
					if round%7 == 4 {
						// Inserts only, of keys deleted before (some by
						// the flight this commit follows).
						all = append(all, randomInserts(rng, want, 1+rng.IntN(20), &off)...)
					} else {
						all = append(all, randomChanges(rng, want, 1+rng.IntN(80), &off)...)
					}
					w.buf = slices.Clone(all[w.next[0]:off])
					w.next[0] = off
					w.others = 0
					for i := range w.buf {
						if !w.buf[i].insert() {
							w.others++
						}
					}
					if w.others == 0 {
						o.insertsOnly++
					}
					if tc.failEvery > 0 && round%tc.failEvery == 2 {
						fail.Store(1)
					}
					err := w.commit(t.Context())
					var rw *rewindError
					switch {
					case errors.As(err, &rw):
						// The loop starts again from the table's offsets
						// and fetches the changes since again.
						o.failed++
						restart(round, true)
						if w.next[0] >= off {
							t.Fatalf("round %d: the failed commit's changes are not read again (at %d of %d)", round, w.next[0], off)
						}
					case err != nil:
						t.Fatalf("round %d: %v", round, err)
					case w.flight != nil:
						o.launched++
					}
					if tc.stopEvery > 0 && round%tc.stopEvery == tc.stopEvery-1 {
						restart(round, false)
						if w.next[0] != off {
							t.Fatalf("round %d: resumed at %d, want %d", round, w.next[0], off)
						}
					}
				}
				if w.next[0] < off { // the last round's commit failed
					w.buf = slices.Clone(all[w.next[0]:off])
					w.next[0] = off
					if err := w.commit(t.Context()); err != nil {
						t.Fatal(err)
					}
				}
				if err := w.drain(t.Context()); err != nil {
					t.Fatal(err)
				}
				if fail.Load() > 0 {
					t.Fatal("an injected failure was not hit")
				}
				o.rows = scanTable(t, base, w.cfg.Ident)
				compareModel(t, want, o.rows)
				checkInvariants(t, base, w.cfg.Ident)
				spotCheckIndex(t, w)
				o.lineage = scanLineage(t, base, w.cfg.Ident)
				o.answered += w.up.sub.answered
				w.close()
				return o
			}
			serial := run(false, false)
			if serial.failed != 0 {
				t.Fatalf("%d serial commits were rewound", serial.failed)
			}
			if serial.launched != 0 {
				t.Fatalf("%d commits launched in flight with the pipeline off", serial.launched)
			}
			for _, way := range []struct {
				name              string
				pipeline, landing bool
			}{{"ahead", true, false}, {"landing", false, true}} {
				flying := run(way.pipeline, way.landing)
				if way.landing && flying.insertsOnly < 4 {
					t.Fatalf("%s: %d commits of inserts only: the test proves nothing of them", way.name, flying.insertsOnly)
				}
				if flying.launched < 25 {
					t.Fatalf("%s: %d of 45 commits were launched in flight", way.name, flying.launched)
				}
				if tc.failEvery > 0 && !tc.landed && flying.failed == 0 {
					t.Fatalf("%s: no flight failed: the failures test proves nothing", way.name)
				}
				switch {
				case way.pipeline && flying.answered == 0:
					t.Fatalf("%s: no lookup was answered by a flight's keys: the test proves nothing", way.name)
				case !way.pipeline && flying.answered != 0:
					t.Fatalf("%s: %d lookups were answered by a flight's keys: a commit was staged before the flight it follows landed", way.name, flying.answered)
				}
				if tc.failEvery > 0 && !tc.landed {
					// Rewound changes land in other commits than serially:
					// other files, other row ids. Each row's id is its own.
					ids := map[int64]bool{}
					for k, l := range flying.lineage {
						if ids[l.rowID] {
							t.Fatalf("%s: key %d shares row id %d", way.name, k, l.rowID)
						}
						ids[l.rowID] = true
					}
					continue
				}
				if !maps.Equal(serial.lineage, flying.lineage) {
					bad := 0
					for k, l := range serial.lineage {
						if flying.lineage[k] != l && bad < 5 {
							bad++
							t.Errorf("%s: key %d: lineage %+v in flight, %+v serially", way.name, k, flying.lineage[k], l)
						}
					}
					t.Fatal(fmt.Sprintf("%s: row lineage differs (%d and %d rows)", way.name, len(flying.lineage), len(serial.lineage)))
				}
			}
		})
	}
}

// randomInserts returns n inserts (at most) of keys m does not hold, from
// the 200 that randomChanges uses, applied to m.
func randomInserts(rng *rand.Rand, m model, n int, offset *int64) []change {
	var out []change
	for _, id := range rng.Perm(200) {
		if len(out) == n {
			break
		}
		if _, ok := m[int64(id)]; ok {
			continue
		}
		c := change{env: &schema.Envelope{Op: 'c', After: []any{int64(id), fmt.Sprintf("i%d", rng.IntN(1000)), int64(rng.IntN(50))}}}
		out = append(out, nextChange(c, m, offset))
	}
	return out
}
