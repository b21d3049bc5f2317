package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
	"github.com/cdcd-dev/cdcd/source"
)

func TestMain(m *testing.M) { mariadbtest.Main(m) }

func TestStreamChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), n BIGINT UNSIGNED)",
		"CREATE TABLE other (id INT PRIMARY KEY)")
	d := newDedupe(4)
	e.reader(t, newMemState(), d, "t")
	e.exec(t,
		"BEGIN", "INSERT INTO other VALUES (1)", "INSERT INTO t VALUES (1, 'a', 18446744073709551615), (2, 'b', NULL)", "COMMIT",
		"UPDATE t SET v = 'c' WHERE id = 2",
		"UPDATE t SET id = 10 WHERE id = 1",
		"DELETE FROM t WHERE id = 2",
		"TRUNCATE TABLE t")
	got := d.waitFor(t, "7 changes", func(cs []source.Change) bool { return len(cs) >= 7 })
	want := []struct {
		op     source.Op
		before string
		after  string
	}{
		{source.OpCreate, "[]", "[1 a 18446744073709551615]"},
		{source.OpCreate, "[]", "[2 b <nil>]"},
		{source.OpUpdate, "[2 b <nil>]", "[2 c <nil>]"},
		{source.OpDelete, "[1 a 18446744073709551615]", "[]"},
		{source.OpCreate, "[]", "[10 a 18446744073709551615]"},
		{source.OpDelete, "[2 c <nil>]", "[]"},
		{source.OpTruncate, "[]", "[]"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d changes, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		c := got[i]
		if c.Op != w.op || fmt.Sprint(c.Before) != w.before || fmt.Sprint(c.After) != w.after {
			t.Errorf("change %d: %s %v → %v, want %s %s → %s", i, c.Op, c.Before, c.After, w.op, w.before, w.after)
		}
		if c.Table.QualifiedName() != e.name+".t" {
			t.Errorf("change %d: table %s", i, c.Table.QualifiedName())
		}
	}
	// The first transaction's rows follow the other table's row: indexes 1, 2.
	ord0, idx0, _ := ParsePosition(got[0].Pos)
	ord1, idx1, _ := ParsePosition(got[1].Pos)
	if ord0 != ord1 || idx0 != 1 || idx1 != 2 || got[0].TxID != ord0 {
		t.Errorf("first transaction: positions (%d,%d) (%d,%d), txid %d", ord0, idx0, ord1, idx1, got[0].TxID)
	}
	// Where each row was read (Debezium's source.file, pos, row, server_id,
	// gtid): the two rows of one event share its position, rows counted.
	b0, b1, b2 := got[0].Binlog, got[1].Binlog, got[2].Binlog
	if b0 == nil || b1 == nil || b2 == nil || b0.File == "" || b0.Pos == 0 || b0.ServerID == 0 || b0.GTID == "" {
		t.Fatalf("binlog places %+v %+v", b0, b1)
	}
	if b1.Pos != b0.Pos || b0.Row != 0 || b1.Row != 1 || b1.GTID != b0.GTID || b2.Pos <= b0.Pos || b2.GTID == b0.GTID || b2.Row != 0 {
		t.Errorf("binlog places %+v %+v %+v", *b0, *b1, *b2)
	}
	// A key change is a delete and an insert at consecutive indexes of one transaction.
	ordD, idxD, _ := ParsePosition(got[3].Pos)
	ordI, idxI, _ := ParsePosition(got[4].Pos)
	if ordD != ordI || idxI != idxD+1 {
		t.Errorf("key change positions (%d,%d) (%d,%d)", ordD, idxD, ordI, idxI)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Pos.Compare(got[i-1].Pos) <= 0 {
			t.Errorf("position %d (%x) not after %x", i, got[i].Pos, got[i-1].Pos)
		}
	}
	if k := got[0].Table.Key; len(k) != 1 || k[0] != 0 {
		t.Errorf("key %v", k)
	}
}

// TestResumeNoLossNoDup stops the reader mid-batch (the emitter keeps half
// of a batch and fails, as a crash mid-append may leave the log), then
// starts a new reader on the same state: every row arrives exactly once.
func TestResumeNoLossNoDup(t *testing.T) {
	t.Parallel()
	t.Run("emit", func(t *testing.T) { t.Parallel(); testResumeNoLossNoDup(t, false) })
	// An Emitter that pipelines: batches submitted and not yet synced are
	// lost with the failure, as an append in flight is.
	t.Run("pipelined", func(t *testing.T) { t.Parallel(); testResumeNoLossNoDup(t, true) })
}

func testResumeNoLossNoDup(t *testing.T, pipelined bool) {
	e := newEnv(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
	st := newMemState()
	d := newDedupe(4)
	d.failAfter = 3
	small := func(c *Config) { c.BatchMax = 25 }
	var em source.Emitter = d
	if pipelined {
		// One sync may carry every submitted batch: fail the second.
		d.failAfter = 1
		em = &pipelining{d: d}
	}
	_, stop := e.reader(t, st, em, "t", small)
	e.insertTxs(t, 0, 150)
	d.waitFor(t, "a first durable batch", func(cs []source.Change) bool { return len(cs) > 0 })
	e.insertTxs(t, 150, 300)
	deadline := time.Now().Add(60 * time.Second)
	failing := func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.failAfter != 0
	}
	for d.snapshot() == nil || failing() {
		if time.Now().After(deadline) {
			d.mu.Lock()
			t.Fatalf("the planned failure did not happen: %d batches, %d kept", d.batches, len(d.kept))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The failed batch's error is on its way out of Run; the cancel may
	// overtake it (Run then ends with the cancel's error), which leaves
	// the reader where the failure did.
	if err := stop(); !errors.Is(err, errPlannedFailure) && !errors.Is(err, context.Canceled) {
		t.Fatalf("first run ended with %v, want the planned failure", err)
	}
	e.insertTxs(t, 300, 400)
	if pipelined {
		first := em.(*pipelining)
		em = &pipelining{d: d} // a new process: what was submitted and not synced is gone
		defer func() {
			first.mu.Lock()
			defer first.mu.Unlock()
			if first.submits+em.(*pipelining).submits == 0 {
				t.Error("the reader never submitted a batch without syncing it: the pipelined path was not exercised")
			}
		}()
	}
	e.reader(t, st, em, "t", small)
	keptOnce(t, d.waitFor(t, "400 rows", func(cs []source.Change) bool { return len(cs) >= 400 }), 400)
	d.mu.Lock()
	dropped := d.dropped
	d.mu.Unlock()
	if dropped == 0 {
		t.Error("nothing was sent twice: the test did not exercise the dedupe")
	}
}

// TestPipelinedStop: a reader stopped while batches it submitted wait
// for a sync (no checkpoint and no quiet moment came), whose flush on
// stop fails, saves no checkpoint past them; the next process, which
// never got them, reads them again.
func TestPipelinedStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
	st := newMemState()
	d := newDedupe(4)
	p := &pipelining{d: d}
	_, stop := e.reader(t, st, p, "t", func(c *Config) { c.BatchMax, c.BatchDelay, c.CheckpointInterval = 25, time.Hour, time.Hour })
	e.insertTxs(t, 0, 100)
	deadline := time.Now().Add(60 * time.Second)
	for p.submitted() < 75 {
		if time.Now().After(deadline) {
			t.Fatalf("%d changes submitted, want 75 (three full batches)", p.submitted())
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.mu.Lock()
	p.refuse = true // the stop's flush fails: the process died with its submitted batches
	p.mu.Unlock()
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if n := len(d.snapshot()); n != 0 {
		t.Fatalf("%d changes durable before any sync", n)
	}
	e.reader(t, st, d, "t") // a new process: what was submitted and not synced is gone
	keptOnce(t, d.waitFor(t, "100 rows", func(cs []source.Change) bool { return len(cs) >= 100 }), 100)
}

// insertTxs inserts rows (id, id) for ids from to to-1 into t, in
// transactions of 10.
func (e *env) insertTxs(t *testing.T, from, to int) {
	t.Helper()
	for i := from; i < to; i += 10 {
		e.exec(t, "BEGIN")
		for j := i; j < i+10; j++ {
			e.exec(t, fmt.Sprintf("INSERT INTO t VALUES (%d, %d)", j, j))
		}
		e.exec(t, "COMMIT")
	}
}

// keptOnce checks that got holds rows 0 to n-1 of t, each once.
func keptOnce(t *testing.T, got []source.Change, n int) {
	t.Helper()
	seen := map[string]int{}
	for _, c := range got {
		seen[keyOf(c)]++
	}
	for i := range n {
		if k := seen[fmt.Sprintf("[%d]", i)]; k != 1 {
			t.Errorf("row %d kept %d times", i, k)
		}
	}
	if len(got) != n {
		t.Errorf("kept %d changes, want %d", len(got), n)
	}
}

// TestPurgedBinlogs: a checkpoint whose following binlogs were purged stops
// the reader with a PurgedError, never a jump.
func TestPurgedBinlogs(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.NewServer(t, mariadbserver.Options{})
	dsn := mariadbtest.NewDBOn(t, srv)
	db, err := mariadbserver.OpenDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e := &env{dsn: dsn, db: db, srv: srv}
	var name string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	e.name = name
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY)")
	st := newMemState()
	d := newDedupe(2)
	_, stop := e.reader(t, st, d, "t")
	e.exec(t, "INSERT INTO t VALUES (1)")
	d.waitFor(t, "row 1", func(cs []source.Change) bool { return len(cs) == 1 })
	time.Sleep(200 * time.Millisecond) // a checkpoint after it
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("stop: %v", err)
	}
	e.exec(t, "INSERT INTO t VALUES (2)", "FLUSH BINARY LOGS", "INSERT INTO t VALUES (3)", "FLUSH BINARY LOGS")
	var file string
	var pos int64
	rows, err := db.Query("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	cols, _ := rows.Columns()
	vals := make([]any, len(cols))
	vals[0], vals[1] = &file, &pos
	for i := 2; i < len(vals); i++ {
		vals[i] = new(any)
	}
	for rows.Next() {
		if err := rows.Scan(vals...); err != nil {
			t.Fatal(err)
		}
	}
	rows.Close()
	// The old dump thread may still hold the old files open; PURGE would skip them.
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d binlog dump threads still running", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// MariaDB keeps a binlog until InnoDB has checkpointed its transactions
	// (PURGE only warns): retry until the old files are gone.
	for deadline := time.Now().Add(30 * time.Second); ; {
		e.exec(t, "PURGE BINARY LOGS TO '"+file+"'")
		var first string
		var size int64
		rows, err := db.Query("SHOW BINARY LOGS")
		if err != nil {
			t.Fatal(err)
		}
		if rows.Next() {
			rows.Scan(&first, &size)
		}
		rows.Close()
		if first == file {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("binlogs before %s not purged (first is %s)", file, first)
		}
		time.Sleep(200 * time.Millisecond)
	}

	r := New(Config{DSN: srv.ReplDSN(name), ServerID: mariadbtest.ServerID(t), Tables: []string{name + ".t"}}, st, discard)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = r.Run(ctx, d)
	var pe *PurgedError
	if !errors.As(err, &pe) {
		t.Fatalf("Run after purge: %v, want a PurgedError", err)
	}
	t.Logf("%v", err)
	if got := d.snapshot(); len(got) != 1 {
		t.Errorf("kept %d changes after the purge, want 1", len(got))
	}
}

func TestLag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY)")
	d := newDedupe(1)
	r, _ := e.reader(t, newMemState(), d, "t")
	e.exec(t, "INSERT INTO t VALUES (1)")
	d.waitFor(t, "the row", func(cs []source.Change) bool { return len(cs) == 1 })
	l, err := r.Lag(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if l.ServerFile == "" || l.File != l.ServerFile || l.Pos == 0 || l.Bytes < 0 || l.Bytes > int64(l.ServerPos) {
		t.Errorf("lag %+v", l)
	}
	if n := lagBytes([]binlogFile{{"b.1", 100}, {"b.2", 50}, {"b.3", 10}}, "b.2", 20); n != 40 {
		t.Errorf("lagBytes = %d, want 40", n)
	}
}

// TestValueFault: a zero date in a DATE primary key cannot be carried; its
// change carries a Fault naming table, column and value (for the emitter
// to stop that table alone) and the reader goes on.
func TestValueFault(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE t (d DATE PRIMARY KEY, v INT)")
	d := newDedupe(1)
	e.reader(t, newMemState(), d, "t")
	e.session(t, "SET SESSION sql_mode = ''", "INSERT INTO t VALUES ('0000-00-00', 1)", "INSERT INTO t VALUES ('2024-01-01', 2)")
	got := d.waitFor(t, "2 changes", func(cs []source.Change) bool { return len(cs) >= 2 })
	f := got[0].Fault
	if f == nil || f.Column != "d" || f.Value != "0000-00-00" || !strings.Contains(f.Reason, e.name+".t") ||
		!strings.Contains(f.Fix, "cdcd snapshot -c FILE --replace "+e.name+".t") || got[0].After[0] != nil || got[0].After[1] != int64(1) {
		t.Errorf("the faulty change: %+v, fault %+v", got[0], f)
	}
	if got[1].Fault != nil || got[1].After[1] != int64(2) {
		t.Errorf("the next change: %+v", got[1])
	}
}

// TestHandoverSlowSubmit: with an Emitter that pipelines, a streamed
// batch's Submit runs on the hand-over's goroutine while the stream
// decodes the next batch into its spare buffers (handover.go). A Submit
// that reads its batch only after a pause must find every row as
// decoded: were the in-flight rows' arena or binlog places used again
// too early, rows would arrive twice and others not at all, or with
// another row's values or place.
func TestHandoverSlowSubmit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
	d := newDedupe(4)
	p := &slowSubmit{pipelining: &pipelining{d: d}, pause: 3 * time.Millisecond}
	e.reader(t, newMemState(), p, "t", func(c *Config) { c.BatchMax = 40 })
	const n = 3000
	const per = 30 // rows a statement (a row event): the batch is handed over between events
	for i := 0; i < n; i += per {
		var vals []string
		for j := i; j < i+per; j++ {
			vals = append(vals, fmt.Sprintf("(%d, %d)", j, j))
		}
		e.exec(t, "INSERT INTO t VALUES "+strings.Join(vals, ", "))
	}
	got := d.waitFor(t, fmt.Sprint(n, " rows"), func(cs []source.Change) bool { return len(cs) >= n })
	keptOnce(t, got, n)
	for _, c := range got {
		if fmt.Sprint(c.After[0]) != fmt.Sprint(c.After[1]) {
			t.Errorf("row %v: values of another row", c.After)
		}
		// Rows of one event: row index = id modulo the statement's rows.
		if id, _ := c.After[0].(int64); c.Binlog == nil || int64(c.Binlog.Row) != id%per {
			t.Errorf("row %v: binlog place %+v", c.After, c.Binlog)
		}
	}
	if p.submitted.Load() < n/per/4 {
		t.Errorf("%d Submits: the pipelined hand-over was not exercised", p.submitted.Load())
	}
}

// slowSubmit is pipelining whose Submit pauses before it reads its batch.
type slowSubmit struct {
	*pipelining
	pause     time.Duration
	submitted atomic.Int64
}

func (s *slowSubmit) Submit(ctx context.Context, batch []source.Change) error {
	time.Sleep(s.pause)
	s.submitted.Add(1)
	cp := make([]source.Change, len(batch))
	for i, c := range batch {
		if c.Binlog != nil {
			b := *c.Binlog
			c.Binlog = &b
		}
		cp[i] = c
	}
	return s.pipelining.Submit(ctx, cp)
}
