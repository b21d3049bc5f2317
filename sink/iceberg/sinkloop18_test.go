package iceberg

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestFoldsMarkDeletedKeys: every fold sets a key's deleted flag exactly
// when one of its changes is a delete (oldRowIDs reads the flag, not the
// changes): the sorted fold and the map fold on random buffers of bigint
// keys, with keys changed several times and deleted in the middle, and
// the inserts' fold (never deleted).
func TestFoldsMarkDeletedKeys(t *testing.T) {
	u := &upsert{keys: []iceberg.NestedField{{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true}}}
	rng := rand.New(rand.NewPCG(18, 18))
	check := func(round int, fold string, keys []*keyState) (deletedLive int) {
		t.Helper()
		for _, st := range keys {
			want := false
			for _, c := range st.changes {
				want = want || c.op() == 'd'
			}
			if st.deleted != want {
				t.Fatalf("round %d, %s: key %x deleted %v, its changes say %v", round, fold, st.key, st.deleted, want)
			}
			if st.deleted && st.live {
				deletedLive++
			}
		}
		return deletedLive
	}
	deletedLive := 0
	for round := range 200 {
		parts := 1 + rng.IntN(4)
		n := 1 + rng.IntN(400)
		keyRange := 1 + rng.IntN(300)
		perPart := make([][]change, parts)
		for i := range n {
			id := int64(rng.IntN(keyRange))
			p := int32(id % int64(parts))
			env := &schema.Envelope{Op: "cud"[rng.IntN(3)]}
			if env.Op != 'c' {
				env.Before = []any{id, nil, nil}
			}
			if env.Op != 'd' {
				env.After = []any{id, fmt.Sprint(i), int64(i)}
			}
			env.Source.Position = []byte(fmt.Sprintf("%012d", i))
			perPart[p] = append(perPart[p], encoded(change{table: kv, env: env, partition: p, offset: int64(len(perPart[p]))}))
		}
		buf := fetchesOf(rng, perPart, n)
		_, keys, ok, err := u.foldByKey(buf)
		if err != nil || !ok {
			t.Fatalf("round %d: foldByKey %v %v", round, ok, err)
		}
		deletedLive += check(round, "foldByKey", keys)
		_, keys, err = u.foldMap(buf)
		if err != nil {
			t.Fatal(err)
		}
		deletedLive += check(round, "foldMap", keys)
	}
	if deletedLive == 0 {
		t.Fatal("no key was deleted and inserted again in one buffer")
	}
	// The inserts' fold: whole inserts only, none deleted.
	var buf []change
	for i := range 500 {
		id := int64(i * 3)
		env := &schema.Envelope{Op: 'c', After: []any{id, "x", int64(i)}}
		env.Source.Position = []byte(fmt.Sprintf("%012d", i))
		buf = append(buf, encoded(change{table: kv, env: env, offset: int64(i)}))
	}
	keys, inserts, err := u.foldInserts(buf)
	if err != nil || !inserts {
		t.Fatalf("foldInserts: %v %v", inserts, err)
	}
	check(0, "foldInserts", keys)
}

// TestDeletedKeysLeaveTheIndex: after each of random commits (inserts,
// updates, deletes, keys deleted and inserted again in one buffer), the
// key index holds exactly the model's live keys. stage deletes the keys
// that end deleted in the pass that collects the lookups, before
// writeRows sets the live ones.
func TestDeletedKeysLeaveTheIndex(t *testing.T) {
	for _, version := range []int{3, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			cat := testCatalog(t)
			w := upsertWriter(t, cat, version, 1)
			defer w.close()
			rng := rand.New(rand.NewPCG(uint64(version), 18))
			want := model{}
			var off int64
			for round := range 20 {
				w.buf = randomChanges(rng, want, 1+rng.IntN(120), &off)
				w.next[0] = off
				if err := w.commit(t.Context()); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				for id := range int64(200) { // randomChanges' keys
					_, found, err := w.up.idx.get(appendKeyInt(nil, id))
					if err != nil {
						t.Fatal(err)
					}
					if _, live := want[id]; found != live {
						t.Fatalf("round %d: key %d in the index %v, live %v", round, id, found, live)
					}
				}
			}
			compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
		})
	}
}
