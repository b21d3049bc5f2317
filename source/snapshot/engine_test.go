package snapshot

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

var shape = &schema.Table{Namespace: "public", Name: "t", Key: []int{0}, Columns: []schema.Column{
	{Name: "id", Kind: schema.Int64}, {Name: "v", Kind: schema.String, Nullable: true}}}

// memState is State in memory.
type memState struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memState) Load(_ context.Context, k string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k], nil
}

func (s *memState) Save(_ context.Context, k string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string][]byte{}
	}
	s.m[k] = v
	return nil
}

// event is what the fake stream delivers, in order: a watermark or a change.
type event struct {
	watermark string
	change    *source.Change
}

// fakeDB is a table of int64 keys whose stream is a channel of events.
type fakeDB struct {
	// runAs, when set, is what the engine runs on (a wrapper of this db).
	runAs  Database
	mu     sync.Mutex
	rows   map[int64]string
	stream chan event
	reads  []ChunkQuery
	// duringRead, when set, runs inside a read (after its low watermark,
	// before its high one): changes it streams fall in the window.
	duringRead func(n int)
	// beforePlan and afterPlan, when set, run inside Plan before and after
	// the bound is read (afterPlan under the table's lock).
	beforePlan, afterPlan func()
	// inconsistent makes the first n reads fail the consistency check;
	// badReads those reads (by index).
	inconsistent int
	badReads     map[int]bool
	written      []string // watermark ids, in order
	// parallel runs the engine on it as a Parallel database
	// (parallelDB); rough, when set, places its chunks' ends at random
	// (parallelDB.Bounds); boundReads counts Bounds calls; maxRead is the
	// most rows a range read returned, cutReads the range reads that
	// stopped at their Limit.
	parallel   bool
	rough      *rand.Rand
	boundReads int
	maxRead    int
	cutReads   int
}

func newFakeDB(n int) *fakeDB {
	db := &fakeDB{rows: map[int64]string{}, stream: make(chan event, 1024), parallel: parallelReads}
	for i := int64(1); i <= int64(n); i++ {
		db.rows[i] = "v" + strconv.FormatInt(i, 10)
	}
	return db
}

func (db *fakeDB) Describe(context.Context, string) (*Table, error) {
	return &Table{Shape: shape,
		Compare: func(a, b []any) (int, error) { return cmp.Compare(a[0].(int64), b[0].(int64)), nil },
		KeyText: func(v []any) (Key, bool) { return Key{strconv.FormatInt(v[0].(int64), 10)}, true },
		ParseKey: func(k Key) ([]any, bool) {
			n, err := strconv.ParseInt(k[0], 10, 64)
			return []any{n}, err == nil
		}}, nil
}

func (db *fakeDB) Plan(context.Context, string, *Table, string) (*Plan, error) {
	if db.beforePlan != nil {
		db.beforePlan()
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	keys := db.keysLocked()
	if db.afterPlan != nil {
		db.afterPlan()
	}
	if len(keys) == 0 {
		return &Plan{}, nil
	}
	return &Plan{Upper: Key{strconv.FormatInt(keys[len(keys)-1], 10)}, Estimate: int64(len(keys))}, nil
}

func (db *fakeDB) keysLocked() []int64 {
	var keys []int64
	for k := range db.rows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (db *fakeDB) ReadChunk(_ context.Context, _ string, _ *Table, q ChunkQuery) (*Chunk, error) {
	db.mu.Lock()
	n := len(db.reads)
	db.reads = append(db.reads, q)
	hook := db.duringRead
	db.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	parse := func(k Key) int64 { v, _ := strconv.ParseInt(k[0], 10, 64); return v }
	res := &Chunk{}
	if n < db.inconsistent || db.badReads[n] {
		res.Consistent = func(source.Position) bool { return false }
	}
	for _, k := range db.keysLocked() {
		switch {
		case q.Keys != nil:
			if !slices.ContainsFunc(q.Keys, func(x Key) bool { return parse(x) == k }) {
				continue
			}
		case q.After != nil && k <= parse(q.After):
			continue
		case q.To != nil:
			if k > parse(q.To) || len(res.Rows) >= q.Limit {
				continue
			}
		case k > parse(q.Upper), len(res.Rows) >= q.Limit:
			continue
		}
		res.Rows = append(res.Rows, source.Change{Table: shape, Op: source.OpRead, After: []any{k, db.rows[k]}, Snapshot: true})
		if q.Keys == nil {
			res.Last = Key{strconv.FormatInt(k, 10)}
		}
	}
	if q.Keys == nil {
		db.maxRead = max(db.maxRead, len(res.Rows))
	}
	if q.To != nil && len(res.Rows) >= q.Limit {
		db.cutReads++
	}
	return res, nil
}

// WriteWatermark commits the watermark under the table's lock, as the
// writers of TestParallelHammer commit their changes: the stream's order is
// the commit order, and a read (under the lock) sees exactly what the
// stream delivered before it.
func (db *fakeDB) WriteWatermark(_ context.Context, id string) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.written = append(db.written, id)
	db.stream <- event{watermark: id}
	return nil
}

// streamer runs the fake stream: positions count up; what the engine
// emits and keeps is recorded.
type streamer struct {
	mu      sync.Mutex
	e       *Engine
	events  int // handled
	pos     uint64
	emitted []source.Change // chunk rows and reset markers
	kept    []source.Change // streamed changes Observe kept
	all     []source.Change // both, in the stream's order
	// lastWatermark is the id of the last watermark met.
	lastWatermark string
}

func pos(n uint64) source.Position { return binary.BigEndian.AppendUint64(nil, n) }

func (s *streamer) run(ctx context.Context, db *fakeDB) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-db.stream:
			s.mu.Lock()
			s.pos++
			if ev.change != nil {
				c := *ev.change
				c.Pos = pos(s.pos)
				kept := s.e.Observe([]source.Change{c}, 0)
				s.kept = append(s.kept, kept...)
				s.all = append(s.all, kept...)
			} else {
				s.lastWatermark = ev.watermark
				rows := s.e.Watermark(ev.watermark, pos(s.pos))
				s.emitted = append(s.emitted, rows...)
				s.all = append(s.all, rows...)
			}
			s.events++
			s.mu.Unlock()
		}
	}
}

func (s *streamer) rows() []source.Change {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.emitted)
}

// start runs an engine on db until the test ends (or stop).
func start(t *testing.T, st State, db *fakeDB, chunk int) (*Engine, *streamer, context.CancelFunc) {
	t.Helper()
	return startLogged(t, st, db, chunk, slog.New(slog.DiscardHandler))
}

// startLogged is start with the engine's logger.
func startLogged(t *testing.T, st State, db *fakeDB, chunk int, logger *slog.Logger) (*Engine, *streamer, context.CancelFunc) {
	t.Helper()
	e := New(Config{StateKey: "inc", ChunkRows: chunk}, st, logger)
	if err := e.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := e.Prepare(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	s := &streamer{e: e}
	go s.run(ctx, db)
	done := make(chan struct{})
	var run Database = db
	switch {
	case db.runAs != nil:
		run = db.runAs
	case db.parallel:
		run = &parallelDB{db}
	}
	go func() { defer close(done); _ = e.Run(ctx, run, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	return e, s, func() { cancel(); <-done }
}

// waitDone waits until no run is left after checkpointing everything the
// stream has met.
func waitDone(t *testing.T, e *Engine, s *streamer) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		p := pos(s.pos)
		s.mu.Unlock()
		if err := e.Checkpoint(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		if !e.active.Load() {
			return
		}
	}
	e.mu.Lock() // what the engine's goroutine left: for the failure's reader
	for _, r := range e.runs {
		t.Logf("run: ahead %d readEnd %v rangeDone %v finished %v cursor %v readLast %v upper %v windows %d bounds %v boundsLast %v ends %d cuts %d retries %d", len(r.ahead), r.readEnd, r.rangeDone, r.finished, r.cursor, r.readLast, r.rec.Upper, len(r.windows), r.bounds, r.boundsLast, len(r.ends), r.cuts, r.retries)
		for _, k := range r.reread {
			t.Logf("re-read key %v resolved %v inFlight %v maybe %v", k.key, k.resolvedAt, k.inFlight, k.maybe)
		}
	}
	e.mu.Unlock()
	t.Fatalf("runs not done: %+v", e.Progress())
}

// updateDuringRead makes the read of the chunk after key after stream an
// update of key while it reads (the change falls in its window).
func (db *fakeDB) updateDuringRead(after string, key int64) {
	db.duringRead = func(n int) {
		db.mu.Lock()
		a := db.reads[n].After
		db.mu.Unlock()
		if a != nil && a[0] == after {
			db.stream <- event{change: &source.Change{Table: shape, Op: source.OpUpdate, After: []any{key, "new"}}}
		}
	}
}

func keysOf(rows []source.Change) []int64 {
	var out []int64
	for _, r := range rows {
		if r.Op == source.OpRead {
			out = append(out, r.After[0].(int64))
		}
	}
	return out
}

// TestWindowDropsChangedKeys: a key changed between a chunk's watermarks
// is not emitted from the chunk (the stream's change is newer); every
// other key is emitted once, positioned after the high watermark's
// position, in key order.
func TestWindowDropsChangedKeys(t *testing.T) {
	db := newFakeDB(10)
	db.updateDuringRead("4", 6) // the second chunk (keys 5-8): key 6 changes meanwhile
	e, s, _ := start(t, &memState{}, db, 4)
	if err := e.Submit(t.Context(), Request{Table: "public.t"}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, e, s)
	rows := s.rows()
	if got, want := keysOf(rows), []int64{1, 2, 3, 4, 5, 7, 8, 9, 10}; !slices.Equal(got, want) {
		t.Fatalf("emitted keys %v, want %v", got, want)
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].Pos.Compare(rows[i-1].Pos) <= 0 {
			t.Fatalf("positions do not increase at %d", i)
		}
	}
	if len(s.kept) != 1 {
		t.Fatalf("the streamed change was not kept: %v", s.kept)
	}
}

// TestInconsistentChunkReadAgain: a read that missed a change the stream
// delivered before its low watermark is read again, and emitted once.
func TestInconsistentChunkReadAgain(t *testing.T) {
	db := newFakeDB(6)
	db.inconsistent = 1
	e, s, _ := start(t, &memState{}, db, 10)
	if err := e.Submit(t.Context(), Request{Table: "public.t"}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, e, s)
	if got := keysOf(s.rows()); !slices.Equal(got, []int64{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("emitted %v", got)
	}
	if len(db.reads) != 2 || db.reads[1].After != nil {
		t.Fatalf("reads %+v, want the first chunk twice", db.reads)
	}
}

// TestResumeFromDurable: after a restart the run goes on after the last
// chunk made durable (not the last one emitted), with the same upper bound.
func TestResumeFromDurable(t *testing.T) {
	st := &memState{}
	db := newFakeDB(10)
	hold := make(chan struct{})
	db.duringRead = func(n int) {
		db.mu.Lock()
		after := db.reads[n].After
		db.mu.Unlock()
		if after != nil && after[0] == "6" {
			<-hold // the third chunk (7-9) never finishes in the first session
		}
	}
	e, s, stop := start(t, st, db, 3)
	if err := e.Submit(t.Context(), Request{Table: "public.t"}); err != nil {
		t.Fatal(err)
	}
	for len(keysOf(s.rows())) < 6 {
		time.Sleep(5 * time.Millisecond)
	}
	// Only the first chunk's watermark is durable.
	first := s.rows()[2].Pos[:8]
	if err := e.Checkpoint(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	db.mu.Lock()
	db.rows[11] = "v11" // beyond the upper bound: the stream carries it
	db.mu.Unlock()
	close(hold)
	stop()

	db2 := newFakeDB(0)
	db2.rows = db.rows
	e2, s2, _ := start(t, st, db2, 3)
	waitDone(t, e2, s2)
	if got := keysOf(s2.rows()); !slices.Equal(got, []int64{4, 5, 6, 7, 8, 9, 10}) {
		t.Fatalf("the second session emitted %v, want 4..10", got)
	}
	for _, q := range db2.reads { // in any order when chunks are read at once
		if q.After == nil || q.Upper[0] != "10" {
			t.Fatalf("the second session read %+v, want chunks after 3 up to 10", q)
		}
	}
	if !slices.ContainsFunc(db2.reads, func(q ChunkQuery) bool { return q.After[0] == "3" }) {
		t.Fatalf("the second session did not go on after 3: %+v", db2.reads)
	}
}

// TestOldSessionWatermarksIgnored: after a restart, the watermarks the
// last session wrote (the stream re-sends what was not confirmed) are
// recognised and ignored — they emit nothing and make no chunk read again;
// the run resumes after its durable chunk and emits every row after it once.
func TestOldSessionWatermarksIgnored(t *testing.T) {
	st := &memState{}
	db := newFakeDB(10)
	hold := make(chan struct{})
	db.duringRead = func(n int) {
		if n == 2 {
			<-hold
		}
	}
	e, s, stop := start(t, st, db, 3)
	if err := e.Submit(t.Context(), Request{Table: "public.t"}); err != nil {
		t.Fatal(err)
	}
	for len(keysOf(s.rows())) < 6 {
		time.Sleep(5 * time.Millisecond)
	}
	if err := e.Checkpoint(t.Context(), s.rows()[2].Pos[:8]); err != nil {
		t.Fatal(err)
	}
	db.mu.Lock()
	old := slices.Clone(db.written)
	db.mu.Unlock()
	close(hold)
	stop()

	db2 := newFakeDB(0)
	db2.rows = db.rows
	var s2 *streamer
	var ready sync.WaitGroup
	ready.Add(1)
	db2.duringRead = func(n int) {
		if n != 0 {
			return
		}
		// The old watermarks arrive, and are handled, while the new
		// session's first chunk is being read.
		ready.Wait()
		s2.mu.Lock()
		want := s2.events + len(old)
		s2.mu.Unlock()
		for _, id := range old {
			db2.stream <- event{watermark: id}
		}
		for {
			s2.mu.Lock()
			handled := s2.events >= want
			s2.mu.Unlock()
			if handled {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	e2, s2, _ := start(t, st, db2, 3)
	ready.Done()
	waitDone(t, e2, s2)
	if got := keysOf(s2.rows()); !slices.Equal(got, []int64{4, 5, 6, 7, 8, 9, 10}) {
		t.Fatalf("the second session emitted %v, want 4..10 once each (old watermarks %v)", got, old)
	}
	if len(db2.reads) != 3 { // 4–6, 7–9, 10: none read again because of an old watermark
		t.Fatalf("the second session read %d chunks, want 3: %+v", len(db2.reads), db2.reads)
	}
}

// TestResetMarker: a replacing run emits one reset marker before its rows;
// after a restart before it was durable, the first reset watermark of that
// id the stream meets (here: the old one, re-sent) emits it again there.
func TestResetMarker(t *testing.T) {
	st := &memState{}
	db := newFakeDB(3)
	e, s, stop := start(t, st, db, 10)
	if err := e.Submit(t.Context(), Request{Table: "public.t", Replace: true}); err != nil {
		t.Fatal(err)
	}
	for len(s.rows()) < 4 {
		time.Sleep(5 * time.Millisecond)
	}
	rows := s.rows()
	if rows[0].Op != source.OpTruncate || rows[0].Reset == "" || rows[0].Table != shape {
		t.Fatalf("first emitted %+v, want a reset marker", rows[0])
	}
	stop() // nothing checkpointed

	e2 := New(Config{StateKey: "inc", ChunkRows: 10}, st, slog.New(slog.DiscardHandler))
	if err := e2.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := e2.Prepare(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	again := e2.Watermark("R:"+rows[0].Reset, rows[0].Pos)
	if len(again) != 1 || again[0].Pos.Compare(rows[0].Pos) != 0 {
		t.Fatalf("re-sent reset watermark emitted %+v", again)
	}
	if twice := e2.Watermark("R:"+rows[0].Reset, pos(999)); twice != nil {
		t.Fatalf("a second reset watermark emitted %+v", twice)
	}
	if old := e2.Watermark("H:"+fmt.Sprint(rows[1].Pos), pos(1000)); old != nil {
		t.Fatal("a watermark of the old session emitted rows")
	}
}

// TestUnchangedNeedsRow: during a replacing run, an update carrying an
// unchanged value is kept when its key was read already, dropped when a
// later chunk reads it, and dropped and read again when its chunk's window
// is open (the chunk drops the key too).
func TestUnchangedNeedsRow(t *testing.T) {
	db := newFakeDB(9)
	upd := func(k int64) *source.Change {
		return &source.Change{Table: shape, Op: source.OpUpdate, Before: []any{k, nil}, After: []any{k, schema.Unchanged}}
	}
	db.duringRead = func(n int) {
		switch n {
		case 1: // reading 4-6: 2 was read, 8 comes later, 5 is being read
			db.stream <- event{change: upd(2)}
			db.stream <- event{change: upd(8)}
			db.stream <- event{change: upd(5)}
		}
	}
	e, s, _ := start(t, &memState{}, db, 3)
	if err := e.Submit(t.Context(), Request{Table: "public.t", Replace: true}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, e, s)
	if len(s.kept) != 1 || s.kept[0].After[0] != int64(2) {
		t.Fatalf("kept %v, want only the update of key 2", s.kept)
	}
	got := keysOf(s.rows())
	if want := []int64{1, 2, 3, 4, 6, 7, 8, 9, 5}; !slices.Equal(got, want) {
		t.Fatalf("emitted %v, want %v (5 read again after the range, 8 once by its chunk)", got, want)
	}
	if q := db.reads[len(db.reads)-1]; len(q.Keys) != 1 || q.Keys[0][0] != "5" {
		t.Fatalf("last read %+v, want key 5", q)
	}
}

// TestReadAheadCancelledWithRetry: with two range chunks in flight, a
// chunk read again takes the one read after it along (its rows would
// leave a gap before them): every key is emitted once, in key order.
func TestReadAheadCancelledWithRetry(t *testing.T) {
	db := newFakeDB(9)
	db.badReads = map[int]bool{1: true} // keys 4-6, the first time
	e, s, _ := start(t, &memState{}, db, 3)
	if err := e.Submit(t.Context(), Request{Table: "public.t"}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, e, s)
	if got := keysOf(s.rows()); !slices.Equal(got, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("emitted %v", got)
	}
	var after []string
	for _, q := range db.reads {
		a := "-"
		if q.After != nil {
			a = q.After[0]
		}
		after = append(after, a)
	}
	// 1-3, 4-6 (inconsistent), 7-9 (read ahead, cancelled), 4-6, 7-9.
	if want := []string{"-", "3", "6", "3", "6"}; !slices.Equal(after, want) {
		t.Fatalf("reads after %v, want %v", after, want)
	}
	if tm := e.Timings(); tm.Refused != 2 || tm.Inconsistent != 1 || tm.Cut != 0 {
		t.Fatalf("timings count %d chunks refused (%d inconsistent, %d cut), want 2 (4-6 read again, 7-9 after it), 1 and 0: %+v",
			tm.Refused, tm.Inconsistent, tm.Cut, tm)
	}
}

// TestUnchangedBeforeTheBound: after the reset and before the upper bound
// is read, a key change's insert that takes unchanged values from its old
// key is dropped (the row is not in the table); its new key, above the
// bound (written after the bound's read), is read again at the end.
func TestUnchangedBeforeTheBound(t *testing.T) {
	db := newFakeDB(5)
	var s *streamer
	db.beforePlan = func() {
		db.beforePlan = nil
		s.mu.Lock()
		n := s.events
		s.mu.Unlock()
		db.stream <- event{change: &source.Change{Table: shape, Op: source.OpCreate,
			Before: []any{int64(2), nil}, After: []any{int64(9), schema.Unchanged}}}
		for { // the stream has it before the bound is read
			s.mu.Lock()
			done := s.events > n
			s.mu.Unlock()
			if done {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	db.afterPlan = func() { // the key change commits after the bound's read
		delete(db.rows, 2)
		db.rows[9] = "v9"
	}
	e, st, _ := start(t, &memState{}, db, 10)
	s = st
	if err := e.Submit(t.Context(), Request{Table: "public.t", Replace: true}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, e, s)
	if len(s.kept) != 0 {
		t.Fatalf("kept %v, want the insert dropped", s.kept)
	}
	if got := keysOf(s.rows()); !slices.Contains(got, 9) {
		t.Fatalf("emitted %v: key 9 was never read", got)
	}
}

// TestRequestBeforeLoad: a request that comes after a restart but before
// the source's first session has loaded the saved state (the admin API
// answers first) keeps the runs saved before the restart.
func TestRequestBeforeLoad(t *testing.T) {
	st := &memState{}
	e := New(Config{StateKey: "inc"}, st, slog.New(slog.DiscardHandler))
	if err := e.Submit(t.Context(), Request{Table: "public.a", Replace: true, Origin: "added"}); err != nil {
		t.Fatal(err)
	}
	restarted := New(Config{StateKey: "inc"}, st, slog.New(slog.DiscardHandler))
	if err := restarted.Submit(t.Context(), Request{Table: "public.b", Origin: "api"}); err != nil {
		t.Fatal(err)
	}
	if err := restarted.Submit(t.Context(), Request{Table: "public.a"}); err == nil {
		t.Error("a second run of public.a was accepted: the saved one was not seen")
	}
	if err := restarted.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	var tables []string
	for _, p := range restarted.Progress() {
		tables = append(tables, p.Table)
	}
	if !slices.Equal(tables, []string{"public.a", "public.b"}) {
		t.Errorf("runs after the restart: %v, want public.a (saved before it) and public.b", tables)
	}
}

// TestRestartReadsAgain: Restart mid-run ends the run and reads the table
// again from its first key (rows read before are stale after DDL that
// changed values without row changes); a replacing run restarts as a
// replacing one, its reset marker sent again. With no run, it queues one.
func TestRestartReadsAgain(t *testing.T) {
	for _, replace := range []bool{false, true} {
		t.Run(fmt.Sprintf("replace=%t", replace), func(t *testing.T) {
			db := newFakeDB(20)
			var e *Engine
			restarted := make(chan error, 1)
			db.duringRead = func(n int) {
				if n == 2 { // the third chunk: keys 1-8 emitted or in flight
					go func() { restarted <- e.Restart(context.Background(), Request{Table: "public.t", Origin: "test"}) }()
				}
			}
			e, s, _ := start(t, &memState{}, db, 4)
			if err := e.Submit(t.Context(), Request{Table: "public.t", Replace: replace}); err != nil {
				t.Fatal(err)
			}
			if err := <-restarted; err != nil {
				t.Fatal(err)
			}
			waitDone(t, e, s)
			rows := s.rows()
			count := map[int64]int{}
			for _, k := range keysOf(rows) {
				count[k]++
			}
			for k := int64(1); k <= 20; k++ {
				if count[k] == 0 {
					t.Errorf("key %d never emitted", k)
				}
			}
			db.mu.Lock()
			fromStart := 0
			for _, q := range db.reads {
				if q.After == nil {
					fromStart++
				}
			}
			db.mu.Unlock()
			if fromStart != 2 {
				t.Errorf("the table was read from its first key %d times, want 2 (once by each run)", fromStart)
			}
			resets := 0
			for _, r := range rows {
				if r.Op == source.OpTruncate && r.Reset != "" {
					resets++
				}
			}
			if want := map[bool]int{false: 0, true: 2}[replace]; resets != want {
				t.Errorf("%d reset markers, want %d", resets, want)
			}
		})
	}
	db := newFakeDB(3)
	e, s, _ := start(t, &memState{}, db, 10)
	if err := e.Restart(t.Context(), Request{Table: "public.t"}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, e, s)
	if got := keysOf(s.rows()); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Errorf("with no run: emitted %v", got)
	}
}

// failingState is a memState whose saves fail while fail is set.
type failingState struct {
	memState
	fail atomic.Bool
}

func (s *failingState) Save(ctx context.Context, k string, v []byte) error {
	if s.fail.Load() {
		return errors.New("test: the state cannot be saved")
	}
	return s.memState.Save(ctx, k, v)
}

// TestDoneSaidOnceSaved: a run's end is logged only once it is saved. It
// was logged before: a crash between the line and the save ran the end
// again after the restart, and the log said the snapshot was done twice
// (the crash suite's MariaDB snapshots configuration counted "finished 2
// times" for one start).
func TestDoneSaidOnceSaved(t *testing.T) {
	st := &failingState{}
	db := newFakeDB(10)
	var logs syncBuffer
	e, s, _ := startLogged(t, st, db, 4, slog.New(slog.NewTextHandler(&logs, nil)))
	if err := e.Submit(t.Context(), Request{Table: "public.t"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(keysOf(s.rows())) < 10; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("rows emitted: %v", keysOf(s.rows()))
		}
	}
	st.fail.Store(true)
	s.mu.Lock()
	p := pos(s.pos)
	s.mu.Unlock()
	var err error
	for deadline := time.Now().Add(10 * time.Second); err == nil && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		err = e.Checkpoint(t.Context(), p) // fails once the run ends (and its end is saved)
	}
	if err == nil {
		t.Fatal("the run's end was never saved")
	}
	if strings.Contains(logs.String(), "snapshot done") {
		t.Fatalf("the end was said though it was not saved:\n%s", logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestRunLastRowMarked: the last row a run emits is marked the last of its
// table (a sink commits a load's end at once on it), also when the
// window dropped the last key read; every other row is incremental.
func TestRunLastRowMarked(t *testing.T) {
	db := newFakeDB(10)
	db.updateDuringRead("8", 10) // the last chunk (keys 9-10): key 10 changes meanwhile
	e, s, _ := start(t, &memState{}, db, 4)
	if err := e.Submit(t.Context(), Request{Table: "public.t", Replace: true}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, e, s)
	var reads []source.Change
	for _, c := range s.rows() {
		if c.Op == source.OpRead {
			reads = append(reads, c)
		}
	}
	if got, want := keysOf(reads), []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(got, want) {
		t.Fatalf("emitted keys %v, want %v", got, want)
	}
	for i, c := range reads {
		want := source.PlaceIncremental
		if i == len(reads)-1 {
			want = source.PlaceLastInTable
		}
		if c.Place != want {
			t.Errorf("row %d (key %v) has place %d, want %d", i, c.After[0], c.Place, want)
		}
	}
}

// TestRereadSurvivesEarlySave: a restarted run's saved re-read set
// survives a save made before the run's table is described (another run
// queued, a pause). Such a save wrote the set empty: the keys — streamed
// changes dropped while their rows were not in the replaced table — were
// never read again, the run ended without them, and their next changes
// stopped the table (the crash suite's snapshots configuration, a column
// arrived as unchanged with no row for its key); without such a change
// the rows would have stayed out of the mirror.
func TestRereadSurvivesEarlySave(t *testing.T) {
	st := &memState{}
	rec := &record{ID: "r1", Request: Request{Table: "public.t", Replace: true, Origin: "test"}, Planned: true,
		Upper: Key{"20"}, Last: Key{"20"}, Rows: 18, Started: time.Now().UTC(),
		ResetID: "x", ResetDone: true, Reread: []Key{{"5"}, {"7"}}}
	b, err := json.Marshal(saved{Runs: []*record{rec}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Save(t.Context(), "inc", b); err != nil {
		t.Fatal(err)
	}
	// A process that saves before it describes the run's table.
	early := New(Config{StateKey: "inc", ChunkRows: 4}, st, slog.New(slog.DiscardHandler))
	if err := early.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if p := early.Progress(); len(p) != 1 || p[0].Reread != 2 {
		t.Errorf("progress before the table is described: %+v, want one run with 2 keys to read again", p)
	}
	if err := early.Pause(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := early.Resume(t.Context()); err != nil {
		t.Fatal(err)
	}
	var got saved
	raw, _ := st.Load(t.Context(), "inc")
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Runs) != 1 || len(got.Runs[0].Reread) != 2 {
		t.Fatalf("saved before the table was described: %s; want the run with its 2 keys to read again", raw)
	}
	// The next process reads them again before the run ends.
	db := newFakeDB(20)
	e, s, _ := start(t, st, db, 4)
	waitDone(t, e, s)
	keys := keysOf(s.rows())
	slices.Sort(keys)
	if !slices.Equal(keys, []int64{5, 7}) {
		t.Errorf("rows read after the restart: %v, want the keys to read again [5 7]", keys)
	}
}

// TestLoadedRereadKeyedAtDescribe: a saved key to read again, loaded
// before the table's description, is found by a streamed change of that
// key once the table is described (the id a change has), and only once.
func TestLoadedRereadKeyedAtDescribe(t *testing.T) {
	r := newRun(&record{ID: "r1", Request: Request{Table: "public.t", Replace: true}, Planned: true,
		Upper: Key{"20"}, Last: Key{"20"}, ResetID: "x", ResetDone: true, Reread: []Key{{"5"}}})
	tbl, err := newFakeDB(0).Describe(t.Context(), "public.t")
	if err != nil {
		t.Fatal(err)
	}
	r.describe(tbl)
	r.describe(tbl) // a reconnect describes it again
	id, ok := encodeKeyVals(shape, []any{int64(5)})
	if !ok {
		t.Fatal("cannot encode key 5")
	}
	if p, _ := r.pendingOrder(id, []any{int64(5)}); !p {
		t.Error("key 5, loaded to be read again, is not pending for a streamed change of it")
	}
	other, _ := encodeKeyVals(shape, []any{int64(6)})
	if p, _ := r.pendingOrder(other, []any{int64(6)}); p {
		t.Error("key 6 (read, not to be read again) is pending")
	}
	if len(r.reread) != 1 || r.reread[id] == nil {
		t.Errorf("re-read set %v, want key 5 under its change id once", r.reread)
	}
}

// TestPointWindowAddsNoRangeKeys: while only a point chunk's window is
// open, an update carrying an unchanged value of a key the range has not
// read yet is dropped and left to the range (its chunk reads it after the
// change), not put in the re-read set; a key the set holds (the point
// chunk's own) is read again after it, and so is one whose order the
// comparison could not tell (it may be read already); a range window's
// chunk may hold the key, which then waits to be settled. The order is asked
// once an update (a round trip each for a collated key).
func TestPointWindowAddsNoRangeKeys(t *testing.T) {
	e := New(Config{StateKey: "inc", ChunkRows: 4}, &memState{}, slog.New(slog.DiscardHandler))
	r := newRun(&record{ID: "r1", Request: Request{Table: "public.t", Replace: true}, Planned: true,
		Upper: Key{"20"}, Last: Key{"3"}, ResetID: "x", ResetDone: true})
	tbl, err := newFakeDB(0).Describe(t.Context(), "public.t")
	if err != nil {
		t.Fatal(err)
	}
	r.describe(tbl)
	upd := func(k int64) *source.Change {
		return &source.Change{Table: shape, Op: source.OpUpdate, Before: []any{k, nil}, After: []any{k, schema.Unchanged}}
	}
	id := func(k int64) string {
		s, _ := encodeKeyVals(shape, []any{k})
		return s
	}
	r.addReread(Key{"12"}, []any{int64(12)}, false)
	r.reread[id(12)].inFlight = true
	r.windows = []*chunk{{point: []string{id(12)}}}
	compare, compares := r.tbl.Compare, 0
	r.tbl.Compare = func(a, b []any) (int, error) { compares++; return compare(a, b) }
	if !e.dropLocked(r, upd(10)) {
		t.Error("an update of key 10 (not read yet) with an unchanged value was kept")
	}
	if compares != 2 { // after the last key read, up to the bound: a round trip each for a collated key
		t.Errorf("%d comparisons for an update of key 10, want 2", compares)
	}
	if r.reread[id(10)] != nil {
		t.Error("key 10, not read by the range yet, went into the re-read set while only a point chunk's window was open")
	}
	if !e.dropLocked(r, upd(12)) || !r.reread[id(12)].readded {
		t.Error("key 12, read by the open point chunk, is not to be read again after its change")
	}
	if e.dropLocked(r, upd(2)) {
		t.Error("an update of key 2 (read by the range) was dropped")
	}
	r.tbl.Compare = func(a, b []any) (int, error) { return 0, errors.New("no connection") }
	if !e.dropLocked(r, upd(13)) || r.reread[id(13)] == nil {
		t.Error("key 13, whose order the comparison could not tell, is not to be read again")
	}
	r.tbl.Compare = compare
	r.windows = append(r.windows, &chunk{}) // a range chunk's
	if !e.dropLocked(r, upd(11)) || r.reread[id(11)] == nil || !r.reread[id(11)].maybe {
		t.Errorf("key 11 changed in a range chunk's window: re-read entry %+v, want one to settle", r.reread[id(11)])
	}
}
