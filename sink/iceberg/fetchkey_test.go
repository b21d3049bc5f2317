package iceberg

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// decodedInsert is an insert of row into t as the fetcher's decode makes
// it from the log's record (frame, key, envelope).
func decodedInsert(t testing.TB, w *tableWriter, tb *schema.Table, row []any, p int32, off int64) change {
	const id = 7
	w.tables[id] = tb
	env := &schema.Envelope{Op: 'c', After: row}
	env.Source.Position = fmt.Appendf(nil, "%012d", off)
	v, err := schema.AppendEnvelope(schema.AppendFrame(nil, id), tb, env)
	if err != nil {
		t.Fatal(err)
	}
	k, err := schema.AppendKey(schema.AppendFrame(nil, id), tb, row)
	if err != nil {
		t.Fatal(err)
	}
	c, err := w.decode(&log.Record{Key: k, Value: v, Partition: p, Offset: off})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDecodeKeepsInt64Key: the fetcher's decode keeps a bigint key's
// value (change.keyInt), which the fold then reads instead of the key's
// bytes; the value is the key's, for every size of varint, and a key of
// another kind is not taken for one.
func TestDecodeKeepsInt64Key(t *testing.T) {
	w := &tableWriter{cfg: TableConfig{Topic: "t"}, partitions: 4, tables: map[uint32]*schema.Table{}}
	u := &upsert{keys: []iceberg.NestedField{{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true}}}
	rng := rand.New(rand.NewPCG(3, 4))
	vals := []int64{0, -1, 1, 63, 64, -64, -65, 1 << 62, -(1 << 63), 1<<63 - 1}
	for range 500 {
		vals = append(vals, int64(rng.Uint64()))
	}
	for _, v := range vals {
		c := decodedInsert(t, w, kv, []any{v, "x", nil}, 0, 1)
		if !c.keyIsInt || c.keyInt != v {
			t.Fatalf("key %d: decode kept %v %d", v, c.keyIsInt, c.keyInt)
		}
		got, ok := u.int64KeyValue(&c)
		if !ok || got != v {
			t.Fatalf("key %d: int64KeyValue %d %v", v, got, ok)
		}
		k, ok := u.int64Key(&c)
		if want, _ := encodeKey(nil, []any{v}); !ok || string(k) != string(want) {
			t.Fatalf("key %d: int64Key %x, want %x", v, k, want)
		}
	}
	// A text key whose body is one byte (the empty string: its length 0)
	// reads as a varint, but the table's key is no bigint.
	text := &schema.Table{Namespace: "public", Name: "t", Columns: []schema.Column{{Name: "id", Kind: schema.String}}, Key: []int{0}}
	c := decodedInsert(t, w, text, []any{""}, 0, 1)
	if _, ok := u.int64KeyValue(&c); ok {
		t.Fatalf("text key %x taken for a bigint", c.key)
	}
}

// TestFoldInsertsByIntAgreesWithFoldMap: buffers of inserts decoded as
// the fetcher decodes them (the bigint keys' values kept), in a load's
// order (ascending runs, one a fetch of a partition) or none, fold by
// foldInserts into the states the general fold gives, sorted by key; a
// key twice or an update leaves the buffer to the fold.
func TestFoldInsertsByIntAgreesWithFoldMap(t *testing.T) {
	w := &tableWriter{cfg: TableConfig{Topic: "t"}, partitions: 4, tables: map[uint32]*schema.Table{}}
	u := &upsert{keys: []iceberg.NestedField{{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true}}}
	rng := rand.New(rand.NewPCG(5, 6))
	taken := 0
	for round := range 200 {
		n := rng.IntN(400)
		ids := make([]int64, n)
		for i := range ids {
			// Keys over the whole range, or close together (a sequence's).
			if round%3 == 0 {
				ids[i] = int64(rng.Uint64())
			} else {
				ids[i] = int64(rng.IntN(4*n+1)) - int64(n)
			}
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
		rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		if round%2 == 0 {
			for rest := ids; len(rest) > 0; {
				run := rest[:1+rng.IntN(len(rest))]
				slices.Sort(run)
				rest = rest[len(run):]
			}
		}
		// Every change placed by its key (a load's), or some not.
		placed := round%4 != 3
		buf := make([]change, 0, len(ids)+1)
		for i, id := range ids {
			c := decodedInsert(t, w, kv, []any{id, fmt.Sprint(i), nil}, int32(rng.IntN(4)), int64(i))
			if placed || rng.IntN(len(ids)) != 0 {
				c = decodedInsert(t, w, kv, []any{id, fmt.Sprint(i), nil}, log.PartitionFor(c.key, 4), int64(i))
			}
			buf = append(buf, c)
		}
		spoiled := len(ids) > 0 && round%5 == 4
		if spoiled {
			buf = append(buf, decodedInsert(t, w, kv, []any{ids[rng.IntN(len(ids))], "again", nil}, 0, int64(len(ids))))
		}
		got, ok, err := u.foldInserts(buf)
		if err != nil {
			t.Fatal(err)
		}
		if ok == spoiled {
			t.Fatalf("round %d: foldInserts took the buffer %v with a key twice %v", round, ok, spoiled)
		}
		if !ok {
			continue
		}
		taken++
		// The keys' partitions as the fold found them, or none, and the
		// index's bounds, as partitionsOf finds them from the buffer.
		u.idx = &keyIndex{}
		parts := slices.Clone(u.partitionsOf(buf, got, 4))
		general := &upsert{idx: &keyIndex{}}
		if want := general.partitionsOf(buf, got, 4); !slices.Equal(parts, want) || (parts == nil) != (want == nil) ||
			u.idx.bounds.n != general.idx.bounds.n || u.idx.bounds.table != general.idx.bounds.table {
			t.Fatalf("round %d: partitions %v (bounds %d %v), from the buffer %v (bounds %d %v)", round, parts,
				u.idx.bounds.n, u.idx.bounds.table, want, general.idx.bounds.n, general.idx.bounds.table)
		}
		if placed && parts == nil {
			t.Fatalf("round %d: a load's buffer has no partitions", round)
		}
		_, want, err := u.foldMap(buf)
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
				g.part != w.part || !slices.Equal(g.changes, w.changes) {
				t.Fatalf("round %d key %d: %+v, fold %+v", round, i, *g, *w)
			}
		}
	}
	if taken < 100 {
		t.Fatalf("only %d buffers taken", taken)
	}
}
