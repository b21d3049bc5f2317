package iceberg

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestFoldByKeyAgreesWithFoldMap: on random buffers of inserts, updates
// and deletes of bigint keys (encoded as the fetcher makes them, each key
// in its partition, fetches interleaved), foldByKey gives the states the
// general fold gives, sorted by key: the same changes of each key in the
// same order, the same last image and liveness, and a map by key when a
// change has unchanged values. A key found in two partitions, or a key
// that is not one bigint, is left to the general fold.
func TestFoldByKeyAgreesWithFoldMap(t *testing.T) {
	u := &upsert{keys: []iceberg.NestedField{{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true}}}
	rng := rand.New(rand.NewPCG(31, 32))
	// Keys that need every byte of the sort, and negative ones (the sign
	// bit flipped sorts them first).
	pool := []int64{0, -1, 1, 255, 256, -256, 1 << 40, -(1 << 40), 1<<63 - 1, -(1 << 63)}
	for range 60 {
		pool = append(pool, int64(rng.Uint64()))
	}
	for range 60 {
		pool = append(pool, rng.Int64N(5000))
	}
	for round := range 300 {
		parts := 1 + rng.IntN(8)
		n := rng.IntN(1200)
		withUnchanged := round%3 == 2
		perPart := make([][]change, parts)
		for i := range n {
			id := pool[rng.IntN(len(pool))]
			p := int32(uint64(id) % uint64(parts))
			ops := "cud"
			if withUnchanged {
				ops = "cu" // an unchanged value after a delete is refused (by both)
			}
			env := &schema.Envelope{Op: ops[rng.IntN(len(ops))]}
			switch env.Op {
			case 'd':
				env.Before = []any{id, nil, nil}
			case 'u':
				env.Before = []any{id, nil, nil}
				env.After = []any{id, fmt.Sprint(i), int64(i)}
				if withUnchanged && rng.IntN(4) == 0 {
					env.After[1] = schema.Unchanged
				}
			default:
				env.After = []any{id, fmt.Sprint(i), int64(i)}
			}
			env.Source.Position = binary.BigEndian.AppendUint64(nil, uint64(i))
			perPart[p] = append(perPart[p], encoded(change{table: kv, env: env, partition: p, offset: int64(len(perPart[p]))}))
		}
		buf := fetchesOf(rng, perPart, n)
		if n > 0 && rng.IntN(5) == 0 {
			buf[rng.IntN(n)].skip = true
		}
		gotStates, got, ok, err := u.foldByKey(buf)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("round %d: a buffer of bigint keys, each in one partition, not taken", round)
		}
		wantStates, want, err := u.foldMap(buf)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(want, func(a, b *keyState) int { return compareKeys(a.key, b.key) })
		if len(got) != len(want) {
			t.Fatalf("round %d: %d keys, fold %d", round, len(got), len(want))
		}
		unchanged := false
		for i := range buf {
			unchanged = unchanged || (!buf[i].skip && buf[i].info.Unchanged != 0)
		}
		for i := range got {
			g, w := got[i], want[i]
			if string(g.key) != string(w.key) || g.live != w.live || g.table != w.table || g.direct != w.direct || g.part != w.part ||
				!reflect.DeepEqual(g.row, w.row) || string(g.from) != string(w.from) || !slices.Equal(g.changes, w.changes) {
				t.Fatalf("round %d key %x: %+v, fold %+v", round, g.key, *g, *w)
			}
			if unchanged && gotStates[string(g.key)] != g {
				t.Fatalf("round %d key %x: not in the map of states", round, g.key)
			}
		}
		if unchanged && len(gotStates) != len(wantStates) {
			t.Fatalf("round %d: %d states by key, fold %d", round, len(gotStates), len(wantStates))
		}
	}
	// Key 7 in partitions 0 and 1: the general fold's (source order).
	mk := func(p int32, off int64, op byte) change {
		env := &schema.Envelope{Op: op, After: []any{int64(7), "x", nil}}
		env.Source.Position = binary.BigEndian.AppendUint64(nil, uint64(off))
		return encoded(change{table: kv, env: env, partition: p, offset: off})
	}
	if _, _, ok, err := u.foldByKey([]change{mk(1, 0, 'c'), mk(0, 1, 'u')}); ok || err != nil {
		t.Fatalf("a key in two partitions taken (%v, %v)", ok, err)
	}
	// A text key: the general fold's.
	text := &schema.Table{Namespace: "public", Name: "t", Columns: []schema.Column{{Name: "id", Kind: schema.String}}, Key: []int{0}}
	ut := &upsert{keys: []iceberg.NestedField{{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.String, Required: true}}}
	c := encoded(change{table: text, env: &schema.Envelope{Op: 'c', After: []any{"a"}}})
	if _, _, ok, err := ut.foldByKey([]change{c}); ok || err != nil {
		t.Fatalf("a text key taken (%v, %v)", ok, err)
	}
}

// TestRadixSortKeys: the radix sort orders keys as a stable sort does.
func TestRadixSortKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for round := range 200 {
		n := rng.IntN(3000)
		a := make([]sortedKey, n)
		for i := range a {
			switch round % 4 {
			case 0:
				a[i].k = rng.Uint64()
			case 1:
				a[i].k = rng.Uint64N(50) << 56 // only the high byte differs
			case 2:
				a[i].k = 1<<63 + rng.Uint64N(100_000) // a sequence's keys
			default:
				a[i].k = uint64(i) // sorted already
			}
			a[i].i = int32(i)
		}
		want := slices.Clone(a)
		slices.SortStableFunc(want, func(x, y sortedKey) int {
			switch {
			case x.k < y.k:
				return -1
			case x.k > y.k:
				return 1
			}
			return 0
		})
		if got := radixSortKeys(a); !slices.Equal(got, want) {
			t.Fatalf("round %d: not a stable sort", round)
		}
	}
}
