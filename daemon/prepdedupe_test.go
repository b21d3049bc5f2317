package daemon

import (
	"fmt"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
)

// TestPreparedDuplicatesDropped: prepared rows at or before their
// partition's newest stored position (a chunk read again after a restart)
// are dropped before they are written, counted as dropped, and their slab
// still goes back once every row of it was taken; the rest land as the
// same records as rows encoded in Submit, in a batch mixing both.
func TestPreparedDuplicatesDropped(t *testing.T) {
	ctx := t.Context()
	tbl := &schema.Table{Namespace: "public", Name: "t", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64}, {Name: "body", Kind: schema.String, Nullable: true}}, Key: []int{0}}
	at := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	batch := func(from, n int) []source.Change {
		rows := make([]source.Change, n)
		for i := range rows {
			id := from + i
			rows[i] = source.Change{Table: tbl, Op: source.OpRead, After: []any{int64(id), fmt.Sprint("body ", id)},
				Snapshot: true, CommitTime: at, TxID: 9, LSN: 100, Pos: append(pgpos.New(99, 0), byte(id>>8), byte(id))}
		}
		return rows
	}
	plain, plainLog := testEmitter(t)
	pre, preLog := testEmitter(t)
	for _, r := range [][2]int{{0, 1000}, {500, 1000}, {0, 300}} { // the second half new, then all again
		a, b := batch(r[0], r[1]), batch(r[0], r[1])
		pre.Prepare(b)
		if err := plain.Emit(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := pre.Emit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := pre.dropped.Load(), plain.dropped.Load(); got != want || got != 500+300 {
		t.Errorf("prepared: %d dropped, encoded in Submit: %d; want 800", got, want)
	}
	if got := pre.produced.Load(); got != 1500 {
		t.Errorf("prepared: %d appended, want 1500", got)
	}
	if n := len(pre.prepFree); n == 0 {
		t.Error("no slab back after every prepared row was taken, some of them dropped")
	}
	sameRecords(t, readDecoded(t, plain, plainLog), readDecoded(t, pre, preLog), 1500)
}
