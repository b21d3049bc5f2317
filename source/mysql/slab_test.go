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
	for _, m := range p.moved[:min(len(p.moved), 10)] {
		t.Error(m)
	}
	if p.submits < n/per {
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
