package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/source"
)

// TestLargeTransactionWhilePublicationCheckDue: a transaction still
// arriving when the publication check comes due (here every 20 ms) is
// read to its end: the check waits for it, and so must no receive.
// Before, the due check made every receive's deadline one already past,
// so a transaction with a message larger than what was buffered (a large
// value) was never read on (found with a 20 MB value, the daemon stuck
// in "streaming" for minutes).
func TestLargeTransactionWhilePublicationCheckDue(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE big (id int PRIMARY KEY, v text)`)
	c := newCollector()
	stop, _ := e.startReader(t, []string{"big"}, false, c, func(cfg *Config) { cfg.PublicationCheckInterval = 20 * time.Millisecond })
	defer stop()
	e.exec(t, `INSERT INTO big VALUES (0, 'before')`)
	c.wait(t, 1)
	large := strings.Repeat("abcdefghij", 1<<20) // 10 MB, uncompressed in the WAL: no two alike
	tx, err := e.conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := tx.Exec(t.Context(), `INSERT INTO big VALUES ($1, $2)`, i, large[i:]+large[:i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := c.wait(t, 4)
	for i, ch := range got[1:] {
		if v, _ := ch.After[1].(string); len(v) != len(large) {
			t.Errorf("change %d: value of %d bytes, want %d", i+1, len(v), len(large))
		}
	}
}

// sizeRecorder collects changes and the row bytes of each batch.
type sizeRecorder struct {
	*collector
	mu      sync.Mutex
	batches [][]int // per batch, each change's Bytes
}

func (r *sizeRecorder) Emit(ctx context.Context, batch []source.Change) error {
	sizes := make([]int, len(batch))
	for i := range batch {
		sizes[i] = batch[i].Bytes()
	}
	r.mu.Lock()
	r.batches = append(r.batches, sizes)
	r.mu.Unlock()
	return r.collector.Emit(ctx, batch)
}

// TestBatchesBoundedByBytes: the initial load and the stream cut a batch
// once its rows reach source.BatchBytes, so a table of large values is
// handed on a few rows at a time, not thousands.
func TestBatchesBoundedByBytes(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE big (id int PRIMARY KEY, v text)`)
	value := func(i int) string { return strings.Repeat(string(rune('a'+i)), 6<<20) }
	for i := 1; i <= 5; i++ {
		e.exec(t, `INSERT INTO big VALUES ($1, $2)`, i, value(i))
	}
	r := &sizeRecorder{collector: newCollector()}
	// A batch that waits 5 s: the stream's rows would all be in one.
	stop, _ := e.startReader(t, []string{"big"}, true, r, func(cfg *Config) { cfg.BatchDelay = 5 * time.Second })
	defer stop()
	r.wait(t, 5)
	tx, err := e.conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := 6; i <= 10; i++ {
		if _, err := tx.Exec(t.Context(), `INSERT INTO big VALUES ($1, $2)`, i, value(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := r.wait(t, 10)
	for i, c := range got {
		if v, _ := c.After[1].(string); v != value(i+1) {
			t.Fatalf("change %d: %d bytes", i, len(v))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, b := range r.batches {
		sum := 0
		for _, n := range b[:len(b)-1] {
			sum += n
		}
		if sum >= source.BatchBytes {
			t.Errorf("batch %d of %d changes holds %d bytes before its last: not cut at %d", i, len(b), sum, source.BatchBytes)
		}
	}
	if len(r.batches) < 4 {
		t.Errorf("%d batches for 10 rows of 6 MB", len(r.batches))
	}
}

// TestValueTooLargeRefused: a value larger than a change can be in the
// log, in the initial load and in the stream, comes as a fault naming the
// column and its size, without the value (nil in the row), and the
// changes after it come as usual.
func TestValueTooLargeRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE big (id int PRIMARY KEY, v text)`)
	huge := strings.Repeat("x", source.MaxChangeBytes+1)
	e.exec(t, `INSERT INTO big VALUES (1, $1)`, huge)
	c := newCollector()
	stop, _ := e.startReader(t, []string{"big"}, true, c)
	defer stop()
	c.wait(t, 1)
	e.exec(t, `INSERT INTO big VALUES (2, $1)`, huge)
	e.exec(t, `INSERT INTO big VALUES (3, 'small')`)
	got := c.wait(t, 3)
	for i, ch := range got[:2] {
		f := ch.Fault
		if f == nil || f.Column != "v" || f.Value != fmt.Sprintf("(%d bytes, left out)", len(huge)) || ch.After[1] != nil ||
			!strings.Contains(f.Reason, "more than a change can be in cdcd's log") || !strings.Contains(f.Fix, "masking") {
			t.Errorf("change %d (%s): after[1] is %d bytes, fault %+v", i, ch.Op, len(fmt.Sprint(ch.After[1])), f)
		}
	}
	if got[2].Fault != nil || got[2].After[1] != "small" {
		t.Errorf("the change after: %+v", got[2])
	}
}
