package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// Key is a primary key as the database writes its values in text, one
// string per key column; the source turns it back into SQL literals.
type Key []string

// Request asks for a table's snapshot.
type Request struct {
	// Table is the table as the source names it ("schema.table").
	Table string `json:"table"`
	// Where, when set, limits the rows read (an SQL condition on the
	// table's columns). Not with Replace.
	Where string `json:"where,omitempty"`
	// Replace begins the run with a reset marker: the sink empties the
	// table, and the run fills it again.
	Replace bool `json:"replace,omitempty"`
	// Origin says who asked: added, initial, load-resumed, cli, api, signal.
	Origin string `json:"origin,omitempty"`
	// After, when set, says the rows with keys up to it are in the sink
	// and the rows after it may not be (a COPY initial load stopped
	// part-way): the run reads after it, with no reset marker, and treats
	// the keys after it as a replacing run treats the keys it has not read
	// yet (see the package doc, Unchanged values). Not with Replace or
	// Where.
	After Key `json:"after,omitempty"`
}

// Table is a table described for a run, in the current session.
type Table struct {
	// Shape is the table's version at the description (a reset marker's).
	Shape *schema.Table
	// Compare orders key values (as the source decodes them) the way the
	// database orders the key in ReadChunk; nil when the source cannot. It
	// may ask the database (an error: the order is unknown this time).
	// Called from the stream's goroutine.
	Compare func(a, b []any) (int, error)
	// KeyText writes key values as a Key; false when a value has no text
	// the source can turn back into a literal.
	KeyText func(vals []any) (Key, bool)
	// ParseKey reads a Key into values comparable by Compare; false when it
	// cannot.
	ParseKey func(k Key) ([]any, bool)
}

// ChunkQuery says which rows a chunk reads.
type ChunkQuery struct {
	Where string
	// After (exclusive; nil from the first key) and Upper (inclusive)
	// bound a range read of at most Limit rows in key order.
	After, Upper Key
	Limit        int
	// To, when set (only for a Parallel database), ends the range: the
	// rows with keys after After and at most To are read, the first Limit
	// of them in key order. A read that returns Limit rows may have
	// stopped before To; the range goes on after its Last.
	To Key
	// Keys, when set, reads exactly these keys instead of a range.
	Keys []Key
}

// Plan is a run's upper bound.
type Plan struct {
	// Upper is the greatest key (nil: no rows); Estimate the rows.
	Upper    Key
	Estimate int64
	// Consistent, when set, says whether every change the stream delivered
	// before a position was visible to the read (as Chunk.Consistent). A
	// replacing run plans after its reset marker: a key above the bound
	// must have been inserted after the marker, or the truncate would
	// remove a row no chunk reads.
	Consistent func(source.Position) bool
}

// Chunk is what a read returned.
type Chunk struct {
	// Rows are the rows read, op r with Table and After set, in key order
	// for a range read.
	Rows []source.Change
	// Last is the text key of the last row of a range read.
	Last Key
	// Consistent, when set, is called at the high watermark with the low
	// watermark's position: false when a change the stream delivered before
	// it was not visible to the read (the chunk is then read again).
	Consistent func(low source.Position) bool
}

// Database is what the engine needs from a source database. Its methods
// are called from the engine's goroutine (Run), one at a time.
type Database interface {
	// Describe looks a table up. An error wrapping ErrTableGone ends the
	// table's run; other errors end Run.
	Describe(ctx context.Context, table string) (*Table, error)
	// Plan returns the greatest key of the table's rows matching where
	// (nil: none) and an estimate of their number, read in one snapshot.
	Plan(ctx context.Context, table string, t *Table, where string) (*Plan, error)
	// ReadChunk reads one chunk of the table in one consistent read.
	ReadChunk(ctx context.Context, table string, t *Table, q ChunkQuery) (*Chunk, error)
	// WriteWatermark makes a watermark carrying id appear in the change
	// stream, after everything committed before it; the source's stream
	// then calls Watermark with id and its position.
	WriteWatermark(ctx context.Context, id string) error
}

// Parallel is a Database that reads several range chunks at once, each
// between watermarks of its own (see parallel.go). The engine then fixes
// each range chunk's last key before reading it, so the next chunk can
// start before this one's read ends.
type Parallel interface {
	Database
	// Bounds returns where the next range chunks after q.After end, about
	// q.Limit rows apart (exact, or estimated from a sample), in key order,
	// each at most q.Upper, at most n of them; last when about a chunk or
	// less is left after them (then the engine reads no more ends). They
	// only cut the range: a chunk reads the rows of (After, To], at most
	// its Limit of them (ChunkQuery.To), so a range that holds more rows
	// than planned costs another chunk, not memory. Called from the
	// engine's goroutine.
	Bounds(ctx context.Context, table string, t *Table, q ChunkQuery, n int) (ends []Key, last bool, err error)
	// Reader opens a connection of its own that writes watermarks and
	// reads chunks (one at a time) beside the others.
	Reader(ctx context.Context) (ChunkReader, error)
}

// ChunkReader reads chunks on a connection of its own (Parallel.Reader).
type ChunkReader interface {
	ReadChunk(ctx context.Context, table string, t *Table, q ChunkQuery) (*Chunk, error)
	WriteWatermark(ctx context.Context, id string) error
	Close()
}

// LowReader is an optional ability of a Database or a ChunkReader,
// discovered by type assertion: it writes a chunk's low watermark and
// reads the chunk in one call, so a database can send both at once (on
// PostgreSQL, one round trip instead of five). The engine then writes the
// high watermark with WriteWatermark as before.
type LowReader interface {
	// ReadChunkAfterLow writes the low watermark carrying id, as
	// WriteWatermark does, then reads the chunk as ReadChunk does.
	// REQUIRES: the watermark is committed — the stream delivers it before
	// every change the read does not see — before the read's snapshot is
	// taken: a change committed between the two would be in neither the
	// chunk nor its window, and the chunk's older row would be emitted
	// after it. On an error the watermark may or may not have been written
	// (a watermark without its chunk is ignored).
	ReadChunkAfterLow(ctx context.Context, id, table string, t *Table, q ChunkQuery) (*Chunk, error)
}

// Errors.
var (
	// ErrTableGone: a table of a run no longer exists (or cannot be read
	// as described); its run ends.
	ErrTableGone = errors.New("snapshot: table is gone")
	// ErrBadRequest: a request the engine refuses (see the wrapping error).
	ErrBadRequest = errors.New("snapshot: bad request")
)

// State is durable key/value storage (the source's own).
type State interface {
	Load(ctx context.Context, key string) ([]byte, error)
	Save(ctx context.Context, key string, value []byte) error
}

// Config configures an Engine. Zero values take the documented defaults.
type Config struct {
	// StateKey is where the engine keeps its state. Required.
	StateKey string
	// ChunkRows is the most rows a chunk reads; default 8192.
	ChunkRows int
	// MaxRowsPerSecond throttles each run (0: as fast as it goes).
	MaxRowsPerSecond int
	// Ahead is how many range chunks are in flight at once (read while
	// the stream emits the one before; with a Parallel database, read at
	// the same time, each on a connection of its own); default 3.
	Ahead int
	// ProgressEvery is how often a running snapshot logs its progress;
	// default 10s.
	ProgressEvery time.Duration
}

func (c *Config) defaults() {
	if c.ChunkRows <= 0 {
		c.ChunkRows = 8192
	}
	if c.Ahead <= 0 {
		c.Ahead = 3
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = 10 * time.Second
	}
}

// record is a run as saved: the request and the durable progress.
type record struct {
	ID string `json:"id"`
	Request
	Planned  bool      `json:"planned,omitempty"`
	Upper    Key       `json:"upper,omitempty"` // nil once planned: the table was empty
	Estimate int64     `json:"estimate,omitempty"`
	Last     Key       `json:"last,omitempty"` // the last key whose chunk is durable
	Rows     int64     `json:"rows,omitempty"`
	Started  time.Time `json:"started"`
	// ResetID names the reset marker (saved before its watermark is
	// written); ResetDone once it is durable.
	ResetID   string `json:"reset_id,omitempty"`
	ResetDone bool   `json:"reset_done,omitempty"`
	// Reread are keys to read again (see the package doc).
	Reread []Key `json:"reread,omitempty"`
}

// saved is the engine's state.
type saved struct {
	Runs   []*record `json:"runs"`
	Paused bool      `json:"paused,omitempty"`
	// Signals are the ids of the newest signals handled (at most
	// maxSignals), so a signal delivered again is not run twice.
	Signals []string `json:"signals,omitempty"`
}

const maxSignals = 64

// Engine runs incremental snapshots for one source.
type Engine struct {
	cfg    Config
	state  State
	logger *slog.Logger

	saveMu sync.Mutex // serialises saves (each marshals the newest state) and loads
	loaded bool       // guarded by saveMu: the saved state was read

	mu      sync.Mutex
	runs    []*run
	paused  bool
	signals []string
	chunks  map[string]*chunk // this session's chunks, by watermark id
	shapes  map[*schema.Table]*run
	session string
	seq     int
	// loadedFrom is the state the runs were last loaded from; done counts
	// runs finished since start (for status).
	finished []Progress

	active atomic.Bool // a run exists: Observe has work
	// prep encodes chunks' rows ahead (nil: nothing does); set by Run
	// before its goroutines start.
	prep source.Preparer
	wake chan struct{}
	tm   timings
}

// New returns an Engine; Load reads its saved state.
func New(cfg Config, state State, logger *slog.Logger) *Engine {
	cfg.defaults()
	return &Engine{cfg: cfg, state: state, logger: logger.With("component", "snapshot"),
		chunks: map[string]*chunk{}, shapes: map[*schema.Table]*run{}, wake: make(chan struct{}, 1)}
}

// Load (re)reads the saved state, dropping what a session that ended kept
// in memory beyond it. Call it before a session's stream starts.
func (e *Engine) Load(ctx context.Context) error {
	e.saveMu.Lock()
	defer e.saveMu.Unlock()
	return e.loadLocked(ctx)
}

// loadedLocked reads the saved state when nothing has yet: a request can
// come (the admin API, the signal table) before the source's first session
// starts, and a save without the state would drop the runs saved before a
// restart. Called with saveMu held.
func (e *Engine) loadedLocked(ctx context.Context) error {
	if e.loaded {
		return nil
	}
	return e.loadLocked(ctx)
}

func (e *Engine) loadLocked(ctx context.Context) error {
	b, err := e.state.Load(ctx, e.cfg.StateKey)
	if err != nil {
		return err
	}
	var s saved
	if b != nil {
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("snapshot: stored state %s: %w", e.cfg.StateKey, err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runs = e.runs[:0]
	for _, rec := range s.Runs {
		e.runs = append(e.runs, newRun(rec))
	}
	e.paused, e.signals = s.Paused, s.Signals
	e.chunks = map[string]*chunk{}
	clear(e.shapes)
	e.session = newID()
	e.active.Store(len(e.runs) > 0)
	e.loaded = true
	return nil
}

// Submit queues requests (a table already queued or running is refused)
// and returns once they are saved.
func (e *Engine) Submit(ctx context.Context, reqs ...Request) error {
	return e.submit(ctx, false, reqs)
}

// Restart queues req, ending a run of its table queued or running first,
// so the table is read again from its first key: the rows such a run read
// already are stale after DDL that changed values without row changes (a
// column recreated or renamed). A replacing run is followed by a
// replacing one (the rows its reset emptied are filled again), one with a
// condition by one of the whole table.
func (e *Engine) Restart(ctx context.Context, req Request) error {
	return e.submit(ctx, true, []Request{req})
}

func (e *Engine) submit(ctx context.Context, restart bool, reqs []Request) error {
	e.saveMu.Lock()
	defer e.saveMu.Unlock()
	if err := e.loadedLocked(ctx); err != nil {
		return err
	}
	e.mu.Lock()
	if restart {
		keep := e.runs[:0]
		for _, r := range e.runs {
			if r.rec.Table != reqs[0].Table {
				keep = append(keep, r)
				continue
			}
			r.stopped = true
			if r.rec.Replace {
				reqs[0].Replace, reqs[0].Where = true, ""
			}
			e.logger.Info("snapshot restarted from the table's first key", "table", r.rec.Table, "rows_read", r.rows(),
				"origin", reqs[0].Origin)
		}
		clear(e.runs[len(keep):])
		e.runs = keep
		e.reindexLocked()
	}
	for _, req := range reqs {
		if err := e.acceptLocked(req); err != nil {
			e.mu.Unlock()
			return err
		}
	}
	for _, req := range reqs {
		rec := &record{ID: newID(), Request: req, Started: time.Now().UTC(), Last: req.After}
		e.runs = append(e.runs, newRun(rec))
		e.logger.Info("snapshot queued", "table", req.Table, "replace", req.Replace, "where", req.Where, "origin", req.Origin)
	}
	e.active.Store(true)
	b, err := e.marshalLocked()
	e.mu.Unlock()
	if err == nil {
		err = e.state.Save(ctx, e.cfg.StateKey, b)
	}
	e.poke()
	return err
}

func (e *Engine) acceptLocked(req Request) error {
	if req.Table == "" {
		return fmt.Errorf("%w: no table named", ErrBadRequest)
	}
	if req.Replace && req.Where != "" {
		return fmt.Errorf("%w: %s: --where reads part of a table, --replace replaces all of it; use one", ErrBadRequest, req.Table)
	}
	if req.After != nil && (req.Replace || req.Where != "") {
		return fmt.Errorf("%w: %s: a run that goes on after a key neither replaces the table nor reads part of it", ErrBadRequest, req.Table)
	}
	for _, r := range e.runs {
		if r.rec.Table == req.Table {
			return fmt.Errorf("%w: a snapshot of %s is already queued or running (since %s); stop it first",
				ErrBadRequest, req.Table, r.rec.Started.Format(time.RFC3339))
		}
	}
	return nil
}

// Queued reports whether table has a run.
func (e *Engine) Queued(table string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.runs {
		if r.rec.Table == table {
			return true
		}
	}
	return false
}

// Stop ends the runs of tables (all runs when none are named) and returns
// the tables stopped. A replacing run stopped after its reset leaves the
// table incomplete, which is logged.
func (e *Engine) Stop(ctx context.Context, tables ...string) ([]string, error) {
	var stopped []string
	err := e.update(ctx, func() {
		keep := e.runs[:0]
		for _, r := range e.runs {
			if len(tables) > 0 && !slices.Contains(tables, r.rec.Table) {
				keep = append(keep, r)
				continue
			}
			stopped = append(stopped, r.rec.Table)
			r.stopped = true
			if r.rec.Replace && (r.rec.ResetDone || r.resetSeen) || r.rec.After != nil {
				e.logger.Error("snapshot stopped after its reset: the table's mirror lacks the rows not read yet",
					"table", r.rec.Table, "rows_read", r.rows(),
					"what_to_do", "cdcd snapshot --replace "+r.rec.Table+" to fill it again")
			} else {
				e.logger.Info("snapshot stopped", "table", r.rec.Table, "rows_read", r.rows())
			}
		}
		clear(e.runs[len(keep):])
		e.runs = keep
		e.reindexLocked()
	})
	return stopped, err
}

// Pause holds every run after its current chunk until Resume.
func (e *Engine) Pause(ctx context.Context) error {
	return e.update(ctx, func() { e.paused = true })
}

// Resume continues paused runs.
func (e *Engine) Resume(ctx context.Context) error {
	return e.update(ctx, func() { e.paused = false })
}

// Signalled records a signal id; false when it was handled before.
func (e *Engine) Signalled(ctx context.Context, id string) (bool, error) {
	first := false
	err := e.update(ctx, func() {
		if slices.Contains(e.signals, id) {
			return
		}
		first = true
		e.signals = append(e.signals, id)
		if len(e.signals) > maxSignals {
			e.signals = slices.Delete(e.signals, 0, len(e.signals)-maxSignals)
		}
	})
	return first, err
}

// update applies fn under the lock and saves the state.
func (e *Engine) update(ctx context.Context, fn func()) error {
	e.saveMu.Lock()
	defer e.saveMu.Unlock()
	if err := e.loadedLocked(ctx); err != nil {
		return err
	}
	e.mu.Lock()
	fn()
	b, err := e.marshalLocked()
	e.active.Store(len(e.runs) > 0)
	e.mu.Unlock()
	e.poke()
	if err != nil {
		return err
	}
	return e.state.Save(ctx, e.cfg.StateKey, b)
}

// save writes the state as it is now.
func (e *Engine) save(ctx context.Context) error { return e.update(ctx, func() {}) }

func (e *Engine) marshalLocked() ([]byte, error) {
	s := saved{Paused: e.paused, Signals: e.signals}
	for _, r := range e.runs {
		rec := *r.rec
		rec.Reread = r.durableReread()
		s.Runs = append(s.Runs, &rec)
	}
	return json.Marshal(s)
}

func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// reindexLocked forgets which table versions belong to which run.
func (e *Engine) reindexLocked() {
	clear(e.shapes)
	e.active.Store(len(e.runs) > 0)
}

// runOf returns the run of a table version, nil when it has none.
func (e *Engine) runOfLocked(t *schema.Table) *run {
	if r, ok := e.shapes[t]; ok {
		return r
	}
	var found *run
	name := t.QualifiedName()
	for _, r := range e.runs {
		if r.rec.Table == name {
			found = r
			break
		}
	}
	e.shapes[t] = found
	return found
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
