package iceberg

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
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

// TestCommitOnTheHeldTable: the sink's commits to the SQL catalog (SQLite,
// and PostgreSQL under CI) go through commitOn, and what the catalog then
// holds is what the writer holds: the same metadata location, and
// metadata that parses back to the writer's. A commit on a table that
// another commit moved on fails as a conflict and moves nothing; a
// requirement the held table fails is refused before anything is
// written.
func TestCommitOnTheHeldTable(t *testing.T) {
	cats := map[string]catalog.Catalog{"sqlite": testCatalog(t)}
	if dsn := pgtest.NewDB(t); dsn != "" {
		cats["postgres"] = openTest(t, CatalogConfig{Type: "sql", URI: dsn, Name: "pg", Warehouse: "file://" + t.TempDir()})
	}
	for name, cat := range cats {
		t.Run(name, func(t *testing.T) {
			sc := cat.(*sqlCatalog)
			w := upsertWriter(t, cat, 3, 1)
			defer w.close()
			rng := rand.New(rand.NewPCG(18, 3))
			want := model{}
			var off int64
			prev := -1
			for round := range 6 {
				w.buf = randomChanges(rng, want, 1+rng.IntN(60), &off)
				w.next[0] = off
				if err := w.commit(t.Context()); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				got, err := cat.LoadTable(t.Context(), w.cfg.Ident)
				if err != nil {
					t.Fatal(err)
				}
				if got.MetadataLocation() != w.tbl.MetadataLocation() {
					t.Fatalf("round %d: the catalog is at %s, the writer at %s", round, got.MetadataLocation(), w.tbl.MetadataLocation())
				}
				if !got.Metadata().Equals(w.tbl.Metadata()) {
					t.Fatalf("round %d: the catalog's metadata differs from the writer's", round)
				}
				if v := metadataVersion(got.MetadataLocation()); round > 0 && v != prev+1 || v < 0 {
					t.Fatalf("round %d: metadata version %d after %d", round, v, prev)
				}
				prev = metadataVersion(got.MetadataLocation())
			}
			compareModel(t, want, scanTable(t, cat, w.cfg.Ident))

			// Used: a commit through commitOn on the held table lands.
			base := w.tbl
			fs, err := base.FS(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			wfs := fs.(icebergio.WriteFileIO)
			set := []table.Update{table.NewSetPropertiesUpdate(iceberg.Properties{"cdcd.test": "1"})}
			meta, loc, ok, err := sc.commitOn(t.Context(), base, wfs, nil, nil, set)
			if err != nil || !ok {
				t.Fatalf("commitOn: %v %v", ok, err)
			}
			if meta.Properties()["cdcd.test"] != "1" {
				t.Fatal("the update was not applied")
			}
			// The same base again: the row has moved on, a conflict.
			_, _, ok, err = sc.commitOn(t.Context(), base, wfs, nil, nil, set)
			if !ok || !errors.Is(err, table.ErrCommitFailed) || classify(err) != ErrConflict {
				t.Fatalf("a commit on a stale table: %v %v, want a conflict", ok, err)
			}
			got, err := cat.LoadTable(t.Context(), w.cfg.Ident)
			if err != nil {
				t.Fatal(err)
			}
			if got.MetadataLocation() != loc {
				t.Fatalf("the stale commit moved the table to %s", got.MetadataLocation())
			}
			// A requirement the held table fails: refused, nothing moves.
			wrong := int64(12345)
			_, _, ok, err = sc.commitOn(t.Context(), got, wfs, nil, []table.Requirement{table.AssertRefSnapshotID(table.MainBranch, &wrong)}, set)
			if !ok || err == nil || classify(err) != ErrConflict {
				t.Fatalf("a failed requirement: %v %v, want a conflict", ok, err)
			}
			again, err := cat.LoadTable(t.Context(), w.cfg.Ident)
			if err != nil {
				t.Fatal(err)
			}
			if again.MetadataLocation() != loc {
				t.Fatal("a failed requirement moved the table")
			}
		})
	}
}

func TestMetadataVersion(t *testing.T) {
	for loc, want := range map[string]int{
		"file:///w/t/metadata/00012-0b8e2f5c-3a4d-4b6e-9c1f-2d3e4f5a6b7c.metadata.json": 12,
		"s3://b/t/metadata/00000-0b8e2f5c-3a4d-4b6e-9c1f-2d3e4f5a6b7c.metadata.json":    0,
		"file:///w/t/metadata/v3.metadata.json":                                         3,
		"file:///w/t/metadata/":                                                         -1,
		"file:///w/t/metadata/x-1.metadata.json":                                        -1,
		"file:///w/t/metadata/+1-abc.metadata.json":                                     -1,
		"file:///w/t/metadata/00001-abc.gz.metadata.json.bak":                           -1,
	} {
		if got := metadataVersion(loc); got != want {
			t.Errorf("%s: %d, want %d", loc, got, want)
		}
	}
}
