package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
)

// chunkOf returns the chunk sequence of a snapshot row's position.
func chunkOf(p source.Position) uint32 { return binary.BigEndian.Uint32(p[8:12]) }

// TestChunkedParallelLoad: tables of several key types are loaded in
// parallel chunks; every row arrives once as op r, all before the first
// streamed change, in strictly increasing positions; progress is reported.
func TestChunkedParallelLoad(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE nums (id bigint PRIMARY KEY, v text);
		INSERT INTO nums SELECT g - 10000, 'n' || g FROM generate_series(1, 20000) g; ANALYZE nums;
		CREATE TABLE words (k text, n int, v int, PRIMARY KEY (k, n));
		INSERT INTO words SELECT chr(65 + g % 50) || 'é' || g || E'\\''q', g % 7, g FROM generate_series(1, 5000) g;
		CREATE TABLE uu (id uuid PRIMARY KEY);
		INSERT INTO uu SELECT md5(g::text)::uuid FROM generate_series(1, 2000) g`)
	c := newCollector()
	_, r := e.startReader(t, []string{"nums", "words", "uu"}, true, c, func(c *Config) {
		c.SnapshotChunkRows, c.SnapshotWorkers, c.BatchMax = 1000, 3, 500
	})
	e.exec(t, `INSERT INTO nums VALUES (999999, 'streamed')`)
	got := c.wait(t, 27001)
	if len(got) != 27001 {
		t.Fatalf("%d changes, want 27001", len(got))
	}
	seen := map[string]bool{}
	chunks := map[uint32]bool{}
	for i, ch := range got[:27000] {
		if ch.Op != source.OpRead || !ch.Snapshot {
			t.Fatalf("change %d: %s", i, ch.Op)
		}
		k := ch.Table.Name + keyOf(ch)
		if seen[k] {
			t.Fatalf("row %s loaded twice", k)
		}
		seen[k] = true
		chunks[chunkOf(ch.Pos)] = true
		// The values are the row's own: a batch's slab is reused only
		// once the Emitter has taken the batch.
		if ch.Table.Name == "nums" {
			if id, _ := ch.After[0].(int64); ch.After[1] != fmt.Sprintf("n%d", id+10000) {
				t.Fatalf("row %d of nums: %v", i, ch.After)
			}
		}
		if i > 0 && ch.Pos.Compare(got[i-1].Pos) <= 0 {
			t.Fatalf("position of row %d does not increase", i)
		}
	}
	// Where the load and each table begin and end (source.snapshot), and
	// the snapshot's transaction id on every row.
	places := map[source.SnapshotPlace][]string{}
	for i, ch := range got[:27000] {
		if ch.Place != source.PlaceInside {
			places[ch.Place] = append(places[ch.Place], ch.Table.Name)
		}
		if ch.TxID == 0 || ch.TxID != got[0].TxID {
			t.Fatalf("row %d has txid %d, the first %d", i, ch.TxID, got[0].TxID)
		}
		if first := i == 0 || got[i-1].Table != ch.Table; first != (ch.Place == source.PlaceFirstInTable || ch.Place == source.PlaceFirst) {
			t.Errorf("row %d of %s: place %d, first of its table %v", i, ch.Table.Name, ch.Place, first)
		}
		if last := i == 26999 || got[i+1].Table != ch.Table; last != (ch.Place == source.PlaceLastInTable || ch.Place == source.PlaceLast) {
			t.Errorf("row %d of %s: place %d, last of its table %v", i, ch.Table.Name, ch.Place, last)
		}
	}
	if got[0].Place != source.PlaceFirst || got[26999].Place != source.PlaceLast ||
		len(places[source.PlaceFirstInTable]) != 2 || len(places[source.PlaceLastInTable]) != 2 {
		t.Errorf("snapshot places %v", places)
	}
	if last := got[27000]; last.Op != source.OpCreate || last.Pos.Compare(got[26999].Pos) <= 0 {
		t.Fatalf("streamed change %s does not follow the load", last.Op)
	}
	if len(chunks) < 20 {
		t.Errorf("only %d chunks", len(chunks))
	}
	p := r.Stats().SnapshotProgress()
	if p.Done != 27000 || p.Estimated < 20000 || p.RowsPerSecond <= 0 || p.ETA != 0 {
		t.Errorf("progress %+v", p)
	}
}

// failingState fails the first Save of one key, as a crash at that point.
type failingState struct {
	*memState
	key    string
	failed bool
}

func (s *failingState) Save(ctx context.Context, k string, v []byte) error {
	if k == s.key && !s.failed {
		s.failed = true
		return errors.New("test: state lost")
	}
	return s.memState.Save(ctx, k, v)
}

// TestLoadStartsOverBeforeFirstRow: a load that stopped before its plan
// was saved (so before any row reached the log) starts over on a new slot,
// whose exported snapshot is exact.
func TestLoadStartsOverBeforeFirstRow(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 100)`)
	fs := &failingState{memState: e.state, key: "postgres/" + e.names.Slot + "/load-plan"}
	r := New(e.config(t, []string{"t"}, true), fs, discard)
	if err := r.Run(t.Context(), newCollector()); err == nil || !strings.Contains(err.Error(), "state lost") {
		t.Fatalf("first run: %v", err)
	}
	first := slotConfirmed(t, e.conn, e.names.Slot)
	e.exec(t, `INSERT INTO t VALUES (101)`)
	c := newCollector()
	e.start(t, []string{"t"}, true, c)
	got := c.wait(t, 101)
	for _, ch := range got {
		if ch.Op != source.OpRead {
			t.Fatalf("change %s: the new slot's snapshot has every row", ch.Op)
		}
	}
	if again := slotConfirmed(t, e.conn, e.names.Slot); again <= first {
		t.Fatalf("slot not created again: confirmed %X, was %X", again, first)
	}
}

func TestChunkQuery(t *testing.T) {
	ct := &catalogTable{schema: "s", name: "t", key: []string{"k", "n"}, columns: []catalogColumn{
		{name: "k", typeName: "text"}, {name: "n", typeName: "integer"}, {name: "v", typeName: "aclitem"}}}
	rel := &relation{table: nil, types: []*pgdecode.Type{{}, {}, {Text: true}}}
	rel.table = mustTable(t, ct)
	p := &tablePlan{Bounds: [][]string{{"a'b\\", "1"}, {"m", "2"}}}
	q := buildChunkQuery(ct, rel, p, 1)
	want := `COPY (SELECT "k", "n", "v"::text, (_cdcd_t."k")::text FROM ONLY "s"."t" AS _cdcd_t ` +
		`WHERE (_cdcd_t."k", _cdcd_t."n") >= (E'a''b\\'::text, E'1'::integer) ` +
		`AND (_cdcd_t."k", _cdcd_t."n") < (E'm'::text, E'2'::integer) ORDER BY (_cdcd_t."k")::text COLLATE "C", _cdcd_t."n") TO STDOUT (FORMAT binary)`
	if q.sql != want {
		t.Fatalf("got  %s\nwant %s", q.sql, want)
	}
	// Encoded keys sort as the chunk's ORDER BY does.
	enc := func(k string, n int64) []byte {
		b, err := appendKeyPart(nil, q.parts[0], nil, [][]byte{nil, nil, nil, []byte(k)})
		if err != nil {
			t.Fatal(err)
		}
		b, err = appendKeyPart(b, q.parts[1], []any{nil, n}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ordered := [][]byte{enc("a", -5), enc("a", 3), enc("ab", -9), enc("b", 0)}
	for i := 1; i < len(ordered); i++ {
		if bytes.Compare(ordered[i-1], ordered[i]) >= 0 {
			t.Fatalf("key %d does not sort after key %d", i, i-1)
		}
	}
}

func mustTable(t *testing.T, ct *catalogTable) *schema.Table {
	t.Helper()
	tbl := &schema.Table{Namespace: ct.schema, Name: ct.name}
	for _, c := range ct.columns {
		kind := schema.String
		if c.typeName == "integer" {
			kind = schema.Int32
		}
		tbl.Columns = append(tbl.Columns, schema.Column{Name: c.name, Kind: kind})
	}
	tbl.Key = []int{0, 1}
	return tbl
}

// TestLoadEmitterPlaces: a table whose last chunk is empty still gets its
// last row marked (the batch is held until the next table's), and the
// chunk of the held batch is not counted done.
func TestLoadEmitterPlaces(t *testing.T) {
	var emitted []source.Change
	le := &loadEmitter{free: newLoadFree(4, nil), xid: 77, first: true, stats: &Stats{},
		emit: func(_ context.Context, b []source.Change) error { emitted = append(emitted, b...); return nil }}
	batch := func(n int) *loadBuf { return &loadBuf{changes: make([]source.Change, n)} }
	ctx := context.Background()
	steps := []struct {
		n     int
		seq   int
		table string
	}{{2, 0, "a"}, {1, 0, "a"}, {3, 1, "a"} /* chunk 2 of a is empty */, {1, 3, "b"}, {2, 4, "c"}}
	for _, s := range steps {
		if err := le.take(ctx, batch(s.n), s.seq, s.table); err != nil {
			t.Fatal(err)
		}
	}
	if d := le.done(5); d != 4 {
		t.Errorf("done %d while chunk 4's batch is held, want 4", d)
	}
	if err := le.flush(ctx, true, true); err != nil {
		t.Fatal(err)
	}
	if d := le.done(5); d != 5 {
		t.Errorf("done %d after the flush", d)
	}
	want := []source.SnapshotPlace{source.PlaceFirst, 0, 0, 0, 0, source.PlaceLastInTable,
		source.PlaceFirstInTable, // b's only row: first of its table over last
		source.PlaceFirstInTable, source.PlaceLast}
	if len(emitted) != len(want) {
		t.Fatalf("%d rows emitted, want %d", len(emitted), len(want))
	}
	for i, w := range want {
		if emitted[i].Place != w || emitted[i].TxID != 77 {
			t.Errorf("row %d: place %d txid %d, want %d", i, emitted[i].Place, emitted[i].TxID, w)
		}
	}
	if le.emittedRows() != 9 || le.stats.SnapshotRows.Load() != 9 {
		t.Error("rows not counted")
	}
}

// preparing is a collector that is also a source.Preparer: it marks each
// change it is asked to prepare with its position and row, as the
// daemon's emitter keeps its encoding.
type preparing struct {
	*collector
	calls atomic.Int64
}

type prepMark struct {
	pos   string
	after []any
}

func (p *preparing) Prepare(batch []source.Change) {
	p.calls.Add(1)
	for i := range batch {
		c := &batch[i]
		c.Prepared = &prepMark{pos: string(c.Pos), after: ownRow(c.After)}
	}
}

// TestLoadRowsPrepared: an Emitter that encodes ahead (source.Preparer)
// gets every row of the initial load to prepare before the row is handed
// to it, with the row's position and values as they are emitted, so the
// encoding runs on the COPY workers rather than in the emitter.
func TestLoadRowsPrepared(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE nums (id bigint PRIMARY KEY, v text);
		INSERT INTO nums SELECT g, 'n' || g FROM generate_series(1, 5000) g; ANALYZE nums`)
	c := &preparing{collector: newCollector()}
	e.startReader(t, []string{"nums"}, true, c, func(c *Config) {
		c.SnapshotChunkRows, c.SnapshotWorkers, c.BatchMax = 1000, 3, 250
	})
	got := c.wait(t, 5000)
	for i, ch := range got[:5000] {
		m, ok := ch.Prepared.(*prepMark)
		if !ok {
			t.Fatalf("row %d (%s) was not prepared", i, keyOf(ch))
		}
		if m.pos != string(ch.Pos) || fmt.Sprint(m.after) != fmt.Sprint(ch.After) {
			t.Fatalf("row %d (%s, %v) was prepared as %x %v", i, keyOf(ch), ch.After, m.pos, m.after)
		}
	}
	if n := c.calls.Load(); n < 5000/500 {
		t.Errorf("%d Prepare calls for 5000 rows in batches of at most 500", n)
	}
}

// TestLoadReadsColumnsAddedBeforeItsSnapshot: a column added (and rows
// inserted with it) after the session described its tables but before
// the slot's snapshot was taken is in the snapshot's rows: the initial
// load reads it, where it once loaded the columns of the description and
// left the new column's values out of the mirror without a word (crash
// suite, upsert-v2: memo NULL in rows inserted just after ALTER TABLE ADD
// COLUMN memo).
func TestLoadReadsColumnsAddedBeforeItsSnapshot(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE acct (id int PRIMARY KEY, owner text); INSERT INTO acct VALUES (1, 'a')`)
	var once sync.Once
	e.state.onSave = func(k string, v []byte) {
		if !strings.Contains(string(v), `"creating":"`+e.names.Slot+`"`) {
			return
		}
		once.Do(func() { // described, the slot not created yet
			e.exec(t, `ALTER TABLE acct ADD COLUMN memo text; INSERT INTO acct VALUES (2, 'b', 'kept')`)
		})
	}
	c := newCollector()
	stop, _ := e.startReader(t, []string{"acct"}, true, c)
	defer stop()
	got := c.wait(t, 2)
	if len(got) != 2 {
		t.Fatalf("%d changes, want the 2 rows of the load", len(got))
	}
	for _, ch := range got {
		if ch.Op != source.OpRead {
			t.Fatalf("change %s, want the load's reads", ch.Op)
		}
		if ch.Table.ColumnIndex("memo") < 0 {
			t.Fatalf("row %v loaded as %s: the column added before the snapshot is missing", ch.After, ch.Table)
		}
	}
	if row := got[1].After; fmt.Sprint(row[0]) != "2" || row[got[1].Table.ColumnIndex("memo")] != "kept" {
		t.Fatalf("row 2 loaded as %v, want its memo", row)
	}
}

// TestLoadRetriesWhenATableChangesAfterItsSnapshot: a table rewritten
// (ALTER COLUMN TYPE) after the slot exported the load's snapshot and
// before the load locked it is empty to that snapshot, and the stream never
// sends its rows; a column dropped or renamed then is named by the COPY but
// gone. Either way the load fails before it emits anything and starts
// again on a new slot — where it once loaded the rewritten table as empty
// without a word, and stopped on the COPY's error for the others.
func TestLoadRetriesWhenATableChangesAfterItsSnapshot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, ddl, log string }{
		{"rewrite", `ALTER TABLE rw ALTER COLUMN x TYPE bigint`, "was rewritten after the load's snapshot was taken"},
		{"drop", `ALTER TABLE rw DROP COLUMN x`, "of public.rw was dropped, renamed or retyped"},
		{"rename", `ALTER TABLE rw RENAME COLUMN x TO y`, "of public.rw was dropped, renamed or retyped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, `CREATE TABLE rw (id int PRIMARY KEY, x int); INSERT INTO rw SELECT g, g FROM generate_series(1, 100) g`)
			logs := &syncBuffer{}
			e.logs = logs
			var once sync.Once
			e.state.onSave = func(k string, v []byte) {
				if !strings.Contains(string(v), `"slot_created":true`) {
					return
				}
				once.Do(func() { e.exec(t, tc.ddl) }) // the slot and its snapshot made, the load not begun
			}
			c := newCollector()
			stop, _ := e.startReader(t, []string{"rw"}, true, c)
			defer stop()
			got := c.wait(t, 100)
			for _, ch := range got[:100] {
				if ch.Op != source.OpRead {
					t.Fatalf("change %s, want the load's 100 reads first", ch.Op)
				}
			}
			if !strings.Contains(logs.String(), tc.log) {
				t.Errorf("the log does not say %q:\n%s", tc.log, logs.String())
			}
		})
	}
}

// keepingHolder keeps the rows it is handed as they are, values and all,
// as an Emitter that delivers some changes after Emit returned
// (source.Holder) may: the outbox relay's queued events keep texts of
// their rows.
type keepingHolder struct {
	mu   sync.Mutex
	rows [][]any
}

func (k *keepingHolder) Emit(_ context.Context, batch []source.Change) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range batch {
		if c.Snapshot {
			k.rows = append(k.rows, slices.Clone(c.After))
		}
	}
	return nil
}

func (k *keepingHolder) Held() (source.Position, bool) { return nil, false }

func (k *keepingHolder) loaded() [][]any {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.rows)
}

// TestLoadKeepsHoldersValues: the initial load reuses its batches' slabs
// only for an Emitter that keeps nothing of a batch; one that delivers
// some changes later (source.Holder) finds every text it kept as loaded,
// after many more batches.
func TestLoadKeepsHoldersValues(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE nums (id bigint PRIMARY KEY, v text);
		INSERT INTO nums SELECT g, 'n' || g FROM generate_series(1, 6000) g; ANALYZE nums`)
	k := &keepingHolder{}
	e.startReader(t, []string{"nums"}, true, k, func(c *Config) {
		c.SnapshotChunkRows, c.SnapshotWorkers, c.BatchMax = 1000, 2, 100
	})
	var rows [][]any
	for deadline := time.Now().Add(30 * time.Second); len(rows) < 6000; rows = k.loaded() {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows loaded after 30 s", len(rows))
		}
		time.Sleep(10 * time.Millisecond)
	}
	seen := map[int64]bool{}
	for i, row := range rows {
		id, _ := row[0].(int64)
		if row[1] != fmt.Sprintf("n%d", id) || seen[id] || id < 1 || id > 6000 {
			t.Fatalf("row %d kept by the Emitter reads %v (or its id came before)", i, row)
		}
		seen[id] = true
	}
}
