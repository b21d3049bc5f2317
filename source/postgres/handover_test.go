package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/source"
)

// trackMirror is a mirror behind an Emitter that tracks its pipeline
// (source.Tracker): a batch handed over becomes durable (applied to the
// mirror) later, on the pipeline's goroutine, after delay and once gate
// is open. Before a batch becomes durable it checks what exactly-once
// needs: no change of it has a position the reader already confirmed.
type trackMirror struct {
	*mirror
	r     atomic.Pointer[Reader]
	pipe  source.Pipeline
	delay time.Duration
	gate  chan struct{} // nil: open; else appends wait until it is closed
	fail  uint64        // the batch whose append fails (0: none)

	mu          sync.Mutex
	violations  []string
	durableLSN  uint64 // the newest commit LSN durable
	submitted   int    // changes handed over
	snapshotted int    // of them, rows of a snapshot
	inFlightMax uint64 // most batches handed over and not durable at once
}

var _ source.Tracker = (*trackMirror)(nil)

func newTrackMirror() *trackMirror {
	return &trackMirror{mirror: newMirror(4), pipe: source.Pipeline{Depth: 4}}
}

func (m *trackMirror) SubmitTracked(ctx context.Context, batch []source.Change) (uint64, error) {
	copies := make([]source.Change, len(batch)) // the source reuses batch
	snap := 0
	for i, c := range batch {
		c.Before, c.After = ownRow(c.Before), ownRow(c.After)
		copies[i] = c
		if c.Snapshot {
			snap++
		}
	}
	n := m.pipe.Queued() + 1
	err := m.pipe.Go(ctx, func() error {
		if m.gate != nil {
			select {
			case <-m.gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		time.Sleep(m.delay)
		if n == m.fail {
			return errPlannedFailure
		}
		m.check(copies)
		if err := m.mirror.Emit(ctx, copies); err != nil {
			return err
		}
		m.mu.Lock()
		for _, c := range copies {
			m.durableLSN = max(m.durableLSN, c.LSN)
		}
		m.mu.Unlock()
		return nil
	})
	if err != nil {
		return 0, err
	}
	done, _ := m.pipe.Done()
	m.mu.Lock()
	m.submitted += len(batch)
	m.snapshotted += snap
	m.inFlightMax = max(m.inFlightMax, n-done)
	m.mu.Unlock()
	return n, nil
}

func (m *trackMirror) Submit(ctx context.Context, batch []source.Change) error {
	_, err := m.SubmitTracked(ctx, batch)
	return err
}

func (m *trackMirror) Sync(ctx context.Context) error { return m.pipe.Wait(ctx) }

func (m *trackMirror) Emit(ctx context.Context, batch []source.Change) error {
	if err := m.Submit(ctx, batch); err != nil {
		return err
	}
	return m.Sync(ctx)
}

func (m *trackMirror) Durable() (uint64, error) { return m.pipe.Done() }

// check records every change of a batch about to become durable whose
// transaction the reader already confirmed.
func (m *trackMirror) check(batch []source.Change) {
	r := m.r.Load()
	if r == nil {
		return
	}
	flushed := r.Stats().Flushed.Load()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range batch {
		if c.LSN != 0 && c.LSN <= flushed && len(m.violations) < 10 {
			m.violations = append(m.violations, fmt.Sprintf("%X confirmed while a change of %s at %X was not durable", flushed, c.Table.QualifiedName(), c.LSN))
		}
	}
}

func (m *trackMirror) report(t *testing.T) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.violations {
		t.Error(v)
	}
}

// waitSubmitted waits until n changes were handed over.
func (m *trackMirror) waitSubmitted(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		m.mu.Lock()
		submitted := m.submitted
		m.mu.Unlock()
		if submitted == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d changes handed over, want %d", submitted, n)
		}
	}
}

// slotConfirmed is the slot's confirmed_flush_lsn (0 before it has one).
func (e *env) slotConfirmed(t *testing.T) uint64 {
	t.Helper()
	var flush *string
	if err := e.conn.QueryRow(t.Context(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", e.names.Slot).Scan(&flush); err != nil || flush == nil {
		return 0
	}
	lsn, err := parseLSN(*flush)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

// TestStreamConfirmsOnlyDurable: with an Emitter that tracks its pipeline
// the stream hands batches over without waiting for them; while no batch
// becomes durable (the log's appends never finish) neither the stream's
// flushed position, nor the saved state, nor the slot moves — not at a
// commit with nothing left in the batch, not at a non-transactional
// message (the commit shortcut) — and once the appends finish, a quiet
// stream confirms everything without another message.
func TestStreamConfirmsOnlyDurable(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	m := newTrackMirror()
	m.gate = make(chan struct{})
	_, r := e.startReader(t, []string{"t"}, false, m, func(c *Config) {
		c.StatusInterval = 10 * time.Millisecond // confirm often: a premature confirm shows
		c.trackStream = true
		c.HeartbeatInterval = -1
	})
	m.r.Store(r)
	start := r.Stats().Flushed.Load()
	for i := range 3 {
		e.exec(t, "INSERT INTO t VALUES ($1, 'x')", i)
	}
	// The inserts handed over first: the message then finds the batch
	// empty and a batch in flight.
	m.waitSubmitted(t, 3)
	var msg string
	if err := e.conn.QueryRow(t.Context(), "SELECT pg_logical_emit_message(false, 'test', 'x')::text").Scan(&msg); err != nil {
		t.Fatal(err)
	}
	msgLSN, err := parseLSN(msg)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); r.Stats().Received.Load() < msgLSN; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stream did not receive the message")
		}
	}
	time.Sleep(200 * time.Millisecond) // twenty statuses
	m.mu.Lock()
	submitted := m.submitted
	m.mu.Unlock()
	if submitted != 3 {
		t.Fatalf("%d changes handed over, want the 3 inserts (in batches not yet durable)", submitted)
	}
	if got := r.Stats().Flushed.Load(); got != start {
		t.Errorf("flushed position %X moved from %X while no batch was durable", got, start)
	}
	if got := e.slotConfirmed(t); got > start {
		t.Errorf("slot confirmed %X, past %X, while no batch was durable", got, start)
	}
	var st sourceState
	if _, err := loadJSON(t.Context(), e.state, r.stateKey(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Confirmed > start {
		t.Errorf("state saved confirmed %X, past %X, while no batch was durable", st.Confirmed, start)
	}

	close(m.gate)
	for deadline := time.Now().Add(10 * time.Second); r.Stats().Flushed.Load() < msgLSN || e.slotConfirmed(t) < msgLSN; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("flushed %X, slot %X: the message's %X not confirmed after the batches became durable",
				r.Stats().Flushed.Load(), e.slotConfirmed(t), msgLSN)
		}
	}
	m.report(t)
	if got := len(m.state("public.t")); got != 3 {
		t.Errorf("mirror holds %d rows, want 3", got)
	}
}

// TestStreamHandsOverWhileDurable: under a stream of inserts into slow
// appends, the stream hands the next batch over while earlier ones are
// not durable yet (decoding and the log's sync overlap), and the slot's
// confirmed position never passes the newest durable commit.
func TestStreamHandsOverWhileDurable(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE t (id int PRIMARY KEY, v int)`)
	m := newTrackMirror()
	m.delay = 20 * time.Millisecond
	_, r := e.startReader(t, []string{"t"}, false, m, func(c *Config) { c.StatusInterval, c.trackStream = 10*time.Millisecond, true })
	m.r.Store(r)
	start := e.slotConfirmed(t)
	writer, err := pgx.Connect(t.Context(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(context.Background())
	ctx, cancel := context.WithCancel(t.Context())
	writes := make(chan error, 1)
	go func() {
		var err error
		for i := 0; ctx.Err() == nil; i++ {
			if _, err = writer.Exec(ctx, `INSERT INTO t VALUES ($1, $1)`, i); err != nil && ctx.Err() == nil {
				break
			}
			err = nil
		}
		writes <- err
	}()
	var checks, advanced int
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		lsn := e.slotConfirmed(t) // first: the durable bound only grows after it
		m.mu.Lock()
		durable := m.durableLSN
		m.mu.Unlock()
		if lsn > max(durable, start) {
			t.Fatalf("slot confirmed %X, ahead of the newest durable commit %X", lsn, durable)
		}
		if lsn > start {
			advanced++
		}
		checks++
	}
	cancel()
	if err := <-writes; err != nil {
		t.Fatal(err)
	}
	m.report(t)
	m.mu.Lock()
	inFlight := m.inFlightMax
	m.mu.Unlock()
	if checks < 50 || advanced == 0 {
		t.Fatalf("%d checks, %d with the slot advanced: the invariant was not exercised", checks, advanced)
	}
	if inFlight < 2 {
		t.Errorf("at most %d batch in flight: the stream waited for each batch to be durable", inFlight)
	}
}

// TestStreamStopsAtFailedAppend: a batch whose append fails after the
// stream handed it over stops the stream with that error, and nothing
// past the failed batch is confirmed.
func TestStreamStopsAtFailedAppend(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE t (id int PRIMARY KEY, v int)`)
	m := newTrackMirror()
	m.fail = 1
	stop, r := e.startReader(t, []string{"t"}, false, m, func(c *Config) { c.StatusInterval, c.trackStream = 10*time.Millisecond, true })
	m.r.Store(r)
	start := r.Stats().Flushed.Load()
	e.exec(t, "INSERT INTO t VALUES (1, 1)")
	// The reader must end by itself; stopping it as soon as the stream
	// stopped raced its return of the error (a cancelled Run returns nil).
	select {
	case <-e.returned:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream went on after a failed append")
	}
	if err := stop(); !errors.Is(err, errPlannedFailure) {
		t.Fatalf("reader stopped with %v, want the append's error", err)
	}
	if got := r.Stats().Flushed.Load(); got != start {
		t.Errorf("flushed position moved from %X to %X past a failed batch", start, got)
	}
	if got := e.slotConfirmed(t); got > start {
		t.Errorf("slot confirmed %X, past %X, after a failed batch", got, start)
	}
}

// TestIncrementalTracked: a replacing snapshot under writes into an
// Emitter that tracks its pipeline: the chunks and the stream's batches
// are handed over without waiting, nothing is confirmed before it is
// durable, and the mirror ends equal to the table.
func TestIncrementalTracked(t *testing.T) {
	t.Parallel()
	e := setup(t, incrementalTable)
	m := newTrackMirror()
	m.delay = time.Millisecond
	_, r := e.startReader(t, []string{"hot"}, false, m, func(c *Config) {
		c.Incremental.ChunkRows = 100
		c.StatusInterval = 10 * time.Millisecond
	})
	m.r.Store(r)
	replaceUnderWrites(t, e, r, m.mirror)
	m.report(t)
	m.mu.Lock()
	snap := m.snapshotted
	m.mu.Unlock()
	if snap < 2000 {
		t.Errorf("%d snapshot rows handed over, want most of the 3000 rows read", snap)
	}
	compareMirror(t, m.mirror, e.conn, "hot")
}

// TestReconnectWaitsForBatchesInFlight: a session that ends (its
// walsender killed) with a batch in flight leaves it to the next; that
// session must not confirm a position after it — here a non-transactional
// message's — before it is durable.
func TestReconnectWaitsForBatchesInFlight(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE t (id int PRIMARY KEY, v int)`)
	m := newTrackMirror()
	m.gate = make(chan struct{})
	_, r := e.startReader(t, []string{"t"}, false, m, func(c *Config) {
		c.StatusInterval = 10 * time.Millisecond
		c.HeartbeatInterval = -1
		c.trackStream = true
	})
	m.r.Store(r)
	start := r.Stats().Flushed.Load()
	e.exec(t, "INSERT INTO t VALUES (1, 1)")
	m.waitSubmitted(t, 1)
	e.exec(t, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.names.Slot)
	for deadline := time.Now().Add(20 * time.Second); r.Stats().Reconnects.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the session did not end")
		}
	}
	var msg string
	if err := e.conn.QueryRow(t.Context(), "SELECT pg_logical_emit_message(false, 'test', 'x')::text").Scan(&msg); err != nil {
		t.Fatal(err)
	}
	after, err := parseLSN(msg)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the reconnect (ReconnectMin 20 ms) and many statuses
	if got := r.Stats().Flushed.Load(); got != start {
		t.Errorf("flushed position %X moved from %X while the first session's batch was not durable", got, start)
	}
	if got := e.slotConfirmed(t); got > start {
		t.Errorf("slot confirmed %X, past %X, while the first session's batch was not durable", got, start)
	}
	close(m.gate)
	for deadline := time.Now().Add(20 * time.Second); r.Stats().Flushed.Load() < after; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("flushed %X: the message at %X not confirmed once the batch was durable", r.Stats().Flushed.Load(), after)
		}
	}
	m.report(t)
}
