package snapshot

import (
	"context"
	"math/rand/v2"
	"strconv"
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

func (p *parallelDB) Bounds(_ context.Context, _ string, _ *Table, q ChunkQuery, want int) ([]Key, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	parse := func(k Key) int64 { v, _ := strconv.ParseInt(k[0], 10, 64); return v }
	n := 0
	var out []Key
	for _, k := range p.keysLocked() {
		if q.After != nil && k <= parse(q.After) || k > parse(q.Upper) {
			continue
		}
		if n++; n%q.Limit == 0 {
			if out = append(out, Key{strconv.FormatInt(k, 10)}); len(out) == want {
				break
			}
		}
	}
	return out, nil
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
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) { hammer(t, seed) })
	}
}

func hammer(t *testing.T, seed uint64) {
	db := newFakeDB(400)
	db.parallel = true
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
