package iceberg

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestFoldInsertsAgreesWithFold: on random buffers (encoded as the fetcher
// makes them) foldInserts takes exactly the buffers of whole inserts with
// distinct keys, and gives for them the states the general fold gives,
// sorted by key; any other buffer (a key twice, an update, a delete,
// unchanged values) it leaves to the fold.
func TestFoldInsertsAgreesWithFold(t *testing.T) {
	u := &upsert{keys: []iceberg.NestedField{{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true}}}
	rng := rand.New(rand.NewPCG(21, 22))
	taken := 0
	for round := range 400 {
		n := rng.IntN(300)
		ids := rng.Perm(10 * max(n, 1))[:n] // distinct keys
		if round%4 >= 2 {
			// A load's buffer: a few ascending runs (fetches of partitions),
			// which sortByKey merges instead of sorting.
			for rest := ids; len(rest) > 0; {
				run := rest[:1+rng.IntN(len(rest))]
				slices.Sort(run)
				rest = rest[len(run):]
			}
		}
		buf := make([]change, 0, n+1)
		for i, id := range ids {
			env := &schema.Envelope{Op: "rc"[rng.IntN(2)], After: []any{int64(id), fmt.Sprint(i), nil}}
			env.Source.Position = fmt.Appendf(nil, "%012d", i)
			buf = append(buf, encoded(change{table: kv, env: env, offset: int64(i)}))
		}
		inserts := true
		if n > 0 && round%2 == 1 { // spoil it one way or another
			id := int64(ids[rng.IntN(n)])
			env := &schema.Envelope{Op: 'c', After: []any{id, "again", nil}}
			switch rng.IntN(4) {
			case 1:
				env.Op, env.Before = 'u', []any{id, nil, nil}
			case 2:
				env.Op, env.Before, env.After = 'd', []any{id, nil, nil}, nil
			case 3:
				env.After[1] = schema.Unchanged
				id = int64(10*n + 1) // a key of its own: only the unchanged value spoils it
				env.After[0] = id
			}
			env.Source.Position = fmt.Appendf(nil, "%012d", n)
			c := encoded(change{table: kv, env: env, offset: int64(n)})
			at := rng.IntN(len(buf) + 1)
			buf = slices.Insert(buf, at, c)
			inserts = false
		}
		got, ok, err := u.foldInserts(buf)
		if err != nil {
			t.Fatal(err)
		}
		if ok != inserts {
			t.Fatalf("round %d: foldInserts took the buffer %v, want %v", round, ok, inserts)
		}
		if !ok {
			continue
		}
		taken++
		_, want, err := u.fold(buf)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(want, func(a, b *keyState) int { return compareKeys(a.key, b.key) })
		if len(got) != len(want) {
			t.Fatalf("round %d: %d keys, fold %d", round, len(got), len(want))
		}
		for i := range got {
			g, w := got[i], want[i]
			if string(g.key) != string(w.key) || g.live != w.live || g.table != w.table || g.direct != w.direct ||
				g.row != nil || w.row != nil || g.from != nil || !slices.Equal(g.changes, w.changes) {
				t.Fatalf("round %d key %d: %+v, fold %+v", round, i, *g, *w)
			}
		}
	}
	if taken < 150 {
		t.Fatalf("only %d buffers of inserts taken", taken)
	}
}

// TestInsertBuffersCommitted: buffers of whole inserts (a load's rows
// first, then inserts of keys the table holds, as a replacing run's rows
// are) commit through foldInserts, and the table ends as the model says:
// an insert of a key the table holds still replaces its row.
func TestInsertBuffersCommitted(t *testing.T) {
	for _, version := range []int{3, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			cat := testCatalog(t)
			w := upsertWriter(t, cat, version, 1)
			rng := rand.New(rand.NewPCG(uint64(version), 23))
			want := model{}
			var off int64
			for round := range 6 {
				ids := rng.Perm(400)[:100+rng.IntN(200)]
				w.buf = nil
				for _, id := range ids {
					env := &schema.Envelope{Op: "rc"[round%2], After: []any{int64(id), fmt.Sprintf("r%d", round), int64(rng.IntN(50))}}
					env.Source.Position = fmt.Appendf(nil, "%012d", off)
					c := change{table: kv, env: env, offset: off}
					want.apply(c)
					w.buf = append(w.buf, encoded(c))
					off++
				}
				if w.up != nil { // made by the first commit
					if _, ok, err := w.up.foldInserts(w.buf); err != nil || !ok {
						t.Fatalf("round %d: not a buffer of inserts (%v)", round, err)
					}
				}
				w.next[0] = off
				if err := w.commit(t.Context()); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
			}
			if version == 3 {
				checkInvariants(t, cat, w.cfg.Ident)
			}
			w.close()
		})
	}
}

// TestSortByKey: sortByKey orders states by key like a sort, whether it
// merges the buffer's runs (a load's few long ones) or sorts it (many
// short ones), and whether it returns keys or its own slice.
func TestSortByKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for round := range 200 {
		n := rng.IntN(5000)
		ids := rng.Perm(4 * max(n, 1))[:n]
		runs := 1 + rng.IntN(2*maxMergeRuns) // up to the merge's bound, sometimes past it
		for rest := ids; len(rest) > 0; runs-- {
			size := len(rest)
			if runs > 1 {
				size = 1 + rng.IntN(len(rest))
			}
			slices.Sort(rest[:size])
			rest = rest[size:]
		}
		keys := make([]*keyState, n)
		for i, id := range ids {
			keys[i] = &keyState{key: appendKeyInt(nil, int64(id))}
		}
		want := slices.Clone(keys)
		slices.SortFunc(want, func(a, b *keyState) int { return compareKeys(a.key, b.key) })
		got := sortByKey(keys)
		if len(got) != n {
			t.Fatalf("round %d: %d states, want %d", round, len(got), n)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("round %d (%d states): state %d has key %x, want %x", round, n, i, got[i].key, want[i].key)
			}
		}
	}
}

// BenchmarkSortByKey: a load commit's states (35,000, the 8 MiB buffer of
// the benchmark table) in k ascending runs, merged by sortByKey against
// sorted by slices.SortFunc (what foldInserts did before).
func BenchmarkSortByKey(b *testing.B) {
	const n = 35000
	for _, runs := range []int{8, 64, 256} {
		rng := rand.New(rand.NewPCG(25, 26))
		ids := rng.Perm(4 * n)[:n]
		for r := range runs {
			slices.Sort(ids[r*n/runs : (r+1)*n/runs])
		}
		states := make([]keyState, n)
		orig := make([]*keyState, n)
		for i, id := range ids {
			states[i].key = appendKeyInt(nil, int64(id))
			orig[i] = &states[i]
		}
		keys := make([]*keyState, n)
		b.Run(fmt.Sprintf("runs=%d/merge", runs), func(b *testing.B) {
			for b.Loop() {
				copy(keys, orig)
				sortByKey(keys)
			}
		})
		b.Run(fmt.Sprintf("runs=%d/sort", runs), func(b *testing.B) {
			for b.Loop() {
				copy(keys, orig)
				slices.SortFunc(keys, func(a, b *keyState) int { return compareKeys(a.key, b.key) })
			}
		})
	}
}
