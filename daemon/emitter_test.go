package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
)

// testEmitter is an emitter over a fresh embedded log with the topic
// p.public.t of 4 partitions.
func testEmitter(t *testing.T) (*emitter, log.Log) {
	return newTestEmitter(t, "t", 4)
}

// newTestEmitter is the daemon's emitter, built as the daemon builds it,
// over a fresh embedded log (closed at the test's end) holding the topic
// p.public.<table> of the given partitions.
func newTestEmitter(tb testing.TB, table string, partitions int32) (*emitter, log.Log) {
	tb.Helper()
	ctx := tb.Context()
	lg, err := log.Open(tb.TempDir(), log.Options{CleanupInterval: -1}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { lg.Close() })
	for _, topic := range []string{TopicSchemas, TopicState} {
		if err := ensureTopic(ctx, lg, topic, log.TopicConfig{Partitions: 1}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := ensureTopic(ctx, lg, "p.public."+table, log.TopicConfig{Partitions: partitions}); err != nil {
		tb.Fatal(err)
	}
	st, err := openStateStore(ctx, lg)
	if err != nil {
		tb.Fatal(err)
	}
	reg, err := schema.OpenRegistry(ctx, schemaStore{lg})
	if err != nil {
		tb.Fatal(err)
	}
	e := &emitter{lg: lg, reg: reg, state: st, pipeline: "p", db: "db", connector: "postgresql",
		topicOf: func(ns, t string) string { return "p." + ns + "." + t }, partitions: partitions, logger: slog.New(slog.DiscardHandler),
		codecs: map[*schema.Table]*tableCodec{}, last: map[string][]source.Position{}, paused: map[string]*pauseState{},
		free: make(chan *batchRecords, 2), prepFree: make(chan *prepSlab, prepSlabsKept), pipe: source.Pipeline{Depth: 4}}
	return e, lg
}

// TestSubmitLargeBatch: a load-sized batch with repeated keys, submitted in
// pieces, lands whole, each partition in source order and holding only its
// keys, each record decoding to its change with its headers; the batch
// sent again after a restart is dropped whole.
func TestSubmitLargeBatch(t *testing.T) {
	ctx := t.Context()
	e, lg := testEmitter(t)
	const topic = "p.public.t"
	tbl := &schema.Table{Namespace: "public", Name: "t", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64}, {Name: "body", Kind: schema.String, Nullable: true}}, Key: []int{0}}
	const n = 5000
	batch := make([]source.Change, n)
	now := time.Now()
	for i := range batch {
		id := int64(i % 1000) // keys repeat: their changes must stay in order
		batch[i] = source.Change{Table: tbl, Op: source.OpUpdate, Before: []any{id, nil}, After: []any{id, fmt.Sprint("v", i)},
			Pos: pgpos.New(1000, uint32(i)), LSN: 1000, EventLSN: uint64(900 + i), TxID: uint64(7 * i), CommitTime: now}
	}
	// In pipelined pieces of uneven sizes, so later pieces are encoded into
	// the record buffers of earlier ones, recycled as their appends land.
	for _, piece := range [][2]int{{0, 1}, {1, 1700}, {1700, 2000}, {2000, 2001}, {2001, n}} {
		if err := e.Submit(ctx, batch[piece[0]:piece[1]]); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	read := func() int {
		info, err := lg.DescribeTopic(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, p := range info.Partitions {
			recs, err := lg.Fetch(ctx, topic, p.Partition, 0, log.FetchOptions{MaxBytes: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			prev := -1
			for _, r := range recs {
				_, idx, err := pgpos.Parse(source.Position(r.Header(HeaderPosition)))
				if err != nil {
					t.Fatal(err)
				}
				if int(idx) <= prev {
					t.Fatalf("partition %d: change %d after %d", p.Partition, idx, prev)
				}
				prev = int(idx)
				if got := partitionOf(r.Key, 4); got != p.Partition {
					t.Fatalf("change %d in partition %d, its key belongs in %d", idx, p.Partition, got)
				}
				env := decodeValue(t, e, r.Value)
				if want := fmt.Sprint("v", idx); env.After[1] != want || env.After[0] != int64(idx%1000) {
					t.Fatalf("change %d decodes to %v, want [%d %s]", idx, env.After, idx%1000, want)
				}
				if want := fmt.Sprintf(`["1000","%d"]`, 900+idx); env.Source.Sequence != want {
					t.Fatalf("change %d: source.sequence %s, want %s", idx, env.Source.Sequence, want)
				}
				if got, want := string(r.Header(HeaderTxID)), fmt.Sprint(7*idx); got != want || env.Source.TxID != uint64(7*idx) {
					t.Fatalf("change %d: transaction id header %s, envelope %d, want %s", idx, got, env.Source.TxID, want)
				}
			}
			total += len(recs)
		}
		return total
	}
	if got := read(); got != n {
		t.Fatalf("%d records, want %d", got, n)
	}
	// A new emitter (a restart) reads the newest positions back and drops
	// the batch sent again.
	e2 := &emitter{lg: lg, reg: e.reg, state: e.state, pipeline: "p", db: "db", connector: "postgresql",
		topicOf: e.topicOf, partitions: 4, logger: e.logger,
		codecs: map[*schema.Table]*tableCodec{}, last: map[string][]source.Position{}, paused: map[string]*pauseState{},
		free: make(chan *batchRecords, 2)}
	if err := e2.Emit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != n {
		t.Fatalf("%d records after sending the batch again, want %d", got, n)
	}
	if e2.dropped.Load() != n {
		t.Errorf("dropped %d, want %d", e2.dropped.Load(), n)
	}
}

// TestKeyChangeHeader: the delete half of a key change whose insert takes
// values from it carries HeaderKeyChange, also after being held for a
// paused table and replayed; nothing else does.
func TestKeyChangeHeader(t *testing.T) {
	ctx := t.Context()
	e, lg := testEmitter(t)
	const topic = "p.public.t"
	tbl := &schema.Table{Namespace: "public", Name: "t", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64}, {Name: "body", Kind: schema.String, Nullable: true}}, Key: []int{0}}
	keyChange := func(lsn uint64, from, to int64) []source.Change {
		now := time.Now()
		return []source.Change{
			{Table: tbl, Op: source.OpDelete, Before: []any{from, nil}, Pos: pgpos.New(lsn, 0), LSN: lsn, CommitTime: now, KeyChange: true},
			{Table: tbl, Op: source.OpCreate, Before: []any{from, nil}, After: []any{to, schema.Unchanged}, Pos: pgpos.New(lsn, 1), LSN: lsn, CommitTime: now},
			{Table: tbl, Op: source.OpUpdate, Before: []any{to, nil}, After: []any{to, "x"}, Pos: pgpos.New(lsn, 2), LSN: lsn, CommitTime: now},
		}
	}
	// marked returns the keys (as ids) of the records marked, and how many
	// records the topic holds.
	marked := func() (map[string]bool, int) {
		out, n := map[string]bool{}, 0
		info, err := lg.DescribeTopic(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range info.Partitions {
			recs, err := lg.Fetch(ctx, topic, p.Partition, 0, log.FetchOptions{MaxBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				n++
				if v := r.Header(HeaderKeyChange); v != nil {
					out[string(r.Header(HeaderPosition))] = true
				}
			}
		}
		return out, n
	}
	if err := e.Emit(ctx, keyChange(100, 1, 2)); err != nil {
		t.Fatal(err)
	}
	got, n := marked()
	if n != 3 || len(got) != 1 || !got[string(pgpos.New(100, 0))] {
		t.Fatalf("%d records, marked %v; want the delete at 100/0 marked", n, got)
	}
	// Paused: held with the header, and replayed with it.
	tc, err := e.codec(ctx, tbl)
	if err != nil {
		t.Fatal(err)
	}
	tc.refused = errors.New("refused by the test")
	if err := e.Emit(ctx, keyChange(200, 3, 4)); err != nil {
		t.Fatal(err)
	}
	if e.paused[topic] == nil {
		t.Fatal("the table did not pause")
	}
	tc.refused = nil
	if done, err := e.replay(ctx, e.paused[topic]); err != nil || !done {
		t.Fatalf("replay: %v %v", done, err)
	}
	got, n = marked()
	if n != 6 || len(got) != 2 || !got[string(pgpos.New(200, 0))] {
		t.Fatalf("after replay: %d records, marked %v; want the delete at 200/0 marked too", n, got)
	}
}

// TestEnvelopeSource: the source block as Debezium fills it, per
// connector: snapshot places, the change's own LSN and sequence on
// PostgreSQL, the binlog place and the table's database on MySQL.
func TestEnvelopeSource(t *testing.T) {
	tbl := &schema.Table{Namespace: "shop", Name: "t", Columns: []schema.Column{{Name: "id", Kind: schema.Int64}}, Key: []int{0}}
	at := time.Unix(1700000000, 123456789)
	pg := &emitter{connector: schema.ConnectorPostgres, pipeline: "p", db: "db"}
	c := source.Change{Table: tbl, Op: source.OpCreate, After: []any{int64(1)}, LSN: 0x500, EventLSN: 0x4F0, TxID: 9, CommitTime: at}
	s := pg.envelope(&c, at.UnixNano()).Source
	if s.Snapshot != "false" || s.LSN != 0x4F0 || s.Sequence != `["1280","1264"]` || s.TxID != 9 || s.DB != "db" || s.Schema != "shop" ||
		s.TsMs != at.UnixMilli() || s.TsUs != at.UnixMicro() || s.TsNs != at.UnixNano() {
		t.Errorf("postgres source %+v", s)
	}
	// The encode path builds the sequence in a reused buffer: the same text,
	// valid until the next change's.
	seq := []byte("stale bytes from the change before, longer than a sequence")
	if got := pg.envelopeInto(&c, at.UnixNano(), &seq).Source.Sequence; got != `["1280","1264"]` {
		t.Errorf("sequence from a reused buffer %q", got)
	}
	for place, want := range map[source.SnapshotPlace]string{source.PlaceInside: "true", source.PlaceFirst: "first",
		source.PlaceFirstInTable: "first_in_data_collection", source.PlaceLastInTable: "last_in_data_collection",
		source.PlaceLast: "last", source.PlaceIncremental: "incremental"} {
		r := source.Change{Table: tbl, Op: source.OpRead, After: []any{int64(1)}, Snapshot: true, Place: place, LSN: 0x400, TxID: 8}
		if s := pg.envelope(&r, 0).Source; s.Snapshot != want || s.LSN != 0x400 || s.TxID != 8 {
			t.Errorf("place %d: snapshot %q lsn %x txid %d, want %q", place, s.Snapshot, s.LSN, s.TxID, want)
		}
	}
	my := &emitter{connector: schema.ConnectorMySQL, pipeline: "p", db: "ignored"}
	c = source.Change{Table: tbl, Op: source.OpCreate, After: []any{int64(1)}, TxID: 3, CommitTime: at,
		Binlog: &source.BinlogPlace{File: "bin.000002", Pos: 400, Row: 2, ServerID: 7, GTID: "0-7-12"}}
	env := my.envelope(&c, at.UnixNano())
	if s := env.Source; s.DB != "shop" || s.Table != "t" || s.File != "bin.000002" || s.Pos != 400 || s.Row != 2 ||
		s.ServerID != 7 || s.GTID != "0-7-12" || s.TxID != 0 || s.LSN != 0 {
		t.Errorf("mysql source %+v", s)
	}
	vs, _ := schema.ValueSchemaFor(tbl, "p.shop.t", schema.ConnectorMySQL)
	dec, _ := schema.TableFromValueSchema(vs)
	buf, err := schema.AppendEnvelope(nil, tbl, &env)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := schema.DecodeEnvelope(dec, buf); err != nil || got.Source.GTID != "0-7-12" || got.Source.Row != 2 {
		t.Errorf("mysql envelope decoded %+v: %v", got.Source, err)
	}
}

// TestValueFaultNil: the emitter asks every change's encoding error for a
// value fault; a nil error costs no allocation, a column error is a fault.
func TestValueFaultNil(t *testing.T) {
	c := &source.Change{Table: &schema.Table{Namespace: "public", Name: "t"}, Op: source.OpCreate}
	if testing.CoverMode() == "" {
		if n := testing.AllocsPerRun(100, func() { _ = valueFault(c, nil) }); n != 0 {
			t.Errorf("valueFault(nil) allocated %.0f times", n)
		}
	}
	if f := valueFault(c, fmt.Errorf("x: %w", &schema.ColumnError{Column: "v", Err: errors.New("bad")})); f == nil || f.Column != "v" {
		t.Errorf("valueFault of a column error: %+v", f)
	}
}

// TestEmitterCopiesNewestPositions: the newest position per partition the
// emitter keeps (its dedupe) is its own copy: a source that cuts positions
// from chunks may write the chunk again, or keep it alive by nothing else.
// Positions overwritten after Emit (with bytes above every later position)
// must not make the emitter drop the next batch as already in the log.
func TestEmitterCopiesNewestPositions(t *testing.T) {
	ctx := t.Context()
	e, _ := testEmitter(t)
	tbl := &schema.Table{Namespace: "public", Name: "t", Columns: []schema.Column{{Name: "id", Kind: schema.Int64}}, Key: []int{0}}
	arena := make([]byte, 0, 64*pgpos.Len)
	batch := func(lsn uint64) []source.Change {
		var b []source.Change
		for i := range 8 {
			start := len(arena)
			arena = pgpos.Append(arena, lsn, uint32(i))
			b = append(b, source.Change{Table: tbl, Op: source.OpCreate, After: []any{int64(i)},
				Pos: source.Position(arena[start:len(arena):len(arena)]), LSN: lsn, CommitTime: time.Now()})
		}
		return b
	}
	if err := e.Emit(ctx, batch(1000)); err != nil {
		t.Fatal(err)
	}
	for i := range arena {
		arena[i] = 0xff
	}
	before := e.produced.Load()
	if err := e.Emit(ctx, batch(2000)); err != nil {
		t.Fatal(err)
	}
	if got := e.produced.Load() - before; got != 8 || e.dropped.Load() != 0 {
		t.Errorf("the second batch: %d of 8 records appended, %d dropped", got, e.dropped.Load())
	}
}

// TestBinlogTailSpliced: a change read from a binlog is encoded with the
// envelope tail of its row event made once and its row index spliced in
// (binlogEnvelope); every change's value must be AppendEnvelope's bytes:
// across rows of one event (row indexes whose varints grow from one byte
// to two and three, batches that start mid-event), ops, events, transactions, commit times, tables,
// snapshot rows and a before image with a NOT NULL column absent.
func TestBinlogTailSpliced(t *testing.T) {
	e := &emitter{connector: schema.ConnectorMySQL, pipeline: "shop", db: "ignored"}
	t1 := &schema.Table{Namespace: "db", Name: "t", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64}, {Name: "v", Kind: schema.String, Nullable: true}}, Key: []int{0}}
	t2 := &schema.Table{Namespace: "db", Name: "u", Columns: t1.Columns, Key: []int{0}}
	at := time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC)
	var batch []source.Change
	add := func(tbl *schema.Table, op source.Op, file string, pos uint64, gtid string, rows int, commit time.Time) {
		for r := range rows {
			id := int64(len(batch))
			var before, after []any
			switch op {
			case source.OpCreate, source.OpRead:
				after = []any{id, fmt.Sprint("v", id)}
			case source.OpUpdate:
				before, after = []any{id, "old"}, []any{id, fmt.Sprint("v", id)}
			case source.OpDelete:
				before = []any{id, nil}
			}
			batch = append(batch, source.Change{Table: tbl, Op: op, Before: before, After: after, TxID: uint64(len(gtid)),
				CommitTime: commit, Pos: source.Position(fmt.Appendf(nil, "%012d", len(batch))), Snapshot: op == source.OpRead,
				Binlog: &source.BinlogPlace{File: file, Pos: pos, Row: int32(r), ServerID: 7, GTID: gtid}})
		}
	}
	add(t1, source.OpCreate, "bin.000001", 400, "0-7-10", 9000, at)
	add(t1, source.OpCreate, "bin.000001", 9000, "0-7-10", 3, at) // the next event of the transaction
	add(t1, source.OpUpdate, "bin.000001", 9500, "0-7-11", 70, at.Add(time.Second))
	add(t2, source.OpUpdate, "bin.000001", 9500, "0-7-11", 2, at.Add(time.Second)) // another table, same place
	add(t1, source.OpDelete, "bin.000002", 4, "0-7-12", 5, time.Time{})
	add(t1, source.OpRead, "bin.000002", 4, "0-7-12", 3, at)
	// A before image with a NOT NULL column absent: its tail names it.
	batch = append(batch, source.Change{Table: t1, Op: source.OpDelete, Before: []any{nil, nil}, TxID: 3, CommitTime: at,
		Pos: source.Position("last"), Binlog: &source.BinlogPlace{File: "bin.000002", Pos: 4, Row: 5, ServerID: 7, GTID: "0-7-12"}})
	now := at.Add(time.Minute).UnixNano()
	var b *batchRecords
	for i := range batch {
		if i%4000 == 0 { // a new Submit: the next starts mid-event, at row 4000 and 8000
			b = &batchRecords{now: now}
		}
		c := &batch[i]
		env := e.envelope(c, now)
		want, werr := schema.AppendEnvelope(nil, c.Table, &env)
		got, gerr := e.binlogEnvelope(nil, b, c)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("change %d: error %v, want %v", i, gerr, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("change %d (%s, %+v): spliced value differs from AppendEnvelope's\n got %x\nwant %x", i, c.Op, *c.Binlog, got, want)
		}
	}
}
