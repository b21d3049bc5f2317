package mysql

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// TestStreamSlabReuse: a streamed batch's values are boxed from the
// reusable slab of its set of buffers (handover.go), written again once
// the batch is handed over. A Submit that pauses before it reads its batch
// must find every value as it was when Submit was called, and every change
// the stream keeps past a release (the batch's last, which submitBatch
// keeps; the one releaseRows keeps) must keep its own values: were a slab
// written while its batch is in flight, or a kept change left pointing
// into it, a row would carry another row's number, decimal, double, date
// or text. The columns cover each kind of slab value; the updates give
// every change a before image too.
func TestStreamSlabReuse(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR(40), d DECIMAL(12,2), g DOUBLE, ts DATETIME(6))")
	d := newDedupe(4)
	p := &checkingSubmit{pipelining: &pipelining{d: d}, pause: 3 * time.Millisecond}
	t.Cleanup(func() { p.report(t) }) // also when a wait below fails
	e.reader(t, newMemState(), p, "t", func(c *Config) { c.BatchMax = 40 })
	const n = 2400
	const per = 30 // rows a statement (a row event): the batch is handed over between events
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < n; i += per {
		var vals []string
		for j := i; j < i+per; j++ {
			vals = append(vals, fmt.Sprintf("(%d, 'v%d', %d.%02d, %d.5, '%s')", j, j, j/100, j%100, j,
				base.Add(time.Duration(j)*time.Second+time.Duration(j)*time.Microsecond).Format("2006-01-02 15:04:05.000000")))
		}
		e.exec(t, "INSERT INTO t VALUES "+strings.Join(vals, ", "))
	}
	for i := 0; i < n; i += per {
		e.exec(t, fmt.Sprintf("UPDATE t SET s = CONCAT('u', id), g = g + 1 WHERE id BETWEEN %d AND %d", i, i+per-1))
	}
	got := d.waitFor(t, fmt.Sprint(2*n, " changes"), func(cs []source.Change) bool { return len(cs) >= 2*n })
	if len(got) != 2*n {
		t.Errorf("%d changes, want %d", len(got), 2*n)
	}
	want := func(id int64, s string, g float64) string {
		ts := base.Add(time.Duration(id)*time.Second + time.Duration(id)*time.Microsecond).UnixMicro()
		return fmt.Sprint([]any{id, fmt.Sprintf("%s%d", s, id), fmt.Sprintf("%d.%02d", id/100, id%100), g, ts})
	}
	bad := 0
	for _, c := range got {
		id, _ := c.Key()[0].(int64)
		var w []string
		switch c.Op {
		case source.OpCreate:
			w = []string{"[]", want(id, "v", float64(id)+0.5)}
		case source.OpUpdate:
			w = []string{want(id, "v", float64(id)+0.5), want(id, "u", float64(id)+1.5)}
		}
		if b, a := rowText(c.Before), rowText(c.After); (b != w[0] || a != w[1]) && bad < 10 {
			bad++
			t.Errorf("%s of id %d: before %s after %s; want %s and %s", c.Op, id, b, a, w[0], w[1])
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.submits < n/per/4 {
		t.Errorf("%d Submits: the pipelined hand-over was not exercised", p.submits)
	}
}

func rowText(row []any) string {
	if row == nil {
		return "[]"
	}
	return fmt.Sprint(row)
}

// checkingSubmit is pipelining whose Submit reads its batch's values
// twice, before and after a pause (a log that appends slowly), and
// records every value that changed in between.
type checkingSubmit struct {
	*pipelining
	pause   time.Duration
	mu      sync.Mutex
	moved   []string
	submits int
}

// report fails t with the first changes written over in flight.
func (s *checkingSubmit) report(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.moved[:min(len(s.moved), 10)] {
		t.Error(m)
	}
	if len(s.moved) > 10 {
		t.Errorf("and %d more changes written over in flight", len(s.moved)-10)
	}
}

func (s *checkingSubmit) Submit(ctx context.Context, batch []source.Change) error {
	before := make([]string, len(batch))
	for i, c := range batch {
		before[i] = rowText(c.Before) + rowText(c.After)
	}
	time.Sleep(s.pause)
	cp := make([]source.Change, len(batch))
	s.mu.Lock()
	s.submits++
	for i, c := range batch {
		if now := rowText(c.Before) + rowText(c.After); now != before[i] {
			s.moved = append(s.moved, fmt.Sprintf("a change in flight was written over: %s became %s", before[i], now))
		}
		c.Before, c.After = snapshot.OwnValues(c.Before), snapshot.OwnValues(c.After)
		if c.Binlog != nil {
			b := *c.Binlog
			c.Binlog = &b
		}
		cp[i] = c
	}
	s.mu.Unlock()
	return s.pipelining.Submit(ctx, cp)
}

// TestChunkSlabReuse: a load's chunks decode their values into slabs lent
// with the chunks' slices (chunkSlabs), written again by a later chunk
// once the stream has given the slices back. With a text primary key (the
// chunk's last key is a text the engine keeps to read the next chunk
// after) and every kind of slab value, a pipelined load whose Submit
// pauses must find its rows' values unchanged after the pause, and the
// folded changes must equal the table: a value, a kept row or a last key
// left pointing into a slab written again fails this.
func TestChunkSlabReuse(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 2000
	e.exec(t, "CREATE TABLE t (k VARCHAR(20) PRIMARY KEY, v INT, d DECIMAL(12,2), g DOUBLE, ts DATETIME(6), note VARCHAR(40))")
	var vals []string
	for i := range n {
		vals = append(vals, fmt.Sprintf("('k%05d', %d, %d.%02d, %d.25, '2024-01-01 00:00:%02d.%06d', 'row %d')", i, i*7, i/100, i%100, i, i%60, i, i))
	}
	e.exec(t, "INSERT INTO t VALUES "+strings.Join(vals, ", "))
	wt := e.grantWatermarks(t)
	table := e.name + ".t"
	d := newDedupe(4)
	p := &checkingSubmit{pipelining: &pipelining{d: d}, pause: time.Millisecond}
	t.Cleanup(func() { p.report(t) }) // also when a wait below fails
	r, stop := e.reader(t, newMemState(), p, "t", func(c *Config) {
		c.WatermarkTable, c.Load, c.ChunkRows = wt, true, 97
		c.BatchDelay, c.CheckpointInterval = 3*time.Second, 3*time.Second
	})
	defer stop()
	deadline := time.Now().Add(2 * time.Minute)
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

// TestChunkLastKeyOwned: a chunk's last key is kept by the engine (the
// next chunk's lower bound, the saved progress) after the stream gave the
// chunk's slices back and the next chunk read its values into the same
// slabs (chunkSlabs): a text key must not change with them.
func TestChunkLastKeyOwned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE lk (k VARCHAR(20) PRIMARY KEY, v INT)")
	var vals []string
	for i := range 20 {
		vals = append(vals, fmt.Sprintf("('k%05d', %d)", i, i))
	}
	e.exec(t, "INSERT INTO lk VALUES "+strings.Join(vals, ", "))
	ci, err := parseDSN(e.srv.ReplDSN(e.name))
	if err != nil {
		t.Fatal(err)
	}
	bufs := snapshot.NewBufs()
	d := &myDatabase{db: e.db, flavor: FlavorMariaDB, ci: &ci, bufs: bufs}
	t.Cleanup(d.closeConns)
	ctx, qn := context.Background(), e.name+".lk"
	first, err := d.ReadChunk(ctx, qn, nil, snapshot.ChunkQuery{Upper: snapshot.Key{"k99999"}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(first.Last); got != "[k00009]" {
		t.Fatalf("the first chunk's last key: %s", got)
	}
	held := first.Rows[9].After[0] // a value of a row given back: written again
	bufs.GiveBack(first.Rows)
	second, err := d.ReadChunk(ctx, qn, nil, snapshot.ChunkQuery{After: first.Last, Upper: snapshot.Key{"k99999"}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(second.Last); got != "[k00019]" {
		t.Errorf("the second chunk's last key: %s", got)
	}
	if held == "k00009" {
		t.Errorf("the first chunk's slabs were not read into again: the test shows nothing")
	}
	if got := fmt.Sprint(first.Last); got != "[k00009]" {
		t.Errorf("the first chunk's last key changed with its slabs: %s, want [k00009]", got)
	}
}
