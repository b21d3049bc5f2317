package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	sqldriver "github.com/go-sql-driver/mysql"

	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// dedupe is an Emitter that keeps what the daemon's emitter would keep:
// each change goes to a partition by its key (a truncate to every
// partition), and a change at or below the newest position already stored
// in its partition is dropped. It can fail on purpose after some batches,
// to stop a reader mid-way.
type dedupe struct {
	mu        sync.Mutex
	parts     int32
	last      map[string][]source.Position // table -> partition -> newest
	kept      []source.Change
	dropped   int
	failAfter int // fail the batch after this many (0: never)
	batches   int
	slow      time.Duration // each batch takes this long (a stream that lags)
	// hold, when set (holdEmits), keeps every Emit waiting until it is
	// closed; held hears of each Emit that waits.
	hold, held chan struct{}
	notify     chan struct{}
}

// holdEmits makes every Emit from now on wait until release is called,
// and waits (up to a minute) until one does: the stream is then held at a
// position before anything the source does next.
func (d *dedupe) holdEmits(t *testing.T) (release func()) {
	t.Helper()
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	d.mu.Lock()
	d.hold, d.held = hold, held
	d.mu.Unlock()
	release = func() {
		d.mu.Lock()
		if d.hold == hold {
			d.hold, d.held = nil, nil
			close(hold)
		}
		d.mu.Unlock()
	}
	t.Cleanup(release)
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("no Emit came to be held within a minute")
	}
	return release
}

var errPlannedFailure = errors.New("test: planned emitter failure")

func newDedupe(parts int32) *dedupe {
	return &dedupe{parts: parts, last: map[string][]source.Position{}, notify: make(chan struct{}, 1)}
}

func (d *dedupe) Emit(ctx context.Context, batch []source.Change) error {
	d.mu.Lock()
	hold, held := d.hold, d.held
	d.mu.Unlock()
	if hold != nil {
		select {
		case held <- struct{}{}:
		default:
		}
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if d.slow > 0 {
		time.Sleep(d.slow)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.batches++
	if d.failAfter > 0 && d.batches > d.failAfter {
		// Half of the batch made it, as a crash mid-append may leave it.
		batch = batch[:len(batch)/2]
		defer func() { d.failAfter = 0 }()
	}
	for _, c := range batch {
		qn := c.Table.QualifiedName()
		last := d.last[qn]
		if last == nil {
			last = make([]source.Position, d.parts)
			d.last[qn] = last
		}
		parts := []int32{}
		if c.Fault != nil {
			parts = append(parts, 0) // as the daemon holds it: no key encoding
		} else if c.Op == source.OpTruncate {
			for p := range d.parts {
				parts = append(parts, p)
			}
		} else {
			key, err := schema.AppendKey(nil, c.Table, c.Key())
			if err != nil {
				return err
			}
			parts = append(parts, log.PartitionFor(key, d.parts))
		}
		keep := false
		for _, p := range parts {
			if last[p] == nil || c.Pos.Compare(last[p]) > 0 {
				last[p] = append(source.Position(nil), c.Pos...)
				keep = true
			}
		}
		if !keep {
			d.dropped++
			continue
		}
		// Kept as the log keeps them, encoded: the source writes its rows'
		// and their values' storage again once Emit returns.
		c.Before = snapshot.OwnValues(c.Before)
		c.After = snapshot.OwnValues(c.After)
		if c.Binlog != nil { // kept as the log keeps it, encoded: the source reuses the place
			b := *c.Binlog
			c.Binlog = &b
		}
		if len(c.Before) == 0 {
			c.Before = nil
		}
		if len(c.After) == 0 {
			c.After = nil
		}
		d.kept = append(d.kept, c)
	}
	select {
	case d.notify <- struct{}{}:
	default:
	}
	if d.failAfter > 0 && d.batches > d.failAfter {
		return errPlannedFailure
	}
	return nil
}

// pipelining is a source.Pipeliner over a dedupe: Submit queues a copy of
// the batch (rows too: Submit keeps nothing of a batch, whose rows the
// source reuses), Sync hands the queue to the dedupe as one Emit (with its
// planned failure: then nothing queued is durable but what the dedupe
// kept of it).
type pipelining struct {
	d       *dedupe
	mu      sync.Mutex
	pending []source.Change
	submits int  // Submit calls (Emit's not counted)
	refuse  bool // Sync and Emit fail (a process that dies)
}

func (p *pipelining) Submit(_ context.Context, batch []source.Change) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range batch {
		c.Before, c.After = snapshot.OwnValues(c.Before), snapshot.OwnValues(c.After) // the source writes them again
		p.pending = append(p.pending, c)
	}
	p.submits++
	return nil
}

// submitted is how many changes wait for a Sync.
func (p *pipelining) submitted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

func (p *pipelining) Sync(ctx context.Context) error {
	p.mu.Lock()
	batch, refuse := p.pending, p.refuse
	p.pending = nil
	p.mu.Unlock()
	if refuse {
		return errors.New("test: the process is gone")
	}
	if len(batch) == 0 {
		return nil
	}
	return p.d.Emit(ctx, batch)
}

func (p *pipelining) Emit(ctx context.Context, batch []source.Change) error {
	p.mu.Lock()
	p.pending = append(p.pending, batch...) // not counted in submits
	p.mu.Unlock()
	return p.Sync(ctx)
}

// keyRow is the key row of a change whose key is in the first column.
func (d *dedupe) snapshot() []source.Change {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]source.Change(nil), d.kept...)
}

// waitFor waits until ok holds for the kept changes.
func (d *dedupe) waitFor(t *testing.T, what string, ok func([]source.Change) bool) []source.Change {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		got := d.snapshot()
		if ok(got) {
			return got
		}
		select {
		case <-d.notify:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s; %d changes kept", what, len(got))
		}
	}
}

// keyOf renders a change's key for maps.
func keyOf(c source.Change) string { return fmt.Sprint(c.Key()) }

var discard = slog.New(slog.DiscardHandler)

func errorsAs(err error, target any) bool { return err != nil && errors.As(err, target) }

// memState is an in-memory State.
type memState struct {
	mu sync.Mutex
	m  map[string][]byte
}

func newMemState() *memState { return &memState{m: map[string][]byte{}} }

func (s *memState) Load(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key], nil
}

func (s *memState) Save(_ context.Context, key string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = append([]byte(nil), v...)
	return nil
}

// env is a database on the shared MariaDB with a root pool.
type env struct {
	dsn  string
	db   *sql.DB
	srv  *mariadbserver.Server
	name string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, mariadbtest.Server(t))
}

// newEnvOn is newEnv on a server of the test's own (a server setting
// under test).
func newEnvOn(t *testing.T, srv *mariadbserver.Server) *env {
	t.Helper()
	dsn := mariadbtest.NewDBOn(t, srv)
	db, err := mariadbserver.OpenDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg, _ := sqldriver.ParseDSN(dsn)
	return &env{dsn: dsn, db: db, srv: srv, name: cfg.DBName}
}

// session runs stmts in order on one connection, so session settings
// (SET SESSION binlog_format, sql_mode, ...) hold for the statements after;
// the connection is then discarded, not returned to the pool, so its
// settings reach no later statement.
func (e *env) session(t *testing.T, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := e.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // closes it
		conn.Close()
	}()
	for _, q := range stmts {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func (e *env) exec(t *testing.T, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := e.db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// reader starts a Reader on the env's tables; stop cancels it and
// returns Run's error.
func (e *env) reader(t *testing.T, st State, em source.Emitter, table string, opts ...func(*Config)) (r *Reader, stop func() error) {
	t.Helper()
	cfg := Config{DSN: e.srv.ReplDSN(e.name), ServerID: mariadbtest.ServerID(t), Tables: []string{e.name + "." + table},
		HeartbeatInterval: time.Second, CheckpointInterval: 50 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	r = New(cfg, st, discard)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, em) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(60 * time.Second):
				runErr = errors.New("test: reader did not stop")
			}
		})
		return runErr
	}
	t.Cleanup(func() { stop() })
	// Wait until it streams, so the test's writes come after its start.
	deadline := time.Now().Add(60 * time.Second)
	for !r.Stats().Streaming.Load() {
		select {
		case err := <-done:
			t.Fatalf("reader stopped before streaming: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("reader did not start streaming")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r, stop
}
