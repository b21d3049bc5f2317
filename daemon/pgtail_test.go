package daemon

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// TestPGTailSpliced: a PostgreSQL change's value, its tail made once for a
// run of changes and its sequence and lsn spliced in (pgEnvelope), is
// byte for byte what AppendEnvelope makes of its envelope: across runs of
// tables, transactions, ops, commit times, snapshot places and batches,
// with WAL positions whose varints and decimal texts change length, and
// for the changes whose tail is made whole (unchanged or absent columns,
// no LSN).
func TestPGTailSpliced(t *testing.T) {
	e := &emitter{connector: "postgresql", pipeline: "shop", db: "shopdb"}
	t1 := &schema.Table{Namespace: "public", Name: "t", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64}, {Name: "v", Kind: schema.String, Nullable: true}}, Key: []int{0}}
	t2 := &schema.Table{Namespace: "other", Name: "u", Columns: t1.Columns, Key: []int{0}}
	at := time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC)
	var batch []source.Change
	add := func(tbl *schema.Table, op source.Op, txid, commitLSN, lsn uint64, rows int, commit time.Time) {
		for r := range rows {
			id := int64(len(batch))
			var before, after []any
			switch op {
			case source.OpCreate, source.OpRead:
				after = []any{id, fmt.Sprint("v", id)}
			case source.OpUpdate:
				before, after = []any{id, nil}, []any{id, fmt.Sprint("v", id)}
			case source.OpDelete:
				before = []any{id, nil}
			}
			ev := lsn
			if lsn != 0 {
				ev = lsn + uint64(r)*37
			}
			batch = append(batch, source.Change{Table: tbl, Op: op, Before: before, After: after, TxID: txid,
				CommitTime: commit, Pos: source.Position(fmt.Appendf(nil, "%012d", len(batch))), LSN: commitLSN, EventLSN: ev})
		}
	}
	add(t1, source.OpCreate, 7, 1<<20, 1<<20-4000, 300, at) // varints and texts grow within the run
	add(t1, source.OpCreate, 7, 1<<20, 95, 5, at)           // 2 to 3 digits
	add(t1, source.OpUpdate, 8, 1<<40, 1<<40-100, 50, at.Add(time.Second))
	add(t2, source.OpUpdate, 8, 1<<40, 1<<40-50, 3, at.Add(time.Second)) // another table, same transaction
	add(t1, source.OpDelete, 9, 1<<62, 1<<62-9, 20, time.Time{})
	add(t1, source.OpCreate, 10, 5000, 0, 3, at) // EventLSN 0: the commit LSN is the change's
	add(t1, source.OpCreate, 0, 0, 0, 3, at)     // no LSN at all: no sequence
	for i, place := range []source.SnapshotPlace{source.PlaceFirst, source.PlaceInside, source.PlaceLast, source.PlaceIncremental} {
		batch = append(batch, source.Change{Table: t1, Op: source.OpRead, After: []any{int64(i), "s"}, TxID: 11, CommitTime: at,
			Pos: source.Position(fmt.Appendf(nil, "s%d", i)), LSN: 6000, Snapshot: true, Place: place})
	}
	// An unchanged TOASTed value, and a before image with a NOT NULL column
	// absent: both tails name columns.
	batch = append(batch, source.Change{Table: t1, Op: source.OpUpdate, Before: []any{int64(1), nil}, After: []any{int64(1), schema.Unchanged},
		TxID: 12, CommitTime: at, Pos: source.Position("u"), LSN: 7000, EventLSN: 6990})
	batch = append(batch, source.Change{Table: t1, Op: source.OpDelete, Before: []any{nil, nil}, TxID: 12, CommitTime: at,
		Pos: source.Position("a"), LSN: 7000, EventLSN: 6995})
	add(t1, source.OpCreate, 12, 7000, 6999, 3, at) // the run after them
	var b *batchRecords
	for i := range batch {
		if i%100 == 0 { // a new batch: its own time, the same rb
			if b == nil {
				b = &batchRecords{}
			}
			b.now = at.Add(time.Duration(i) * time.Millisecond).UnixNano()
		}
		c := &batch[i]
		env := e.envelope(c, b.now)
		want, werr := schema.AppendEnvelope(nil, c.Table, &env)
		got, gerr := e.pgEnvelope(nil, b, c)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("change %d: error %v, want %v", i, gerr, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("change %d (%s, lsn %d/%d): spliced value differs from AppendEnvelope's\n got %x\nwant %x", i, c.Op, c.LSN, c.EventLSN, got, want)
		}
	}
	if !b.pgTail.set {
		t.Fatal("no tail kept: nothing was spliced")
	}
}
