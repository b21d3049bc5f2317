package daemon

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
)

// TestPreparedRecordsMatch: a snapshot chunk's rows encoded ahead
// (Prepare, under the chunk's table version) and emitted under the
// stream's version of the same shape land as the same records as rows
// encoded in Submit — key, partition, headers, every envelope field — in
// batches with several transactions, LSNs and places; rows prepared under
// a shape the table no longer has are encoded afresh (else the added
// column would be missing); a row with a value left to the sink is not
// prepared.
func TestPreparedRecordsMatch(t *testing.T) {
	ctx := t.Context()
	read := &schema.Table{Namespace: "public", Name: "t", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64}, {Name: "body", Kind: schema.String, Nullable: true},
		{Name: "n", Kind: schema.Int32, Nullable: true}}, Key: []int{0}}
	stream := &schema.Table{Namespace: "public", Name: "t", Columns: append([]schema.Column(nil), read.Columns...), Key: []int{0}}
	altered := &schema.Table{Namespace: "public", Name: "t", Columns: append(append([]schema.Column(nil), read.Columns...),
		schema.Column{Name: "extra", Kind: schema.String, Nullable: true}), Key: []int{0}}
	at := time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC)
	chunk := func(from, n int, lsn uint64) []source.Change {
		rows := make([]source.Change, n)
		for i := range rows {
			id := int64(from + i)
			var body any = fmt.Sprint("row ", id)
			if id%7 == 0 {
				body = nil
			}
			rows[i] = source.Change{Table: read, Op: source.OpRead, After: []any{id, body, id * 3},
				Snapshot: true, CommitTime: at, TxID: uint64(10 + i/100)}
		}
		return rows
	}
	// place does what the stream does at a high watermark: the stream's
	// version, the watermark's LSN, positions after it.
	place := func(rows []source.Change, t *schema.Table, lsn uint64) {
		for i := range rows {
			rows[i].Table, rows[i].LSN, rows[i].Place = t, lsn, source.PlaceIncremental
			rows[i].Pos = append(pgpos.New(lsn, 0), byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
			if rows[i].Table == altered {
				rows[i].After = append(rows[i].After, fmt.Sprint("x", i))
			}
		}
	}
	plain, plainLog := testEmitter(t)
	pre, preLog := testEmitter(t)
	for _, step := range []struct {
		from, n int
		lsn     uint64
		shape   *schema.Table
	}{{0, 1000, 5000, stream}, {1000, 1, 6000, read}, {1001, 300, 7000, stream}, {1301, 700, 8000, altered}} {
		a, b := chunk(step.from, step.n, step.lsn), chunk(step.from, step.n, step.lsn)
		pre.Prepare(b)
		for i := range b {
			if b[i].Prepared == nil {
				t.Fatalf("row %d of a chunk not prepared", step.from+i)
			}
		}
		place(a, step.shape, step.lsn)
		place(b, step.shape, step.lsn)
		if err := plain.Emit(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := pre.Emit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	sameRecords(t, readDecoded(t, plain, plainLog), readDecoded(t, pre, preLog), 2001)
	unchanged := []source.Change{{Table: read, Op: source.OpRead, After: []any{int64(1), schema.Unchanged, nil}, Snapshot: true}}
	pre.Prepare(unchanged)
	if unchanged[0].Prepared != nil {
		t.Error("a row with a value left to the sink was prepared")
	}
}

// TestPreparedSlabsReused: Prepare's memory goes back to the emitter only
// once Submit has used every row of it, and is then used again: batches
// prepared ahead of their Submit (as a load's workers prepare them),
// submitted in pieces, with a batch prepared while another is half
// submitted, land as the same records as rows encoded in Submit.
func TestPreparedSlabsReused(t *testing.T) {
	ctx := t.Context()
	tbl := &schema.Table{Namespace: "public", Name: "t", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64}, {Name: "body", Kind: schema.String, Nullable: true}}, Key: []int{0}}
	at := time.Date(2026, 12, 2, 20, 0, 0, 0, time.UTC)
	batch := func(from, n int) []source.Change {
		rows := make([]source.Change, n)
		for i := range rows {
			id := from + i
			rows[i] = source.Change{Table: tbl, Op: source.OpRead, After: []any{int64(id), fmt.Sprint("body of ", id, " ", bytes.Repeat([]byte("x"), id%50))},
				Snapshot: true, CommitTime: at, TxID: 9, LSN: 100, Pos: append(pgpos.New(99, 0), byte(id>>8), byte(id))}
		}
		return rows
	}
	plain, plainLog := testEmitter(t)
	pre, preLog := testEmitter(t)
	emit := func(rows []source.Change, prepared bool) {
		t.Helper()
		e := plain
		if prepared {
			e = pre
		}
		if err := e.Submit(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	a, b := batch(0, 400), batch(400, 300)
	pre.Prepare(a)
	pre.Prepare(b)
	emit(batch(0, 200), false)
	emit(a[:200], true)
	if n := len(pre.prepFree); n != 0 {
		t.Fatalf("%d slabs back with half of one used", n)
	}
	c := batch(700, 400)
	pre.Prepare(c) // a fresh slab: none is back yet
	emit(batch(200, 200), false)
	emit(a[200:], true)
	emit(batch(400, 300), false)
	emit(b, true)
	if n := len(pre.prepFree); n != 2 {
		t.Fatalf("%d slabs back after two were used up, want 2", n)
	}
	emit(batch(700, 400), false)
	emit(c, true)
	d := batch(1100, 350)
	pre.Prepare(d)
	if s := d[0].Prepared.(*prepared).slab; s != a[0].Prepared.(*prepared).slab && s != b[0].Prepared.(*prepared).slab &&
		s != c[0].Prepared.(*prepared).slab {
		t.Error("a used-up slab was not used again")
	}
	emit(batch(1100, 350), false)
	emit(d, true)
	if err := plain.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pre.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	sameRecords(t, readDecoded(t, plain, plainLog), readDecoded(t, pre, preLog), 1450)
}

// sameRecords fails t unless want (encoded in Submit) and got (prepared)
// are n records each, the same key, partition, headers and envelope.
func sameRecords(t *testing.T, want, got []decodedRecord, n int) {
	t.Helper()
	if len(want) != n || len(got) != len(want) {
		t.Fatalf("records: %d encoded in Submit, %d prepared; want %d each", len(want), len(got), n)
	}
	for i := range want {
		w, g := want[i], got[i]
		if !bytes.Equal(w.key, g.key) || w.part != g.part || !reflect.DeepEqual(w.headers, g.headers) || !reflect.DeepEqual(w.env, g.env) {
			t.Fatalf("record %d differs:\nencoded in Submit %+v\nprepared          %+v", i, w, g)
		}
	}
}

type decodedRecord struct {
	key     []byte
	part    int32
	headers []log.Header
	env     schema.Envelope
}

// readDecoded reads p.public.t, partition by partition, decoding each
// value with its schema; the envelope's own times (when it was encoded)
// are cleared.
func readDecoded(t *testing.T, e *emitter, lg log.Log) []decodedRecord {
	ctx := t.Context()
	info, err := lg.DescribeTopic(ctx, "p.public.t")
	if err != nil {
		t.Fatal(err)
	}
	var out []decodedRecord
	for _, p := range info.Partitions {
		recs, err := lg.Fetch(ctx, "p.public.t", p.Partition, 0, log.FetchOptions{MaxBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			env := decodeValue(t, e, r.Value)
			env.TsMs, env.TsUs, env.TsNs = 0, 0, 0
			out = append(out, decodedRecord{key: r.Key, part: r.Partition, headers: r.Headers, env: env})
		}
	}
	return out
}

// BenchmarkChunkSubmit: what the stream's goroutine spends handing an
// incremental snapshot's chunk (8,192 rows of the benchmark table's
// shape) to the emitter at its high watermark — rows encoded there
// ("in-submit") against rows prepared ahead ("prepared", Prepare's cost
// reported beside it as prepare-ns/row: the readers' goroutines pay it).
// Submit's ns/row is the stream goroutine's ceiling on a snapshot's rate.
// CDCD_BENCH_ROWS sets the rows submitted per round (default 1M, whole
// chunks).
func BenchmarkChunkSubmit(b *testing.B) {
	tbl := &schema.Table{Namespace: "public", Name: "bench", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64}, {Name: "a", Kind: schema.Int32, Nullable: true}, {Name: "b", Kind: schema.Int64, Nullable: true},
		{Name: "c", Kind: schema.String, Nullable: true}, {Name: "d", Kind: schema.Decimal, Precision: 12, Scale: 2, Nullable: true},
		{Name: "e", Kind: schema.TimestampTZ, Nullable: true}, {Name: "f", Kind: schema.Bool, Nullable: true},
		{Name: "g", Kind: schema.Float64, Nullable: true}}, Key: []int{0}}
	const chunkRows = 8192
	chunks := max(1, benchRowCount()/chunkRows)
	at := time.Now()
	chunk := func(k int) []source.Change {
		rows := make([]source.Change, chunkRows)
		for i := range rows {
			g := int64(k*chunkRows + i + 1)
			rows[i] = source.Change{Table: tbl, Op: source.OpRead, Snapshot: true, CommitTime: at,
				After: []any{g, g % 1000, g * 7, fmt.Sprint("row ", g), fmt.Sprintf("%d.%02d", g%100000/100, g%100), g * 1e6, g%2 == 0, float64(g) / 3}}
		}
		return rows
	}
	for _, prepare := range []bool{false, true} {
		name := "in-submit"
		if prepare {
			name = "prepared"
		}
		b.Run(name, func(b *testing.B) {
			var submit, prep time.Duration
			rows := 0
			for b.Loop() {
				b.StopTimer()
				e, lg := newTestEmitter(b, "bench", 8)
				b.StartTimer()
				for k := range chunks {
					b.StopTimer()
					c := chunk(k)
					b.StartTimer()
					if prepare {
						began := time.Now()
						e.Prepare(c)
						prep += time.Since(began)
					}
					lsn := uint64(1000 + k)
					for i := range c { // as the stream places them
						c[i].LSN, c[i].Place = lsn, source.PlaceIncremental
						c[i].Pos = append(pgpos.New(lsn, 0), byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
					}
					began := time.Now()
					if err := e.Submit(b.Context(), c); err != nil {
						b.Fatal(err)
					}
					submit += time.Since(began)
					rows += len(c)
				}
				if err := e.Sync(b.Context()); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				lg.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(submit.Nanoseconds())/float64(rows), "submit-ns/row")
			b.ReportMetric(float64(prep.Nanoseconds())/float64(rows), "prepare-ns/row")
		})
	}
}

// decodeValue decodes a Confluent-framed value with the schema its id
// names in e's registry.
func decodeValue(t *testing.T, e *emitter, value []byte) schema.Envelope {
	t.Helper()
	id, body, err := schema.ParseFrame(value)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := e.reg.SchemaByID(id)
	if err != nil {
		t.Fatal(err)
	}
	vt, err := schema.TableFromValueSchema(vs)
	if err != nil {
		t.Fatal(err)
	}
	env, err := schema.DecodeEnvelope(vt, body)
	if err != nil {
		t.Fatal(err)
	}
	return env
}
