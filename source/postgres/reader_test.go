package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

func TestMain(m *testing.M) {
	if raw := os.Getenv(childEnv); raw != "" {
		os.Exit(runChild(raw)) // a reader process of the kill -9 and memory tests
	}
	pgtest.Main(m)
}

// collector is an Emitter that keeps every change in memory.
type collector struct {
	mu      sync.Mutex
	changes []source.Change
	notify  chan struct{}
}

func newCollector() *collector { return &collector{notify: make(chan struct{}, 1)} }

func (c *collector) Emit(_ context.Context, batch []source.Change) error {
	c.mu.Lock()
	for _, ch := range batch {
		ch.Before, ch.After = ownRow(ch.Before), ownRow(ch.After)
		if len(ch.Before) == 0 {
			ch.Before = nil
		}
		if len(ch.After) == 0 {
			ch.After = nil
		}
		c.changes = append(c.changes, ch)
	}
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
	return nil
}

// wait returns the collected changes once there are at least n.
func (c *collector) wait(t *testing.T, n int) []source.Change {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		c.mu.Lock()
		got := append([]source.Change(nil), c.changes...)
		c.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-c.notify:
		case <-deadline:
			t.Fatalf("got %d changes, want %d: %v", len(got), n, describe(got))
		}
	}
}

func describe(cs []source.Change) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "\n  %s %s before=%v after=%v", c.Op, c.Table.Name, c.Before, c.After)
	}
	return b.String()
}

type memState struct {
	mu sync.Mutex
	m  map[string][]byte
	// onSave, when set, sees every Save before it is stored (a test's
	// way into the moment a record is written).
	onSave func(k string, v []byte)
}

func (s *memState) Load(_ context.Context, k string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k], nil
}

func (s *memState) Save(_ context.Context, k string, v []byte) error {
	if s.onSave != nil {
		s.onSave(k, v)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string][]byte{}
	}
	s.m[k] = v
	return nil
}

type env struct {
	dsn   string
	conn  *pgx.Conn
	names pgtest.TestNames
	state *memState
	// logs, when set, receives the readers' log lines too.
	logs io.Writer
	// returned is closed once the reader startReader started last has
	// returned from Run, by itself or stopped.
	returned chan struct{}
}

func setup(t testing.TB, ddl string) *env {
	t.Helper()
	dsn := pgtest.NewDB(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(t.Context(), ddl); err != nil {
		t.Fatal(err)
	}
	return &env{dsn: dsn, conn: conn, names: pgtest.Names(t), state: &memState{}}
}

func (e *env) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := e.conn.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// start runs a reader in the background; the returned func stops it and
// returns its error.
func (e *env) start(t *testing.T, tables []string, snapshot bool, c *collector) func() error {
	stop, _ := e.startReader(t, tables, snapshot, c)
	return stop
}

// config is the reader configuration of the env's tests.
func (e *env) config(t *testing.T, tables []string, snapshot bool) Config {
	return Config{DSN: e.dsn, Slot: e.names.Slot, Publication: e.names.Publication, Tables: tables,
		Snapshot: snapshot, BatchDelay: 5 * time.Millisecond, SpillDir: t.TempDir(), ReconnectMin: 20 * time.Millisecond}
}

func (e *env) startReader(t *testing.T, tables []string, snapshot bool, c source.Emitter, opts ...func(*Config)) (func() error, *Reader) {
	t.Helper()
	cfg := e.config(t, tables, snapshot)
	for _, o := range opts {
		o(&cfg)
	}
	var w io.Writer = testWriter{t}
	if e.logs != nil {
		w = io.MultiWriter(w, e.logs)
	}
	r := New(cfg, e.state, slog.New(slog.NewTextHandler(w, nil)))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	returned := make(chan struct{})
	e.returned = returned
	go func() {
		err := r.Run(ctx, c)
		close(returned)
		if err != nil && ctx.Err() == nil {
			t.Logf("the reader stopped by itself: %v", err) // a test waiting for changes then says why none come
		}
		done <- err
	}()
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() {
			cancel()
			err = <-done
			if errors.Is(err, context.Canceled) {
				err = nil
			}
		})
		return err
	}
	failed := func(err error) {
		once.Do(func() {}) // done was read: stop must not wait for it
		t.Fatalf("reader stopped before streaming: %v", err)
	}
	t.Cleanup(func() { _ = stop() })
	// Wait until the reader streams, so the test's changes are captured.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if r.Stats().Streaming.Load() {
			return stop, r
		}
		select {
		case err := <-done:
			failed(err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("reader did not start streaming")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStreamInsertUpdateDeleteTruncate(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, price numeric(10,2), note text);
		CREATE TABLE other (k text PRIMARY KEY, v bigint)`)
	c := newCollector()
	e.start(t, []string{"public.items", "other"}, false, c)

	e.exec(t, `INSERT INTO items VALUES (1, 'apple', 1.50, NULL), (2, 'pear', NULL, 'x')`)
	e.exec(t, `UPDATE items SET price = 2.25 WHERE id = 1`)
	e.exec(t, `UPDATE items SET id = 20 WHERE id = 2`) // key change: delete + insert
	e.exec(t, `DELETE FROM items WHERE id = 1`)
	e.exec(t, `INSERT INTO other VALUES ('a', 9223372036854775807)`)
	e.exec(t, `TRUNCATE other`)
	got := c.wait(t, 8)

	type want struct {
		op     source.Op
		table  string
		before []any
		after  []any
	}
	wants := []want{
		{source.OpCreate, "items", nil, []any{int64(1), "apple", "1.50", nil}},
		{source.OpCreate, "items", nil, []any{int64(2), "pear", nil, "x"}},
		{source.OpUpdate, "items", []any{int64(1), nil, nil, nil}, []any{int64(1), "apple", "2.25", nil}},
		{source.OpDelete, "items", []any{int64(2), nil, nil, nil}, nil},
		{source.OpCreate, "items", nil, []any{int64(20), "pear", nil, "x"}},
		{source.OpDelete, "items", []any{int64(1), nil, nil, nil}, nil},
		{source.OpCreate, "other", nil, []any{"a", int64(9223372036854775807)}},
		{source.OpTruncate, "other", nil, nil},
	}
	if len(got) != len(wants) {
		t.Fatalf("got %d changes, want %d: %s", len(got), len(wants), describe(got))
	}
	for i, w := range wants {
		g := got[i]
		if g.Op != w.op || g.Table.Name != w.table || fmt.Sprint(g.Before) != fmt.Sprint(w.before) || fmt.Sprint(g.After) != fmt.Sprint(w.after) {
			t.Errorf("change %d: got %s %s before=%v after=%v, want %s %s before=%v after=%v",
				i, g.Op, g.Table.Name, g.Before, g.After, w.op, w.table, w.before, w.after)
		}
		if i > 0 && g.Pos.Compare(got[i-1].Pos) <= 0 {
			t.Errorf("position of change %d does not increase", i)
		}
	}
	// Shape: the catalog's NOT NULL and key reach the table model.
	tbl := got[0].Table
	if tbl.String() != "public.items(id int32 key, name string, price decimal(10,2) null, note string null)" {
		t.Errorf("table model = %s", tbl)
	}
	// Two changes in one transaction share its commit LSN, in order.
	if got[0].LSN != got[1].LSN || got[0].TxID != got[1].TxID {
		t.Errorf("one insert statement split across transactions")
	}
}

func TestSnapshotThenStream(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE t (id bigint PRIMARY KEY, v text);
		INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 2500) g`)
	c := newCollector()
	e.start(t, []string{"t"}, true, c)
	e.exec(t, `UPDATE t SET v = 'changed' WHERE id = 7`)
	got := c.wait(t, 2501)
	seen := map[int64]bool{}
	for _, ch := range got[:2500] {
		if ch.Op != source.OpRead || !ch.Snapshot {
			t.Fatalf("snapshot change %v", ch)
		}
		id := ch.After[0].(int64)
		if ch.After[1] != fmt.Sprintf("row %d", id) || seen[id] {
			t.Fatalf("snapshot row %v (dup %t)", ch.After, seen[id])
		}
		seen[id] = true
	}
	last := got[2500]
	if last.Op != source.OpUpdate || last.After[1] != "changed" || last.Pos.Compare(got[2499].Pos) <= 0 {
		t.Fatalf("streamed change after snapshot: %s %v", last.Op, last.After)
	}
	if got[0].Table != last.Table {
		t.Errorf("snapshot and stream use different table versions: %s vs %s", got[0].Table, last.Table)
	}
}

func TestUnchangedToastIsMarked(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE docs (id int PRIMARY KEY, body text, n int);
		ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL`)
	c := newCollector()
	e.start(t, []string{"docs"}, false, c)
	big := strings.Repeat("0123456789", 1000)
	e.exec(t, `INSERT INTO docs VALUES (1, $1, 1)`, big)
	e.exec(t, `UPDATE docs SET n = 2 WHERE id = 1`)
	got := c.wait(t, 2)
	if got[0].After[1] != big {
		t.Fatalf("insert lost the TOASTed value")
	}
	if !schema.IsUnchanged(got[1].After[1]) || got[1].After[2] != int64(2) {
		t.Fatalf("update after = %v, want body unchanged and n 2", got[1].After)
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, ddl string
		tables    []string
		want      []string
	}{
		{"no primary key", `CREATE TABLE nopk (a int)`, []string{"nopk"}, []string{"public.nopk: has no primary key", "ADD PRIMARY KEY", "REPLICA IDENTITY USING INDEX"}},
		{"missing table", `SELECT 1`, []string{"public.ghost"}, []string{"public.ghost: does not exist"}},
		{"unsupported type", `CREATE TABLE geo (id int PRIMARY KEY, q tsquery)`, []string{"geo"}, []string{"table public.geo", `column "q"`, "tsquery"}},
		{"replica identity nothing", `CREATE TABLE rin (id int PRIMARY KEY); ALTER TABLE rin REPLICA IDENTITY NOTHING`, []string{"rin"},
			[]string{"public.rin: has REPLICA IDENTITY NOTHING", "REPLICA IDENTITY DEFAULT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, tc.ddl)
			r := New(Config{DSN: e.dsn, Slot: e.names.Slot, Publication: e.names.Publication, Tables: tc.tables, Snapshot: true},
				e.state, slog.New(slog.DiscardHandler))
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			err := r.Run(ctx, newCollector())
			if err == nil {
				t.Fatal("Run succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestConfirmedNeverAheadOfEmitted checks the exactly-once invariant live:
// the slot's confirmed_flush_lsn never passes the newest commit the
// Emitter has returned for (or the slot's starting point).
func TestConfirmedNeverAheadOfEmitted(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE t (id int PRIMARY KEY, v int)`)
	slow := &slowEmitter{c: newCollector()}
	r := New(Config{DSN: e.dsn, Slot: e.names.Slot, Publication: e.names.Publication, Tables: []string{"t"},
		BatchDelay: 5 * time.Millisecond, StatusInterval: 20 * time.Millisecond}, e.state, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, slow) }()
	defer func() { cancel(); <-done }()

	confirmed := func() (uint64, bool) {
		var flush *string
		err := e.conn.QueryRow(t.Context(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", e.names.Slot).Scan(&flush)
		if err != nil || flush == nil {
			return 0, false
		}
		lsn, err := parseLSN(*flush)
		return lsn, err == nil
	}
	var start uint64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if lsn, ok := confirmed(); ok {
			start = lsn
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("slot never appeared")
		}
	}

	writer, err := pgx.Connect(t.Context(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(context.Background())
	stopWrites := make(chan struct{})
	writesDone := make(chan struct{})
	go func() {
		defer close(writesDone)
		for i := 0; ; i++ {
			select {
			case <-stopWrites:
				return
			default:
			}
			_, _ = writer.Exec(context.Background(), `INSERT INTO t VALUES ($1, $1)`, i)
		}
	}()
	var checks, advanced int
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		// Read confirmed first: the emitted bound only grows after it.
		lsn, ok := confirmed()
		if !ok {
			continue
		}
		emitted := slow.emittedLSN()
		if lsn > max(emitted, start) {
			t.Fatalf("confirmed_flush_lsn %X is ahead of the newest emitted commit %X", lsn, emitted)
		}
		if lsn > start {
			advanced++
		}
		checks++
	}
	close(stopWrites)
	<-writesDone
	if checks < 50 || advanced == 0 {
		t.Fatalf("%d checks, %d with the slot advanced: the invariant was not exercised", checks, advanced)
	}
}

// slowEmitter delays every batch so acknowledgement lags reception.
type slowEmitter struct {
	c   *collector
	mu  sync.Mutex
	max uint64
}

func (s *slowEmitter) Emit(ctx context.Context, batch []source.Change) error {
	time.Sleep(30 * time.Millisecond)
	if err := s.c.Emit(ctx, batch); err != nil {
		return err
	}
	s.mu.Lock()
	for _, ch := range batch {
		s.max = max(s.max, ch.LSN)
	}
	s.mu.Unlock()
	return nil
}

func (s *slowEmitter) emittedLSN() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
