package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgserver"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/source"
)

// checkInsertsOnce checks that kept holds an insert of every id in 1..n
// exactly once, in id order.
func checkInsertsOnce(t *testing.T, kept []source.Change, n int) {
	t.Helper()
	seen := map[int64]int{}
	var prev int64
	for _, c := range kept {
		if c.Op != source.OpCreate {
			t.Fatalf("unexpected %s %v", c.Op, c.After)
		}
		id := c.After[0].(int64)
		seen[id]++
		if id <= prev {
			t.Fatalf("id %d after %d: out of order", id, prev)
		}
		prev = id
	}
	for id := int64(1); id <= int64(n); id++ {
		if seen[id] != 1 {
			t.Fatalf("id %d kept %d times", id, seen[id])
		}
	}
}

// TestReconnectAfterWalsenderTerminated: the walsender is killed three
// times while rows are written; the reader reconnects, replication
// restarts from the slot, and with the Emitter's dedupe every row is kept
// exactly once.
func TestReconnectAfterWalsenderTerminated(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE w (id int PRIMARY KEY)`)
	d := newDedupe(4)
	_, r := e.startReader(t, []string{"w"}, false, d, func(c *Config) { c.StatusInterval = 20 * time.Millisecond })
	const n = 600
	writer, err := pgx.Connect(t.Context(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(context.Background())
	done := make(chan error, 1)
	go func() {
		for i := 1; i <= n; i++ {
			if _, err := writer.Exec(context.Background(), `INSERT INTO w VALUES ($1)`, i); err != nil {
				done <- err
				return
			}
			if i%50 == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		done <- nil
	}()
	for k := 0; k < 3; k++ {
		time.Sleep(150 * time.Millisecond)
		waitStreaming(t, r)
		e.exec(t, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.names.Slot)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	kept := d.waitFor(t, "all rows", func(cs []source.Change) bool { return len(cs) >= n })
	checkInsertsOnce(t, kept, n)
	if r.Stats().Reconnects.Load() == 0 {
		t.Fatal("the reader never reconnected")
	}
}

func waitStreaming(t *testing.T, r *Reader) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !r.Stats().Streaming.Load(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("reader not streaming")
		}
	}
}

// TestSurvivesServerRestart: PostgreSQL restarts twice (fast shutdown)
// while rows are written; the reader reconnects with backoff and keeps
// every committed row exactly once.
func TestSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	srv := pgtest.NewServer(t, pgserver.Options{})
	dsn := pgtest.NewDBOn(t, srv)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `CREATE TABLE w (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	conn.Close(t.Context())
	e := &env{dsn: dsn, names: pgtest.Names(t), state: &memState{}}
	d := newDedupe(4)
	_, r := e.startReader(t, []string{"w"}, false, d)

	const n = 400
	var next atomic.Int64
	next.Store(1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		// Rows go in one by one; an insert that failed with the server
		// away is retried (ON CONFLICT: its outcome may be unknown).
		defer close(done)
		var c *pgx.Conn
		for next.Load() <= n {
			select {
			case <-stop:
				return
			default:
			}
			if c == nil {
				if c, err = pgx.Connect(context.Background(), dsn); err != nil {
					c = nil
					time.Sleep(50 * time.Millisecond)
					continue
				}
			}
			if _, err := c.Exec(context.Background(), `INSERT INTO w VALUES ($1) ON CONFLICT DO NOTHING`, next.Load()); err != nil {
				c.Close(context.Background())
				c = nil
				continue
			}
			next.Add(1)
		}
		if c != nil {
			c.Close(context.Background())
		}
	}()
	defer func() { close(stop); <-done }()
	for k := 0; k < 2; k++ {
		for next.Load() < int64(100*(k+1)) {
			time.Sleep(10 * time.Millisecond)
		}
		if err := srv.Restart(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	kept := d.waitFor(t, "all rows", func(cs []source.Change) bool { return len(cs) >= n })
	checkInsertsOnce(t, kept, n)
	if r.Stats().Reconnects.Load() < 2 {
		t.Fatalf("%d reconnects, want at least 2", r.Stats().Reconnects.Load())
	}
}

func slotConfirmed(t *testing.T, conn *pgx.Conn, slot string) uint64 {
	t.Helper()
	var flush *string
	if err := conn.QueryRow(t.Context(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&flush); err != nil || flush == nil {
		return 0
	}
	lsn, _ := parseLSN(*flush)
	return lsn
}

// TestHeartbeatAdvancesSlot: the captured table is idle while another
// table takes writes; heartbeats let the reader confirm the slot past
// them, so the slot does not hold back WAL.
func TestHeartbeatAdvancesSlot(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE idle (id int PRIMARY KEY); CREATE TABLE busy (id int PRIMARY KEY, pad text)`)
	_, r := e.startReader(t, []string{"idle"}, false, newCollector(), func(c *Config) {
		c.HeartbeatInterval, c.StatusInterval = 100*time.Millisecond, 50*time.Millisecond
	})
	e.exec(t, `INSERT INTO busy SELECT g, repeat('x', 200) FROM generate_series(1, 5000) g`)
	var target uint64
	var s string
	if err := e.conn.QueryRow(t.Context(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	target, _ = parseLSN(s)
	for deadline := time.Now().Add(20 * time.Second); slotConfirmed(t, e.conn, e.names.Slot) < target; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("slot confirmed %X, not past %X after heartbeats (%d sent)", slotConfirmed(t, e.conn, e.names.Slot), target,
				r.Stats().Heartbeats.Load())
		}
	}
	if r.Stats().Heartbeats.Load() == 0 {
		t.Fatal("no heartbeat was sent")
	}
	var st sourceState
	if _, err := loadJSON(t.Context(), e.state, r.stateKey(), &st); err != nil || st.Confirmed < target {
		t.Fatalf("state confirmed %X (err %v), must be saved before the slot is told %X", st.Confirmed, err, target)
	}
}

// runOnce runs a reader until it streams (then stops it) or fails.
func runOnce(t *testing.T, e *env, tables []string, snapshot bool) (*Reader, error) {
	t.Helper()
	r := New(e.config(t, tables, snapshot), e.state, discard)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, newCollector()) }()
	for {
		select {
		case err := <-done:
			return r, err
		case <-time.After(10 * time.Millisecond):
			if r.Stats().Streaming.Load() {
				cancel()
				<-done
				waitSlotInactive(t, e)
				return r, nil
			}
		}
	}
}

// waitSlotInactive waits until the slot's walsender has let go of it.
func waitSlotInactive(t *testing.T, e *env) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var active bool
		err := e.conn.QueryRow(t.Context(), "SELECT active FROM pg_replication_slots WHERE slot_name = $1", e.names.Slot).Scan(&active)
		if err != nil || !active {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the slot stayed active after the reader stopped")
		}
	}
}

func wantSlotError(t *testing.T, err error, kind SlotErrorKind) {
	t.Helper()
	var se *SlotError
	if !errors.As(err, &se) || se.Kind != kind {
		t.Fatalf("error %v, want a *SlotError of kind %s", err, kind)
	}
	if retryable(err) {
		t.Fatalf("%v is retryable", err)
	}
}

// TestSlotErrors: every condition under which the slot can't be trusted
// stops the reader with a *SlotError of its kind.
func TestSlotErrors(t *testing.T) {
	t.Parallel()
	const ddl = `CREATE TABLE s (id int PRIMARY KEY)`
	t.Run("missing", func(t *testing.T) {
		t.Parallel()
		e := setup(t, ddl)
		if _, err := runOnce(t, e, []string{"s"}, false); err != nil {
			t.Fatal(err)
		}
		dropSlot(t, e.conn, e.names.Slot) // retries while the old walsender lets go
		_, err := runOnce(t, e, []string{"s"}, false)
		wantSlotError(t, err, SlotMissing)
	})
	t.Run("ahead", func(t *testing.T) {
		t.Parallel()
		e := setup(t, ddl)
		if _, err := runOnce(t, e, []string{"s"}, false); err != nil {
			t.Fatal(err)
		}
		e.exec(t, `INSERT INTO s VALUES (1)`)
		e.exec(t, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, e.names.Slot)
		_, err := runOnce(t, e, []string{"s"}, false)
		wantSlotError(t, err, SlotAhead)
	})
	t.Run("system id", func(t *testing.T) {
		t.Parallel()
		e := setup(t, ddl)
		if err := saveJSON(t.Context(), e.state, "postgres/"+e.names.Slot, sourceState{SystemID: "42"}); err != nil {
			t.Fatal(err)
		}
		_, err := runOnce(t, e, []string{"s"}, false)
		wantSlotError(t, err, SystemIDChanged)
	})
	t.Run("foreign", func(t *testing.T) {
		t.Parallel()
		e := setup(t, ddl)
		e.exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, e.names.Slot)
		_, err := runOnce(t, e, []string{"s"}, true)
		wantSlotError(t, err, SlotForeign)
		if !strings.Contains(err.Error(), "No process streams from it now") || !strings.Contains(err.Error(), "pg_drop_replication_slot") {
			t.Errorf("error %q: an unused slot's error should say it is unused and how to drop it", err)
		}
		// Without a load, the slot is adopted.
		if _, err := runOnce(t, e, []string{"s"}, false); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("wrong plugin", func(t *testing.T) {
		t.Parallel()
		e := setup(t, ddl)
		e.exec(t, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, e.names.Slot)
		_, err := runOnce(t, e, []string{"s"}, false)
		wantSlotError(t, err, SlotWrongPlugin)
	})
	t.Run("invalidated", func(t *testing.T) {
		t.Parallel()
		srv := pgtest.NewServer(t, pgserver.Options{Settings: map[string]string{"max_slot_wal_keep_size": "1MB"}})
		dsn := pgtest.NewDBOn(t, srv)
		conn, err := pgx.Connect(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		e := &env{dsn: dsn, conn: conn, names: pgtest.Names(t), state: &memState{}}
		e.exec(t, ddl)
		if _, err := runOnce(t, e, []string{"s"}, false); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			e.exec(t, fmt.Sprintf(`INSERT INTO s VALUES (%d)`, i))
			e.exec(t, `SELECT pg_switch_wal()`)
		}
		e.exec(t, `CHECKPOINT`)
		var status string
		if err := conn.QueryRow(t.Context(), `SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1`, e.names.Slot).Scan(&status); err != nil || status != "lost" {
			t.Fatalf("wal_status %q (%v): the test did not invalidate the slot", status, err)
		}
		_, err = runOnce(t, e, []string{"s"}, false)
		wantSlotError(t, err, SlotInvalidated)
	})
}

// slowDedupe delays every batch.
type slowDedupe struct {
	*dedupe
	delay time.Duration
}

func (s slowDedupe) Emit(ctx context.Context, batch []source.Change) error {
	time.Sleep(s.delay)
	return s.dedupe.Emit(ctx, batch)
}

// TestKeepalivesDuringSlowEmit: with wal_sender_timeout at 1s, a streamed
// transaction whose replay into a slow Emitter takes several seconds, and
// a large one sent whole, both arrive without the walsender giving up:
// status updates go out between batches.
func TestKeepalivesDuringSlowEmit(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE k (id int PRIMARY KEY, pad text)`)
	e.dsn = smallDecodingMemory(e.dsn) + "&wal_sender_timeout=1s"
	d := newDedupe(1)
	_, r := e.startReader(t, []string{"k"}, false, slowDedupe{d, 40 * time.Millisecond}, func(c *Config) {
		c.BatchMax, c.StatusInterval = 100, 200*time.Millisecond
	})
	e.exec(t, `INSERT INTO k SELECT g, repeat('x', 100) FROM generate_series(1, 6000) g`)
	kept := d.waitFor(t, "all rows", func(cs []source.Change) bool { return len(cs) >= 6000 })
	checkInsertsOnce(t, kept, 6000)
	if n := r.Stats().Reconnects.Load(); n != 0 {
		t.Fatalf("%d reconnects: the walsender timed out", n)
	}
	// The count moves once the replay has finished, which may be just
	// after its last batch reached the emitter.
	deadline := time.Now().Add(10 * time.Second)
	for r.Stats().StreamedTxns.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the transaction did not arrive streamed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
