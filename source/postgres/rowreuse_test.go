package postgres

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// keepEmitter keeps the batches it is given as they are (rows not
// copied), as a stage that holds changes past Emit would.
type keepEmitter struct{ kept []source.Change }

func (e *keepEmitter) Emit(_ context.Context, batch []source.Change) error {
	e.kept = append(e.kept, batch...)
	return nil
}

// rowsRel is a relation of an int8 key and a text.
func rowsRel(t *testing.T) *relation {
	t.Helper()
	rel := &relation{table: &schema.Table{Namespace: "public", Name: "t", Key: []int{0},
		Columns: []schema.Column{{Name: "id"}, {Name: "v", Nullable: true}}}}
	for _, oid := range []uint32{20, 25} {
		typ, ok, err := pgdecode.Builtin(oid, -1, nil)
		if !ok || err != nil {
			t.Fatalf("builtin %d: %v %v", oid, ok, err)
		}
		rel.types = append(rel.types, typ)
	}
	return rel
}

// decodeRows decodes n rows (id, text) from id on into s's batch; every
// third text is NULL when nulls is set.
func decodeRows(t *testing.T, s *streamer, rel *relation, id, n int, nulls bool) {
	t.Helper()
	for i := id; i < id+n; i++ {
		cols := []tupleColumn{{kind: 'b', data: binary.BigEndian.AppendUint64(nil, uint64(i))},
			{kind: 'b', data: fmt.Appendf(nil, "text %d", i)}}
		if nulls && i%3 == 0 {
			cols[1] = tupleColumn{kind: 'n'}
		}
		row, err := decodeTuple(rel, cols, true, &s.alloc)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.add(source.Change{Table: rel.table, Op: source.OpCreate, After: row, CommitTime: s.tx.commitTime}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// checkRows checks that the changes carry the rows decodeRows made.
func checkRows(t *testing.T, what string, cs []source.Change, id int, nulls bool) {
	t.Helper()
	for k, c := range cs {
		i := id + k
		var text any = fmt.Sprintf("text %d", i)
		if nulls && i%3 == 0 {
			text = nil
		}
		if c.After[0] != int64(i) || c.After[1] != text {
			t.Fatalf("%s: change %d: %v, want [%d %v]", what, k, c.After, i, text)
		}
	}
}

// TestStreamRowsRecycled: once a batch is handed over, the stream decodes
// the next batch's rows into the same chunks (a row comes out nil where
// its column is NULL, whatever the chunk held), and a round of decoding
// then allocates nothing; but not when something may keep the rows — a
// faulty row's pause, an incremental snapshot's run, an Emitter that
// holds changes: then the handed-over rows keep their values.
func TestStreamRowsRecycled(t *testing.T) {
	ctx := context.Background()
	rel := rowsRel(t)
	const n = 3000 // more than a chunk of values

	t.Run("reused", func(t *testing.T) {
		em := &keepEmitter{}
		s := &streamer{r: &Reader{}, emit: em, alloc: newRowAlloc(true)}
		decodeRows(t, s, rel, 0, n, false)
		first := &s.batch[0].After[0]
		if err := s.flushBatch(ctx); err != nil {
			t.Fatal(err)
		}
		decodeRows(t, s, rel, n, n, true)
		if &s.batch[0].After[0] != first {
			t.Fatal("the second batch's rows are not cut from the first's chunks")
		}
		checkRows(t, "second batch", s.batch, n, true)
		if err := s.flushBatch(ctx); err != nil {
			t.Fatal(err)
		}
		tuples := make([][]tupleColumn, n)
		for i := range tuples {
			tuples[i] = []tupleColumn{{kind: 'b', data: binary.BigEndian.AppendUint64(nil, uint64(i))},
				{kind: 'b', data: fmt.Appendf(nil, "text %d", i)}}
		}
		allocs := testing.AllocsPerRun(5, func() {
			for _, cols := range tuples {
				if _, err := decodeTuple(rel, cols, true, &s.alloc); err != nil {
					t.Fatal(err)
				}
			}
			s.alloc.reset()
		})
		if allocs != 0 {
			t.Fatalf("%.0f allocations a round of %d rows after the first", allocs, n)
		}
	})

	kept := func(t *testing.T, s *streamer, em *keepEmitter) {
		t.Helper()
		decodeRows(t, s, rel, 0, n, false)
		if err := s.flushBatch(ctx); err != nil {
			t.Fatal(err)
		}
		decodeRows(t, s, rel, n, n, true)
		if &s.batch[0].After[0] == &em.kept[0].After[0] {
			t.Fatal("a kept batch's rows were handed out again")
		}
		checkRows(t, "kept batch", em.kept, 0, false)
		checkRows(t, "second batch", s.batch, n, true)
	}
	t.Run("fault", func(t *testing.T) {
		em := &keepEmitter{}
		s := &streamer{r: &Reader{}, emit: em, alloc: newRowAlloc(true)}
		s.rowsKept = true // what addFault notes
		kept(t, s, em)
	})
	t.Run("snapshot run", func(t *testing.T) {
		em := &keepEmitter{}
		s := &streamer{r: &Reader{}, emit: em, alloc: newRowAlloc(true)}
		eng := newEngine(Config{Slot: "s"}, &memState{}, discard)
		if err := eng.Submit(ctx, snapshot.Request{Table: "public.t"}); err != nil {
			t.Fatal(err)
		}
		s.inc = &incStream{s: s, eng: eng, signal: map[*schema.Table]bool{}}
		kept(t, s, em)
	})
	t.Run("write-once", func(t *testing.T) {
		// A Holder's stream (and the zero rowAlloc) never writes a chunk again.
		em := &keepEmitter{}
		s := &streamer{r: &Reader{}, emit: em}
		kept(t, s, em)
	})
}
