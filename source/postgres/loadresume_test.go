package postgres

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/source"
)

// stopAfter passes batches to an Emitter until left runs out (or, when
// rows is set, until the next batch would pass more than rows changes,
// each batch taking 2 ms); then half of the next batch reaches it and the
// batch fails, as a crash mid-append leaves it.
type stopAfter struct {
	source.Emitter
	mu   sync.Mutex
	left int
	rows int
}

func (s *stopAfter) Emit(ctx context.Context, batch []source.Change) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rows > 0 && len(batch) <= s.rows {
		s.rows -= len(batch)
		// Longer than the test's StatusInterval: the load saves its
		// progress after every chunk, however fast the machine.
		time.Sleep(2 * time.Millisecond)
		return s.Emitter.Emit(ctx, batch)
	}
	s.rows = 0 // over the rows: this batch fails (left is 0 then)
	if s.left--; s.left >= 0 {
		return s.Emitter.Emit(ctx, batch)
	}
	if err := s.Emitter.Emit(ctx, batch[:len(batch)/2]); err != nil {
		return err
	}
	return errPlannedFailure
}

// TestLoadResumedIncrementally: the COPY initial load stops part-way, with
// one table wholly in the log and the other partly. Before it resumes,
// rows of the chunks not loaded get an update that leaves their TOASTed
// column unchanged, and two of them are then deleted; the stream replays
// those updates from the slot's consistent point. The resumed load must
// never leave the sink an unchanged value without a row (a fresh snapshot
// read before the stream did: it no longer held the deleted rows), so the
// partly loaded table goes on by an incremental snapshot after its durable
// chunks — itself stopped once mid-way — with no reset: no key the load
// made durable is read again, and the wholly loaded table is not read
// again at all. Both mirrors end equal to their tables.
func TestLoadResumedIncrementally(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE done (id int PRIMARY KEY, v text, big text);
		INSERT INTO done SELECT g, 'd' || g, 'x' FROM generate_series(1, 500) g;
		`+incrementalTable+`; ANALYZE done; ANALYZE hot`)
	m := newMirror(4)
	opts := func(c *Config) {
		c.SnapshotChunkRows, c.SnapshotWorkers, c.BatchMax, c.StatusInterval = 500, 2, 100, time.Millisecond
		c.Incremental.LoadResets, c.Incremental.ChunkRows = true, 200
	}
	run := func(left, rows int) {
		t.Helper()
		cfg := e.config(t, []string{"done", "hot"}, true)
		opts(&cfg)
		if err := New(cfg, e.state, discard).Run(t.Context(), &stopAfter{Emitter: m, left: left, rows: rows}); !errors.Is(err, errPlannedFailure) {
			t.Fatalf("the reader did not stop as planned: %v", err)
		}
	}
	// Stopped inside hot's third chunk of 500: done's 500 rows and hot's
	// first two chunks (bar the batch the load holds back) have passed, and
	// progress is saved after each chunk (the batches are slower than
	// StatusInterval), so at least done and hot's first chunk are durable.
	// Before, 15 batches at full speed: on a fast machine no chunk took the
	// 1 ms after which progress is saved, and none of hot was (CI).
	run(0, 1800)
	var st sourceState
	if _, err := loadJSON(t.Context(), e.state, "postgres/"+e.names.Slot, &st); err != nil || st.Load == nil || st.Load.Done < 2 || st.Load.Done >= 7 {
		t.Fatalf("the first stop is not in the middle of hot's load, after a chunk of it: %+v %v", st.Load, err)
	}
	var plan loadPlan
	if _, err := loadJSON(t.Context(), e.state, "postgres/"+e.names.Slot+"/load-plan", &plan); err != nil || len(plan.Tables) != 2 ||
		plan.Tables[1].Table != "public.hot" || len(plan.Tables[0].Bounds) != 0 || len(plan.Tables[1].Bounds) < st.Load.Done-1 {
		t.Fatalf("load plan %+v (%v): want done in one chunk, then hot", plan, err)
	}
	durableBelow, err := strconv.Atoi(plan.Tables[1].Bounds[st.Load.Done-2][0]) // hot's keys below it are in the log
	if err != nil {
		t.Fatal(err)
	}
	e.exec(t, `UPDATE hot SET v = 'kept big' WHERE id BETWEEN 2980 AND 2999`)
	e.exec(t, `DELETE FROM hot WHERE id IN (2990, 2991)`)
	e.exec(t, `UPDATE done SET v = 'streamed' WHERE id = 7`)

	readsBefore := m.reads
	run(6, 0) // stops inside hot's incremental snapshot
	if m.resets["public.hot"] != 1 {
		t.Fatalf("public.hot has %d reset markers after the second stop, want the load's alone", m.resets["public.hot"])
	}

	_, r := e.startReader(t, []string{"done", "hot"}, true, m, opts)
	e.exec(t, `UPDATE hot SET v = 'after' WHERE id BETWEEN 10 AND 20`)
	e.exec(t, `INSERT INTO hot VALUES (-1, 'end', NULL)`)
	waitSettled(t, r, m, "public.hot", -1)
	compareMirror(t, m, e.conn, "hot")
	compareMirror(t, m, e.conn, "done")
	if m.resets["public.done"] != 1 || m.resets["public.hot"] != 1 {
		t.Errorf("reset markers %v: public.done and public.hot must keep their load's", m.resets)
	}
	if p := r.Snapshots().Progress(); len(p) != 1 || p[0].Table != "public.hot" || p[0].Origin != "load-resumed" || p[0].Replace {
		t.Errorf("snapshots %+v, want one snapshot of public.hot going on after the load", p)
	}
	// Read by the snapshot: none of the keys the load made durable, each
	// of the others once, but for what the second stop left in flight.
	again, read := 0, 0
	for k, n := range m.incReads["public.hot"] {
		id, err := strconv.Atoi(k)
		if err != nil {
			t.Fatal(err)
		}
		if id < durableBelow {
			t.Errorf("hot's key %d, durable in the load, was read %d times again: %v", id, n, m.history[k])
		}
		read++
		again += n - 1
	}
	if n := len(m.incReads["public.done"]); n != 0 {
		t.Errorf("%d keys of done, wholly loaded, were read again", n)
	}
	if limit := 4 * 200; again > limit { // Ahead chunks of 200 in flight, and the one being emitted
		t.Errorf("%d rows of hot were read twice by the snapshot; want at most %d", again, limit)
	}
	t.Logf("hot: keys below %d loaded once; %d keys after them read by the snapshot, %d of them again after its stop; %d rows read before the resumption, %d in all",
		durableBelow, read, again, readsBefore, m.reads)
}
