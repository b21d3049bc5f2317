package mysql

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/source"
)

// TestReconnectMidTransaction kills the server's binlog dump thread while
// the reader is inside a large transaction (emitted batch by batch): the
// reader reconnects from its checkpoint, before the transaction, and every
// row ends in the log exactly once; the checkpoint never lands inside the
// transaction.
func TestReconnectMidTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
	st := newMemState()
	d := newDedupe(4)
	r, _ := e.reader(t, st, d, "t", func(c *Config) { c.BatchMax = 200 })
	const rows = 20000
	var b strings.Builder
	for i := range rows {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "(%d, 'row %d')", i, i)
	}
	e.exec(t, "INSERT INTO t VALUES "+b.String())
	d.waitFor(t, "part of the transaction", func(cs []source.Change) bool { return len(cs) > 0 })
	if got := len(d.snapshot()); got >= rows {
		t.Skipf("the whole transaction (%d rows) arrived before the kill; nothing to test", got)
	}
	killed := 0
	for deadline := time.Now().Add(30 * time.Second); killed == 0 && time.Now().Before(deadline); {
		rs, err := e.db.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for rs.Next() {
			var id int64
			rs.Scan(&id)
			ids = append(ids, id)
		}
		rs.Close()
		for _, id := range ids {
			if _, err := e.db.Exec(fmt.Sprintf("KILL %d", id)); err == nil {
				killed++
			}
		}
	}
	if killed == 0 {
		t.Fatal("no binlog dump thread to kill")
	}
	keptOnce(t, d.waitFor(t, "every row", func(cs []source.Change) bool { return len(cs) >= rows }), rows)
	if r.Stats().Reconnects.Load() == 0 {
		t.Error("the reader did not reconnect")
	}
	if d.dropped == 0 {
		t.Error("nothing was read twice: the kill did not land inside the transaction")
	}
}
