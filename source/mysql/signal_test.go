package mysql

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// TestSignalTable: Debezium's signal rows, inserted while a writer hammers
// the table, each do what they say: pause-snapshot holds the snapshot
// execute-snapshot queues until resume-snapshot, which then fills the
// mirror equal to the table; additional-conditions limit what is read;
// stop-snapshot ends a running snapshot; a signal whose id was handled,
// one naming a table not captured and one of an unknown type change
// nothing and the stream goes on. No signal row reaches the log.
func TestSignalTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 2000
	e.exec(t, "CREATE TABLE t (id INT NOT NULL, g VARCHAR(8) NOT NULL, v INT, note VARCHAR(40), PRIMARY KEY (id, g))",
		"CREATE TABLE debezium_signal (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048))")
	var vals []string
	for i := range n {
		vals = append(vals, fmt.Sprintf("(%d, 'a', %d, 'row %d')", i, i, i))
	}
	e.exec(t, "INSERT INTO t VALUES "+strings.Join(vals, ", "))
	wt := e.grantWatermarks(t)
	table, sig := e.name+".t", e.name+".debezium_signal"
	d := newDedupe(4)
	r, _ := e.reader(t, newMemState(), d, "t", func(c *Config) {
		c.WatermarkTable, c.SignalTable, c.ChunkRows, c.MaxRowsPerSecond = wt, sig, 100, 1500
	})
	stopW := make(chan struct{})
	wg := e.hammer(t, "t", n, 11, stopW)
	var once sync.Once
	stopWriter := func() { once.Do(func() { close(stopW); wg.Wait() }) }
	t.Cleanup(stopWriter)
	signal := func(id, kind, data string) {
		t.Helper()
		e.exec(t, fmt.Sprintf("INSERT INTO debezium_signal VALUES ('%s', '%s', '%s')", id, kind, data))
	}
	runs := func(state string) (out []snapshot.Progress) {
		for _, p := range r.Snapshots().Progress() {
			if p.Table == table && (state == "" || p.State == state) {
				out = append(out, p)
			}
		}
		return out
	}
	waitRuns := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %+v", what, r.Snapshots().Progress())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// passed waits until the stream read past everything committed so far.
	mark := 0
	passed := func() {
		t.Helper()
		mark++
		note := fmt.Sprintf("mark %d", mark)
		e.exec(t, fmt.Sprintf("INSERT INTO t VALUES (%d, 'm', 0, '%s')", 10*n+mark, note))
		d.waitFor(t, note, func(cs []source.Change) bool {
			for _, c := range cs {
				if c.Op == source.OpCreate && c.After[3] == note {
					return true
				}
			}
			return false
		})
	}

	signal("p-1", "pause-snapshot", `{"type": "incremental"}`)
	signal("s-1", "execute-snapshot", fmt.Sprintf(`{"data-collections": ["%s"], "type": "incremental", "replace": true}`, table))
	waitRuns("the snapshot queued and paused", func() bool { return len(runs("paused")) == 1 })
	time.Sleep(time.Second)
	if p := runs(""); len(p) != 1 || p[0].Rows != 0 || p[0].Origin != "signal" || !p[0].Replace {
		t.Fatalf("paused: %+v, want one queued replacing signal run with no rows read", p)
	}
	signal("r-1", "resume-snapshot", "")
	waitRuns("the snapshot done", func() bool { return len(runs("done")) == 1 })

	// Handled before (same id), a table not captured, an unknown type.
	e.exec(t, "DELETE FROM debezium_signal WHERE id = 's-1'")
	signal("s-1", "execute-snapshot", fmt.Sprintf(`{"data-collections": ["%s"]}`, table))
	signal("bad-1", "execute-snapshot", fmt.Sprintf(`{"data-collections": ["%s.nope"]}`, e.name))
	signal("odd-1", "log", `{"message": "hello"}`)
	passed()
	if p := runs(""); len(p) != 1 {
		t.Fatalf("runs after a signal handled before and bad ones: %+v, want the one done", p)
	}

	signal("w-1", "execute-snapshot", fmt.Sprintf(`{"data-collections": ["%s"], "additional-conditions": [{"data-collection": "%s", "filter": "id < 40"}]}`,
		table, table))
	waitRuns("the filtered snapshot done", func() bool { return len(runs("done")) == 2 })
	if p := runs("done")[1]; p.Where != "id < 40" || p.Rows == 0 || p.Rows > 80 || p.Replace {
		t.Errorf("filtered run %+v, want rows of id < 40 only", p)
	}

	signal("x-1", "execute-snapshot", fmt.Sprintf(`{"data-collections": ["%s"]}`, table))
	waitRuns("a snapshot running", func() bool { p := runs("running"); return len(p) == 1 && p[0].Rows > 0 })
	signal("x-2", "stop-snapshot", fmt.Sprintf(`{"data-collections": ["%s"]}`, table))
	waitRuns("the snapshot stopped", func() bool { return len(runs("running")) == 0 && len(runs("queued")) == 0 })
	if p := runs(""); len(p) != 2 {
		t.Errorf("runs after stop-snapshot: %+v, want the two done before", p)
	}

	stopWriter()
	passed()
	want := e.sourceRows(t, r, table)
	d.waitFor(t, "the folded changes equal to the table", func(cs []source.Change) bool {
		return diffRows(fold(cs, table), want) == ""
	})
	for _, c := range d.snapshot() {
		if c.Table.Name != "t" {
			t.Fatalf("a change of %s reached the log", c.Table.QualifiedName())
		}
	}
}
