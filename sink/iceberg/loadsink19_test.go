package iceberg

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// TestFoldInsertsStatesWhole: a load's fold writes its states into the
// slab the last commit's fold left, which staging had filled in (rows,
// index locations, row ids, flags). Every state it hands over equals the
// state a fresh fold makes of the same buffer, field for field, and the
// last fold's states past the new ones are cleared (they would pin changes
// and tables). It holds insertFold.states' clear to its job: a fold that
// skips the clear and sets only some fields (tried in session 19 to save
// a pass over the slab; no gain) fails here.
func TestFoldInsertsStatesWhole(t *testing.T) {
	w := &tableWriter{cfg: TableConfig{Topic: "t"}, partitions: 4, tables: map[uint32]*schema.Table{}}
	keys := []iceberg.NestedField{{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true}}
	u := &upsert{keys: keys}
	rng := rand.New(rand.NewPCG(19, 19))
	dirty := &change{}
	other := &schema.Table{Name: "other"}
	prev := 0
	for round := range 60 {
		n := 1 + rng.IntN(300)
		buf := make([]change, 0, n)
		for i, id := range rng.Perm(4 * n)[:n] {
			c := decodedInsert(t, w, kv, []any{int64(id), fmt.Sprint(i), nil}, 0, int64(i))
			c.partition = log.PartitionFor(c.key, 4)
			buf = append(buf, c)
		}
		got, ok, err := u.foldInserts(buf)
		if err != nil || !ok {
			t.Fatalf("round %d: the inserts' fold did not take the buffer: %v", round, err)
		}
		want, ok, err := (&upsert{keys: keys}).foldInserts(buf)
		if err != nil || !ok || len(want) != len(got) {
			t.Fatalf("round %d: a fresh fold: %d keys, %v %v; reused %d", round, len(want), ok, err, len(got))
		}
		for i := range got {
			if !reflect.DeepEqual(*got[i], *want[i]) {
				t.Fatalf("round %d key %d: reused slab %+v, fresh %+v", round, i, *got[i], *want[i])
			}
		}
		for i := len(got); i < prev; i++ {
			if st := u.ins.slab[:prev][i]; !reflect.DeepEqual(st, keyState{}) {
				t.Fatalf("round %d: the last fold's state %d (of %d) is left: %+v", round, i, prev, st)
			}
		}
		prev = len(got)
		// Staged: every field a commit's stage and writeRows set.
		for _, st := range got {
			st.deleted, st.row, st.from, st.table = true, []any{1}, []byte("from"), other
			st.loc, st.indexed, st.rowID, st.hasRowID = location{file: "f.parquet", pos: 9}, true, 42, true
			st.changes = append(st.changes, dirty)
		}
	}
}
