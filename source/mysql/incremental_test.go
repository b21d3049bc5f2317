package mysql

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// grantWatermarks creates the watermark table as root and grants the
// reader's user what it needs (it may not create tables).
func (e *env) grantWatermarks(t *testing.T) string {
	t.Helper()
	wt := e.name + ".cdcd_watermark"
	if err := ensureWatermarkTable(context.Background(), e.db, wt); err != nil {
		t.Fatal(err)
	}
	e.exec(t, fmt.Sprintf("GRANT SELECT, INSERT, UPDATE ON `%s`.`cdcd_watermark` TO '%s'@'%%'", e.name, mariadbserver.ReplUser))
	return wt
}

// fold applies kept changes in order: the mirror a sink would hold.
func fold(cs []source.Change, table string) map[string]string {
	m := map[string]string{}
	for _, c := range cs {
		if c.Table.QualifiedName() != table {
			continue
		}
		switch c.Op {
		case source.OpTruncate:
			clear(m)
		case source.OpDelete:
			delete(m, keyOf(c))
		default:
			m[keyOf(c)] = fmt.Sprint(c.After)
		}
	}
	return m
}

// sourceRows reads the table as fold renders it (key columns first in
// the table).
func (e *env) sourceRows(t *testing.T, r *Reader, table string) map[string]string {
	t.Helper()
	d := &myDatabase{db: e.db, flavor: FlavorMariaDB}
	p, err := d.Plan(context.Background(), table, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	if p.Upper == nil {
		return m
	}
	ch, err := d.ReadChunk(context.Background(), table, nil, snapshot.ChunkQuery{Upper: p.Upper, Limit: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ch.Rows {
		m[keyOf(c)] = fmt.Sprint(c.After)
	}
	return m
}

func diffRows(got, want map[string]string) string {
	var out []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			out = append(out, "missing "+k)
		} else if g != w {
			out = append(out, fmt.Sprintf("%s: got %s want %s", k, g, w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			out = append(out, "resurrected or extra "+k)
		}
	}
	sort.Strings(out)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("… %d differences", len(out)))
	}
	return strings.Join(out, "\n")
}

// hammer writes to exactly the keys being chunked until stop: updates,
// deletes, inserts inside and beyond the upper bound, key changes.
func (e *env) hammer(t *testing.T, table string, n int, seed uint64, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 1))
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := rng.IntN(n + n/5)
			var q string
			switch rng.IntN(6) {
			case 0, 1:
				q = fmt.Sprintf("UPDATE %s SET v = v + 1, note = 'u%d' WHERE id = %d", table, i, k)
			case 2:
				q = fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, k)
			case 3:
				q = fmt.Sprintf("INSERT INTO %s (id, g, v, note) VALUES (%d, 'b', 0, 'i%d') ON DUPLICATE KEY UPDATE v = v + 100", table, k, i)
			case 4:
				q = fmt.Sprintf("UPDATE %s SET id = %d WHERE id = %d", table, n+n/5+rng.IntN(n), k) // a key change
			case 5:
				q = fmt.Sprintf("INSERT IGNORE INTO %s (id, g, v, note) VALUES (%d, 'a', 1, 'beyond')", table, n*3+i)
			}
			if _, err := e.db.Exec(q); err != nil && !strings.Contains(err.Error(), "Duplicate") {
				t.Errorf("%s: %v", q, err)
				return
			}
		}
	}()
	return &wg
}

// TestIncrementalLoad: a new pipeline loads its table by chunks while a
// writer hammers exactly the keys being chunked, and the reader is stopped
// mid-load several times (once with half a batch in the log): the folded
// changes equal the table — nothing lost, nothing resurrected — and the
// load began with a reset marker.
//
// Pipelined, the Emitter is a source.Pipeliner: a chunk's rows are
// submitted at their high watermark and the chunk's slices read into
// again (Reader.chunkBufs) while the last row waits in the batch; a row
// kept without a copy of its values, or slices given back while still in
// use, would fold into wrong rows.
func TestIncrementalLoad(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"watermark table", "pipelined", "read-only"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testIncrementalLoad(t, mode == "read-only", mode == "pipelined")
		})
	}
}

// testIncrementalLoad is TestIncrementalLoad with watermark rows or, read
// only, watermarks at GTID positions (no grant on any table but SELECT).
func testIncrementalLoad(t *testing.T, readOnly, pipelined bool) {
	e := newEnv(t)
	const n = 3000
	e.exec(t, "CREATE TABLE t (id INT NOT NULL, g VARCHAR(8) NOT NULL, v INT, note VARCHAR(40), PRIMARY KEY (id, g))")
	var vals []string
	for i := range n {
		vals = append(vals, fmt.Sprintf("(%d, 'a', %d, 'row %d')", i, i, i))
	}
	e.exec(t, "INSERT INTO t VALUES "+strings.Join(vals, ", "))
	wt := ""
	if !readOnly {
		wt = e.grantWatermarks(t)
	}
	table := e.name + ".t"
	st := newMemState()
	d := newDedupe(4)
	var em source.Emitter = d
	p := &pipelining{d: d}
	if pipelined {
		em = p
	}
	if readOnly {
		// A stream that lags meets several watermarks after one
		// transaction; each chunk's rows must still take positions of
		// their own.
		d.slow = 15 * time.Millisecond
	}
	stopW := make(chan struct{})
	wg := e.hammer(t, "t", n, 7, stopW)
	var once sync.Once
	stopWriter := func() { once.Do(func() { close(stopW); wg.Wait() }) }
	t.Cleanup(stopWriter)
	// Throttled, so the load spans the restarts.
	var r0 *Reader
	opts := func(c *Config) {
		c.WatermarkTable, c.ReadOnly, c.Load, c.ChunkRows, c.MaxRowsPerSecond = wt, readOnly, true, 97, 1200
	}
	for round := 0; round < 4; round++ {
		if round > 0 && loaded(r0, table) {
			t.Fatalf("the load finished before restart %d: make it slower", round)
		}
		if round == 2 {
			d.mu.Lock()
			d.failAfter = d.batches + 3
			d.mu.Unlock()
		}
		r, stop := e.reader(t, st, em, "t", opts)
		r0 = r
		time.Sleep(time.Duration(300+rand.IntN(400)) * time.Millisecond)
		err := stop()
		if err != nil && err != context.Canceled && !errorsAs(err, new(*connError)) && !strings.Contains(err.Error(), "planned") {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	r, stop := e.reader(t, st, em, "t", opts)
	defer stop()
	deadline := time.Now().Add(120 * time.Second)
	for !loaded(r, table) {
		if time.Now().After(deadline) {
			t.Fatalf("the load did not finish: %+v", r.Snapshots().Progress())
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopWriter()
	e.exec(t, "UPDATE t SET note = 'last' WHERE id = 1") // a last change to wait for
	want := e.sourceRows(t, r, table)
	var got map[string]string
	d.waitFor(t, "the folded changes equal to the table", func(cs []source.Change) bool {
		got = fold(cs, table)
		return diffRows(got, want) == ""
	})
	kept := d.snapshot()
	reads, resets := 0, 0
	for _, c := range kept {
		switch {
		case c.Reset != "":
			resets++
		case c.Op == source.OpRead && resets == 0:
			t.Fatalf("a row read before the reset marker: %v", c.After)
		case c.Op == source.OpRead:
			reads++
		}
	}
	if resets != 1 { // kept once (in every partition), also across restarts
		t.Errorf("%d reset markers kept, want 1", resets)
	}
	if reads < n/2 {
		t.Errorf("only %d rows read by the load", reads)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pipelined && p.submits == 0 {
		t.Error("nothing was submitted: the pipelined hand-over was not exercised")
	}
	t.Logf("%d rows in the table, %d changes kept (%d read), %d dropped as already held", len(want), len(kept), reads, d.dropped)
}

// loaded reports whether table's snapshot finished (in this reader, or
// in one before it: then no run of it is left).
func loaded(r *Reader, table string) bool {
	for _, p := range r.Snapshots().Progress() {
		if p.Table == table && p.Finished.IsZero() {
			return false
		}
	}
	return true
}

// TestReadOnlyLoadQuiet: read-only watermarks on a server nothing else
// writes to all stand at one binlog position; every chunk's rows still
// reach the log (each mark takes a position of its own).
func TestReadOnlyLoadQuiet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE q (id BIGINT UNSIGNED PRIMARY KEY, b VARBINARY(8), d DECIMAL(30,2), at DATETIME(6))")
	var vals []string
	for i := range 1000 {
		vals = append(vals, fmt.Sprintf("(%d, x'%04x', %d.50, '2024-01-01 00:00:00.%06d')", uint64(1)<<63+uint64(i), i, i, i))
	}
	e.exec(t, "INSERT INTO q VALUES "+strings.Join(vals, ", "))
	d := newDedupe(3)
	r, _ := e.reader(t, newMemState(), d, "q", func(c *Config) { c.ReadOnly, c.Load, c.ChunkRows = true, true, 37 })
	table := e.name + ".q"
	want := e.sourceRows(t, r, table)
	d.waitFor(t, "the folded changes equal to the table", func(cs []source.Change) bool {
		return diffRows(fold(cs, table), want) == ""
	})
}

// TestReadOnlyResetAfterCrash: a read-only load whose process dies after
// its upper bound was saved but before its reset marker was known durable
// places the marker where it was before, not a second time later (a second
// truncate would empty the rows streamed in between, above the bound).
func TestReadOnlyResetAfterCrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 2000
	e.exec(t, "CREATE TABLE t (id INT NOT NULL, g VARCHAR(8) NOT NULL, v INT, note VARCHAR(40), PRIMARY KEY (id, g))")
	var vals []string
	for i := range n {
		vals = append(vals, fmt.Sprintf("(%d, 'a', %d, 'row %d')", i, i, i))
	}
	e.exec(t, "INSERT INTO t VALUES "+strings.Join(vals, ", "))
	table := e.name + ".t"
	st := newMemState()
	d := newDedupe(3)
	stopW := make(chan struct{})
	wg := e.hammer(t, "t", n, 9, stopW)
	var once sync.Once
	stopWriter := func() { once.Do(func() { close(stopW); wg.Wait() }) }
	t.Cleanup(stopWriter)
	opts := func(c *Config) {
		c.ReadOnly, c.Load, c.ChunkRows, c.MaxRowsPerSecond, c.CheckpointInterval = true, true, 50, 500, time.Second
	}
	_, stop := e.reader(t, st, d, "t", opts)
	// The crash: the state as it was when the bound was saved and the
	// reset not yet durable; the log keeps what came after.
	var crashed *memState
	deadline := time.Now().Add(60 * time.Second)
	for crashed == nil {
		st.mu.Lock()
		inc := string(st.m["mysql/incremental"])
		if strings.Contains(inc, `"planned":true`) && !strings.Contains(inc, `"reset_done":true`) {
			crashed = newMemState()
			for k, v := range st.m {
				crashed.m[k] = append([]byte(nil), v...)
			}
		}
		st.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("never saw the bound saved before the reset was durable")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(700 * time.Millisecond) // rows above the bound stream meanwhile
	if err := stop(); err != nil && err != context.Canceled {
		t.Fatal(err)
	}
	r, stop2 := e.reader(t, crashed, d, "t", opts)
	defer stop2()
	deadline = time.Now().Add(120 * time.Second)
	for !loaded(r, table) {
		if time.Now().After(deadline) {
			t.Fatalf("the load did not finish: %+v", r.Snapshots().Progress())
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopWriter()
	e.exec(t, "UPDATE t SET note = 'last' WHERE id = 1")
	want := e.sourceRows(t, r, table)
	var diff string
	d.waitFor(t, "the folded changes equal to the table", func(cs []source.Change) bool {
		diff = diffRows(fold(cs, table), want)
		return diff == ""
	})
}

// TestChunkSlicesReused: a load handed to an Emitter that pipelines, its
// chunks read back to back into recycled slices (Reader.chunkBufs) while
// each chunk's last row waits in the batch (no flush for seconds): the
// folded changes equal the table. A kept row without a copy of its values
// takes the next chunk's (read into the same slices) and fails this.
func TestChunkSlicesReused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 2000
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY, v INT, note VARCHAR(40))")
	var vals []string
	for i := range n {
		vals = append(vals, fmt.Sprintf("(%d, %d, 'row %d')", i, i*7, i))
	}
	e.exec(t, "INSERT INTO t VALUES "+strings.Join(vals, ", "))
	wt := e.grantWatermarks(t)
	table := e.name + ".t"
	d := newDedupe(4)
	p := &pipelining{d: d}
	r, stop := e.reader(t, newMemState(), p, "t", func(c *Config) {
		c.WatermarkTable, c.Load, c.ChunkRows = wt, true, 97
		c.BatchDelay, c.CheckpointInterval = 3*time.Second, 3*time.Second
	})
	defer stop()
	deadline := time.Now().Add(60 * time.Second)
	for !loaded(r, table) {
		if time.Now().After(deadline) {
			t.Fatalf("the load did not finish: %+v", r.Snapshots().Progress())
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := e.sourceRows(t, r, table)
	var got map[string]string
	d.waitFor(t, "the folded changes equal to the table", func(cs []source.Change) bool {
		got = fold(cs, table)
		return diffRows(got, want) == ""
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.submits < n/97/2 {
		t.Errorf("%d submits for %d chunks: the chunks' rows were not submitted", p.submits, n/97)
	}
}
