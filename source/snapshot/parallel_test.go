package snapshot

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// parallelReads makes newFakeDB's tables run as Parallel databases
// (TestParallelEngine).
var parallelReads bool

// parallelDB is a fakeDB read by several chunks at once.
type parallelDB struct{ *fakeDB }

var _ Parallel = (*parallelDB)(nil)

// Bounds returns the exact ends, or with rough set ends 1 to 3·Limit rows
// apart, and sometimes none after one (as a sample may place them: some
// chunks hold more rows than their Limit and are cut), at most 8 a read.
func (p *parallelDB) Bounds(_ context.Context, _ string, _ *Table, q ChunkQuery, want int) ([]Key, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	parse := func(k Key) int64 { v, _ := strconv.ParseInt(k[0], 10, 64); return v }
	want = min(want, 8)
	p.boundReads++
	n, next := 0, q.Limit
	var out []Key
	for _, k := range p.keysLocked() {
		if q.After != nil && k <= parse(q.After) || k > parse(q.Upper) {
			continue
		}
		if n++; n == next {
			if out = append(out, Key{strconv.FormatInt(k, 10)}); len(out) == want {
				return out, false, nil
			}
			step := q.Limit
			if p.rough != nil {
				if p.rough.IntN(8) == 0 {
					return out, true, nil // the sample saw no more: the rest is one chunk, cut at its Limit
				}
				step = 1 + p.rough.IntN(3*q.Limit)
			}
			next += step
		}
	}
	return out, true, nil
}

func (p *parallelDB) Reader(context.Context) (ChunkReader, error) { return fakeReader{p.fakeDB}, nil }

type fakeReader struct{ *fakeDB }

func (fakeReader) Close() {}

// TestParallelEngine runs the engine's scenarios with several range
// chunks read at once (their windows open together).
func TestParallelEngine(t *testing.T) {
	parallelReads = true
	defer func() { parallelReads = false }()
	for name, fn := range map[string]func(*testing.T){
		"WindowDropsChangedKeys":     TestWindowDropsChangedKeys,
		"InconsistentChunkReadAgain": TestInconsistentChunkReadAgain,
		"ResumeFromDurable":          TestResumeFromDurable,
		"ResetMarker":                TestResetMarker,
		"UnchangedBeforeTheBound":    TestUnchangedBeforeTheBound,
	} {
		t.Run(name, fn)
	}
}

// TestParallelHammer: writers update, delete and insert keys (inside and
// beyond the upper bound) and change keys while a replacing run reads the
// table three chunks at a time, their windows overlapping, some reads
// failing the consistency check: the table rebuilt from the stream (the
// reset marker empties it, then every chunk row and change in stream
// order) equals the database's.
func TestParallelHammer(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) { hammer(t, seed, false) })
	}
}

// TestParallelHammerRoughEnds is TestParallelHammer with chunks' ends
// placed as a sample places them: chunks of 1 to 3 times their rows, some
// cut at their Limit (the chunks after them refused), and sometimes no end
// at all for the rest of the range.
func TestParallelHammerRoughEnds(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) { hammer(t, seed, true) })
	}
}

func hammer(t *testing.T, seed uint64, rough bool) {
	db := newFakeDB(400)
	db.parallel = true
	if rough {
		db.rough = rand.New(rand.NewPCG(seed, 7))
	}
	db.badReads = map[int]bool{3: true, 11: true}
	db.duringRead = func(int) { time.Sleep(time.Millisecond) } // reads overlap; writers write meanwhile
	var mu sync.Mutex                                          // the writers' random source
	rng := rand.New(rand.NewPCG(seed, seed))
	write := func() {
		mu.Lock()
		k, op := int64(rng.IntN(460)+1), rng.IntN(4)
		to := int64(rng.IntN(460) + 1)
		mu.Unlock()
		db.mu.Lock()
		defer db.mu.Unlock()
		_, has := db.rows[k]
		switch {
		case !has: // insert (beyond the bound too)
			db.rows[k] = "i" + strconv.FormatInt(k, 10)
			db.stream <- event{change: &source.Change{Table: shape, Op: source.OpCreate, After: []any{k, db.rows[k]}}}
		case op == 0:
			delete(db.rows, k)
			db.stream <- event{change: &source.Change{Table: shape, Op: source.OpDelete, Before: []any{k, nil}}}
		case op == 1: // a key change: k becomes to; half of them carry the value as unchanged
			if _, taken := db.rows[to]; taken {
				return
			}
			v := db.rows[k]
			delete(db.rows, k)
			db.rows[to] = v
			var after any = v
			if to%2 == 0 {
				after = schema.Unchanged
			}
			db.stream <- event{change: &source.Change{Table: shape, Op: source.OpDelete, Before: []any{k, nil}, KeyChange: true}}
			db.stream <- event{change: &source.Change{Table: shape, Op: source.OpCreate, Before: []any{k, nil}, After: []any{to, after}}}
		case op == 2: // an update that leaves the value as it was (unchanged, like a TOASTed one)
			db.stream <- event{change: &source.Change{Table: shape, Op: source.OpUpdate, Before: []any{k, nil}, After: []any{k, schema.Unchanged}}}
		default:
			db.rows[k] += "+"
			db.stream <- event{change: &source.Change{Table: shape, Op: source.OpUpdate, After: []any{k, db.rows[k]}}}
		}
	}
	e, s, _ := start(t, &memState{}, db, 16)
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				write()
				time.Sleep(20 * time.Microsecond)
			}
		}()
	}
	if err := e.Submit(t.Context(), Request{Table: "public.t", Replace: true}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, e, s)
	stop()
	wg.Wait()
	if err := db.WriteWatermark(t.Context(), "end"); err != nil { // the stream has everything once it has this
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		last := s.lastWatermark
		s.mu.Unlock()
		if last == "end" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream did not reach the end")
		}
	}
	s.mu.Lock()
	all := append([]source.Change(nil), s.all...)
	s.mu.Unlock()
	// As the sink does: an unchanged value comes from the key's row (the
	// old key's, for a key change's insert); no row is a failure.
	mirror, reset, moved := map[int64]string{}, false, map[int64]string{}
	for _, c := range all {
		switch {
		case c.Reset != "":
			reset = true
			clear(mirror)
		case c.Op == source.OpDelete:
			k := c.Before[0].(int64)
			if v, ok := mirror[k]; ok && c.KeyChange {
				moved[k] = v
			}
			delete(mirror, k)
		case schema.IsUnchanged(c.After[1]):
			from := c.After[0].(int64)
			old := mirror
			if c.Op == source.OpCreate {
				from, old = c.Before[0].(int64), moved
			}
			v, ok := old[from]
			if !ok && reset {
				t.Fatalf("%s of key %d carries an unchanged value, and the mirror has no row %d to take it from", c.Op, c.After[0], from)
			}
			mirror[c.After[0].(int64)] = v
		default:
			mirror[c.After[0].(int64)] = c.After[1].(string)
		}
	}
	if !reset {
		t.Fatal("no reset marker was emitted")
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if n := maxOpen(db.written); n < 2 {
		t.Errorf("at most %d windows were open at once, want several", n)
	}
	if db.maxRead > 2*16 {
		t.Errorf("a range chunk read %d rows, want at most %d (ChunkCap times ChunkRows)", db.maxRead, 2*16)
	}
	for k, v := range db.rows {
		if got, ok := mirror[k]; !ok || got != v {
			t.Errorf("key %d: mirror has %q (present %v), the database %q", k, got, ok, v)
		}
	}
	for k, v := range mirror {
		if _, ok := db.rows[k]; !ok {
			t.Errorf("key %d: mirror has %q, the database has no row (a deleted row resurrected)", k, v)
		}
	}
}

// maxOpen is the most chunk windows open at once in a watermark sequence.
func maxOpen(written []string) int {
	open, most := 0, 0
	for _, id := range written {
		switch id[:2] {
		case kindLow + ":":
			open++
			most = max(most, open)
		case kindHigh + ":":
			open--
		}
	}
	return most
}

// TestRoughEndsCutChunks: chunks whose ends hold up to three times their
// rows are read at most twice their rows at a time (cut there, the range
// goes on after the cut's last key); every row is emitted once, in key
// order; a range that goes on after a cut or a chunk read again keeps the
// ends it read (fewer Bounds reads than restarts).
func TestRoughEndsCutChunks(t *testing.T) {
	db := newFakeDB(2000)
	db.parallel = true
	db.rough = rand.New(rand.NewPCG(5, 5))
	db.badReads = map[int]bool{4: true, 9: true, 30: true}
	e, s, _ := start(t, &memState{}, db, 16)
	if err := e.Submit(t.Context(), Request{Table: "public.t"}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, e, s)
	s.mu.Lock()
	rows := append([]source.Change(nil), s.emitted...)
	s.mu.Unlock()
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.maxRead > 2*16 {
		t.Errorf("a range chunk read %d rows, want at most %d", db.maxRead, 2*16)
	}
	for _, q := range db.reads {
		if q.To != nil && q.Limit != 2*16 {
			t.Fatalf("a range chunk read with Limit %d, want %d", q.Limit, 2*16)
		}
	}
	if db.cutReads == 0 {
		t.Error("no range chunk was cut at its Limit")
	}
	// A cut read is counted when it is emitted (a cut read that is refused
	// is not a cut); the refused after a cut are not inconsistent.
	if tm := e.Timings(); tm.Cut == 0 || tm.Cut > int64(db.cutReads) || tm.Inconsistent > 3 || tm.Refused < tm.Cut+tm.Inconsistent {
		t.Errorf("timings: %d cut (of %d cut reads), %d inconsistent (of 3 bad reads), %d refused", tm.Cut, db.cutReads, tm.Inconsistent, tm.Refused)
	}
	seen := map[int64]bool{}
	var prev int64
	for _, c := range rows {
		k := c.After[0].(int64)
		if seen[k] {
			t.Fatalf("key %d emitted twice", k)
		}
		if k < prev {
			t.Fatalf("key %d emitted after %d", k, prev)
		}
		seen[k], prev = true, k
	}
	if len(seen) != 2000 {
		t.Errorf("%d keys emitted, want 2000", len(seen))
	}
	t.Logf("%d reads (%d cut), %d Bounds reads, longest read %d rows", len(db.reads), db.cutReads, db.boundReads, db.maxRead)
}

// TestMoveCursorKeepsEnds: a range that goes on after a chunk read again
// (the cursor at an end) or after a cut (the cursor before the cut
// chunk's To) keeps the ends after the cursor; a cursor it cannot place
// among them drops them.
func TestMoveCursorKeepsEnds(t *testing.T) {
	ends := []Key{{"10"}, {"20"}, {"30"}, {"40"}}
	for _, c := range []struct {
		name         string
		after, last  Key
		cutTo        Key
		want         []Key
		wantBoundsOK bool
	}{
		{"at their read's start", Key{"5"}, Key{"5"}, nil, ends, true},
		{"none read yet", nil, nil, nil, ends, true},
		{"at an end", Key{"5"}, Key{"20"}, nil, ends[2:], true},
		{"at the last end", Key{"5"}, Key{"40"}, nil, []Key{}, true},
		{"cut before an end", Key{"5"}, Key{"27"}, Key{"30"}, ends[2:], true},
		{"cut before the bound", Key{"5"}, Key{"47"}, Key{"50"}, nil, false},
		{"elsewhere", Key{"5"}, Key{"27"}, nil, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &run{rec: &record{}, readLast: c.last, ends: ends, endsAfter: c.after, endsLast: true, cutTo: c.cutTo}
			r.moveCursor()
			if len(r.bounds) != len(c.want) || (r.bounds == nil) != (c.want == nil) {
				t.Fatalf("bounds %v, want %v", r.bounds, c.want)
			}
			for i := range c.want {
				if !keysEqual(r.bounds[i], c.want[i]) {
					t.Fatalf("bounds %v, want %v", r.bounds, c.want)
				}
			}
			if r.boundsLast != c.wantBoundsOK || (r.ends == nil) == c.wantBoundsOK {
				t.Errorf("boundsLast %v, ends kept %v; want %v", r.boundsLast, r.ends != nil, c.wantBoundsOK)
			}
			if r.cutTo != nil {
				t.Error("cutTo is kept after the cursor moved")
			}
		})
	}
}

// countingDB is a parallelDB that counts the readers open at once. Its
// readers return from writing a high watermark only once the stream has met
// it and the engine has started the next chunk, or 20 ms later: the order
// in which the pool, giving a reader back after that return, opened one
// reader more than chunks are read at once.
type countingDB struct {
	*parallelDB
	mu         sync.Mutex
	open, most int
	opened     chan struct{} // a reader was opened
}

func (c *countingDB) Reader(context.Context) (ChunkReader, error) {
	c.mu.Lock()
	c.open++
	c.most = max(c.most, c.open)
	c.mu.Unlock()
	select {
	case c.opened <- struct{}{}:
	default:
	}
	return &lateReader{fakeReader{c.fakeDB}, c}, nil
}

type lateReader struct {
	fakeReader
	c *countingDB
}

func (r *lateReader) WriteWatermark(ctx context.Context, id string) error {
	if err := r.fakeReader.WriteWatermark(ctx, id); err != nil {
		return err
	}
	if strings.HasPrefix(id, kindHigh+":") {
		select {
		case <-r.c.opened:
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func (r *lateReader) Close() {
	r.c.mu.Lock()
	r.c.open--
	r.c.mu.Unlock()
}

// TestReadersBounded: however late a reader goes back to the pool, no more
// readers are open than chunks are read at once (Ahead), and every key is
// emitted once.
func TestReadersBounded(t *testing.T) {
	db := newFakeDB(200)
	c := &countingDB{parallelDB: &parallelDB{db}, opened: make(chan struct{}, 1)}
	db.runAs = c
	e, s, _ := start(t, &memState{}, db, 10)
	if err := e.Submit(t.Context(), Request{Table: "public.t"}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, e, s)
	want := make([]int64, 200)
	for i := range want {
		want[i] = int64(i + 1)
	}
	if got := keysOf(s.rows()); !slices.Equal(got, want) {
		t.Fatalf("emitted keys %v, want 1..200 once each", got)
	}
	c.mu.Lock()
	most := c.most
	c.mu.Unlock()
	if ahead := e.cfg.Ahead; most > ahead || most < 2 {
		t.Fatalf("%d readers open at once; want between 2 and %d (Ahead)", most, ahead)
	}
}
