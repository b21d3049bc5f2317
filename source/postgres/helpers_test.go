package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

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
	notify    chan struct{}
}

var errPlannedFailure = errors.New("test: planned emitter failure")

func newDedupe(parts int32) *dedupe {
	return &dedupe{parts: parts, last: map[string][]source.Position{}, notify: make(chan struct{}, 1)}
}

func (d *dedupe) Emit(_ context.Context, batch []source.Change) error {
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
		if c.Op == source.OpTruncate {
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
		c.Before, c.After = ownRow(c.Before), ownRow(c.After)
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
			d.mu.Lock()
			batches, dropped := d.batches, d.dropped
			d.mu.Unlock()
			t.Logf("goroutines of this package at the timeout:\n%s", packageStacks())
			t.Fatalf("timed out waiting for %s; %d changes kept (%d batches emitted, %d changes dropped as repeats)",
				what, len(got), batches, dropped)
		}
	}
}

// packageStacks returns the stacks of the goroutines running this
// package's code: what a reader stuck without a word was waiting for.
func packageStacks() string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "cdcd/source/postgres.") && !strings.Contains(g, "testing.tRunner") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// keyOf renders a change's key for maps.
func keyOf(c source.Change) string { return fmt.Sprint(c.Key()) }

var discard = slog.New(slog.DiscardHandler)

func errorsAs(err error, target any) bool { return err != nil && errors.As(err, target) }

// syncBuffer is a log destination tests read while a reader writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// newBufferLogger logs text records, debug and up, into b.
func newBufferLogger(b *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func itoa(n int) string { return fmt.Sprint(n) }

// ownRow copies row with values of its own. The initial load reuses the
// slab its rows' numbers and texts point into once the Emitter has taken
// the batch (an Emitter keeps nothing of a batch after Emit or Submit
// returns), and so do range chunks, so a test Emitter that keeps rows
// copies the values, not only the slice (snapshot.OwnValues: a boxed
// number is boxed again, a string cloned).
func ownRow(row []any) []any { return snapshot.OwnValues(row) }
