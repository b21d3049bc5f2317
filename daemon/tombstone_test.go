package daemon

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
)

// TestTombstonesOnDelete (issue 22): as Debezium's connectors do by
// default, every delete's record is followed in its partition by a
// tombstone — the same key, no value — carrying the delete's position, so
// the delete sent again after a restart is dropped with its tombstone;
// other changes get none, and with log.tombstones off no delete does.
func TestTombstonesOnDelete(t *testing.T) {
	ctx := t.Context()
	tbl := &schema.Table{Namespace: "public", Name: "t", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64}, {Name: "body", Kind: schema.String, Nullable: true}}, Key: []int{0}}
	now := time.Now()
	changes := []source.Change{
		{Table: tbl, Op: source.OpCreate, After: []any{int64(1), "a"}, Pos: pgpos.New(100, 0), LSN: 100, CommitTime: now},
		{Table: tbl, Op: source.OpCreate, After: []any{int64(2), "b"}, Pos: pgpos.New(100, 1), LSN: 100, CommitTime: now},
		{Table: tbl, Op: source.OpUpdate, Before: []any{int64(1), nil}, After: []any{int64(1), "c"}, Pos: pgpos.New(200, 0), LSN: 200, CommitTime: now},
		{Table: tbl, Op: source.OpDelete, Before: []any{int64(1), nil}, Pos: pgpos.New(300, 0), LSN: 300, CommitTime: now},
		{Table: tbl, Op: source.OpDelete, Before: []any{int64(2), nil}, Pos: pgpos.New(300, 1), LSN: 300, CommitTime: now},
	}
	// all returns the topic's records in partition order.
	all := func(lg log.Log) []log.Record {
		info, err := lg.DescribeTopic(ctx, "p.public.t")
		if err != nil {
			t.Fatal(err)
		}
		var out []log.Record
		for _, p := range info.Partitions {
			recs, err := lg.Fetch(ctx, "p.public.t", p.Partition, 0, log.FetchOptions{MaxBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, recs...)
		}
		return out
	}

	for _, on := range []bool{true, false} {
		e, lg := newTestEmitter(t, "t", 4)
		e.tombstones = on
		if err := e.Emit(ctx, changes); err != nil {
			t.Fatal(err)
		}
		recs := all(lg)
		tombs := checkTombstones(t, tbl, recs)
		want, wantRecs := 0, len(changes)
		if on {
			want, wantRecs = 2, len(changes)+2
		}
		if tombs != want || len(recs) != wantRecs {
			t.Fatalf("tombstones %v: %d records with %d tombstones, want %d with %d", on, len(recs), tombs, wantRecs, want)
		}
		if !on {
			continue
		}
		// A paused table's delete, held and replayed, gets its tombstone too.
		tc, err := e.codec(ctx, tbl)
		if err != nil {
			t.Fatal(err)
		}
		tc.refused = errors.New("refused by the test")
		held := []source.Change{
			{Table: tbl, Op: source.OpCreate, After: []any{int64(5), "e"}, Pos: pgpos.New(400, 0), LSN: 400, CommitTime: now},
			{Table: tbl, Op: source.OpDelete, Before: []any{int64(5), nil}, Pos: pgpos.New(400, 1), LSN: 400, CommitTime: now},
		}
		if err := e.Emit(ctx, held); err != nil {
			t.Fatal(err)
		}
		if e.paused["p.public.t"] == nil {
			t.Fatal("the table did not pause")
		}
		tc.refused = nil
		if done, err := e.replay(ctx, e.paused["p.public.t"]); err != nil || !done {
			t.Fatalf("replay: %v %v", done, err)
		}
		recs = all(lg)
		wantRecs += 3
		if n := checkTombstones(t, tbl, recs); len(recs) != wantRecs || n != 3 {
			t.Fatalf("after the replay: %d records with %d tombstones, want %d with 3", len(recs), n, wantRecs)
		}

		// A restart: the deletes sent again are dropped, tombstones too.
		e2, _ := newTestEmitter(t, "t", 4)
		e2.lg, e2.reg, e2.state, e2.tombstones = lg, e.reg, e.state, true
		if err := e2.Emit(ctx, append(changes[3:], held[1])); err != nil {
			t.Fatal(err)
		}
		if got := len(all(lg)); got != wantRecs {
			t.Errorf("%d records after the deletes were sent again, want %d", got, wantRecs)
		}
	}
}

// checkTombstones checks that each tombstone of recs (partition by
// partition, in offset order) directly follows a delete of its key with
// the same position, and counts them.
func checkTombstones(t *testing.T, tbl *schema.Table, recs []log.Record) int {
	t.Helper()
	tombs := 0
	for i, r := range recs {
		if r.Value != nil {
			continue
		}
		tombs++
		op := ""
		if i > 0 && recs[i-1].Value != nil {
			info, err := schema.ScanEnvelope(tbl, recs[i-1].Value[5:])
			if err != nil {
				t.Fatal(err)
			}
			op = string(info.Op)
		}
		if op != "d" || recs[i-1].Partition != r.Partition || !bytes.Equal(recs[i-1].Key, r.Key) || len(r.Key) == 0 ||
			!bytes.Equal(recs[i-1].Header(HeaderPosition), r.Header(HeaderPosition)) {
			t.Errorf("tombstone %d/%d does not follow a delete of its key at its position (op before it %q)", r.Partition, r.Offset, op)
		}
	}
	return tombs
}
