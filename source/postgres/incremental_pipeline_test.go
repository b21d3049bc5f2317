package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// pipeMirror is a mirror behind a pipelining Emitter (source.Pipeliner):
// a submitted batch becomes durable (applied to the mirror) only at the
// next Sync or Emit. On every call it checks what exactly-once needs: no
// change still pending has a position the reader already confirmed to
// the server.
type pipeMirror struct {
	*mirror
	r          atomic.Pointer[Reader]
	mu         sync.Mutex
	pending    []source.Change
	submitted  int // changes handed over by Submit
	violations []string
}

var _ source.Pipeliner = (*pipeMirror)(nil)

func (p *pipeMirror) Submit(_ context.Context, batch []source.Change) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.check("Submit")
	for _, c := range batch { // the source reuses batch: keep copies
		c.Before, c.After = ownRow(c.Before), ownRow(c.After)
		p.pending = append(p.pending, c)
	}
	p.submitted += len(batch)
	return nil
}

func (p *pipeMirror) Sync(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.check("Sync")
	return p.drain(ctx)
}

func (p *pipeMirror) Emit(ctx context.Context, batch []source.Change) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.check("Emit")
	if err := p.drain(ctx); err != nil {
		return err
	}
	return p.mirror.Emit(ctx, batch)
}

// drain makes the pending batches durable, in the order submitted.
func (p *pipeMirror) drain(ctx context.Context) error {
	err := p.mirror.Emit(ctx, p.pending)
	p.pending = nil
	return err
}

// check records every pending change at or below the confirmed position.
func (p *pipeMirror) check(call string) {
	r := p.r.Load()
	if r == nil {
		return
	}
	flushed := r.Stats().Flushed.Load()
	for _, c := range p.pending {
		if c.LSN != 0 && c.LSN <= flushed && len(p.violations) < 10 {
			p.violations = append(p.violations, fmt.Sprintf("at %s: %X confirmed while a change of %s at %X was not durable", call, flushed, c.Table.QualifiedName(), c.LSN))
		}
	}
}

// TestIncrementalPipelined: a replacing snapshot under writes into an
// Emitter that pipelines: the chunks go through Submit (the stream goes on
// while they become durable), the position confirmed to the server never
// covers a change not yet durable, and the mirror ends equal to the table.
func TestIncrementalPipelined(t *testing.T) {
	t.Parallel()
	e := setup(t, incrementalTable)
	p := &pipeMirror{mirror: newMirror(4)}
	_, r := e.startReader(t, []string{"hot"}, false, p, func(c *Config) {
		c.Incremental.ChunkRows = 100
		c.StatusInterval = 10 * time.Millisecond // confirm often: a premature confirm shows
	})
	p.r.Store(r)
	replaceUnderWrites(t, e, r, p.mirror)
	p.mu.Lock()
	p.check("end")
	violations, submitted := p.violations, p.submitted
	p.mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	if submitted < 2000 {
		t.Errorf("%d changes went through Submit, want most of the 3000 rows read", submitted)
	}
	compareMirror(t, p.mirror, e.conn, "hot")
}

// replaceUnderWrites runs a replacing snapshot of hot while writers
// hammer its keys, then waits until m holds a row written after both.
func replaceUnderWrites(t *testing.T, e *env, r *Reader, m *mirror) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	werr := make(chan error, 1)
	go func() {
		_, err := hotWorkload(ctx, e.dsn, "hot", 4000, uint64(time.Now().UnixNano()))
		werr <- err
	}()
	if err := r.Snapshots().Submit(t.Context(), snapshot.Request{Table: "public.hot", Replace: true, Origin: "test"}); err != nil {
		cancel()
		t.Fatal(err)
	}
	waitProgress(t, r, 1, 60*time.Second)
	cancel()
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	e.exec(t, "INSERT INTO hot VALUES (-1, 'end', NULL)")
	waitSettled(t, r, m, "public.hot", -1)
}

// TestIncrementalDoneAtDurable: a snapshot is done once its rows are
// durable, not at the next periodic status: with an hour between statuses
// the run still ends (its progress saved, the slot confirmed past it)
// right after the flush that makes its last chunk durable.
func TestIncrementalDoneAtDurable(t *testing.T) {
	t.Parallel()
	e := setup(t, incrementalTable)
	p := &pipeMirror{mirror: newMirror(4)}
	_, r := e.startReader(t, []string{"hot"}, false, p, func(c *Config) {
		c.Incremental.ChunkRows = 500
		c.StatusInterval = time.Hour
		// No heartbeat either: its arrival moves the position and
		// checkpoints too, so it hid a run that waited for the next
		// status (CI once: done after 20 s, at the second heartbeat).
		c.HeartbeatInterval = -1
	})
	p.r.Store(r)
	if err := r.Snapshots().Submit(t.Context(), snapshot.Request{Table: "public.hot", Origin: "test"}); err != nil {
		t.Fatal(err)
	}
	// Well within the server's keepalive (wal_sender_timeout / 2, 30 s),
	// whose reply would be a status too; statuses are an hour apart.
	waitProgress(t, r, 1, 20*time.Second)
	p.mu.Lock()
	p.check("end")
	violations := p.violations
	p.mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	if r.Stats().Flushed.Load() == 0 {
		t.Error("the snapshot is done and nothing was confirmed")
	}
	compareMirror(t, p.mirror, e.conn, "hot")
}

// syncCounter is a pipeMirror that counts the Emits (each a sync of
// everything submitted) that carry a snapshot's row.
type syncCounter struct {
	*pipeMirror
	emits atomic.Int64
}

func (c *syncCounter) Emit(ctx context.Context, batch []source.Change) error {
	for i := range batch {
		if batch[i].Snapshot {
			c.emits.Add(1)
			break
		}
	}
	return c.pipeMirror.Emit(ctx, batch)
}

// TestIncrementalChunksShareSyncs: pipelined chunks that follow each other
// closely are not each followed by a flush whose sync the stream waits
// for (it did after every chunk: most of a snapshot's wall time under
// load); at most one a syncEvery forces one. Nothing is confirmed before
// it is durable, and the mirror ends equal to the table.
func TestIncrementalChunksShareSyncs(t *testing.T) {
	t.Parallel()
	e := setup(t, incrementalTable)
	p := &syncCounter{pipeMirror: &pipeMirror{mirror: newMirror(4)}}
	_, r := e.startReader(t, []string{"hot"}, false, p, func(c *Config) {
		c.Incremental.ChunkRows = 20
		c.BatchDelay = 2 * time.Second // no flush by age while the chunks come
		c.StatusInterval = 10 * time.Millisecond
	})
	p.r.Store(r)
	began := time.Now()
	if err := r.Snapshots().Submit(t.Context(), snapshot.Request{Table: "public.hot", Origin: "test"}); err != nil {
		t.Fatal(err)
	}
	waitProgress(t, r, 1, 60*time.Second)
	took := time.Since(began)
	chunks, emits := r.Snapshots().Timings().Chunks, p.emits.Load()
	t.Logf("%d chunks in %s, %d Emits with a snapshot's rows", chunks, took, emits)
	if chunks < 150 {
		t.Fatalf("%d chunks met, want the table's 3000 rows in 20-row chunks", chunks)
	}
	if most := int64(took/syncEvery) + 2; emits > most || emits >= chunks/2 {
		t.Errorf("%d Emits carried a snapshot's rows for %d chunks in %s; want at most one a %s (%d)", emits, chunks, took, syncEvery, most)
	}
	p.mu.Lock()
	p.check("end")
	violations := p.violations
	p.mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	compareMirror(t, p.mirror, e.conn, "hot")
}
