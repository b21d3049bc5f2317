package faultsuite

import (
	"fmt"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
)

// TestMySQLSignalTable: through the daemon, a MariaDB pipeline with
// snapshot: never mirrors only what changes; a Debezium execute-snapshot
// row (replace) in the signal table re-reads the whole table while a
// writer hammers it and the daemon is killed mid-snapshot; the mirror then
// equals the table by iceberg-go's scan and /status shows the run as the
// signal's. The signal table's rows never become a table.
func TestMySQLSignalTable(t *testing.T) {
	t.Parallel()
	const n = 4000
	p := newMyPipeline(t, []string{"CREATE TABLE orders " + myOrdersDDL,
		"CREATE TABLE debezium_signal (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048))"},
		[]string{"orders"}, "")
	p.sql(fmt.Sprintf("GRANT SELECT ON `%s`.`debezium_signal` TO '%s'@'%%'", p.name, mariadbserver.ReplUser))
	p.extra = fmt.Sprintf("    snapshot: never\n    incremental: {chunk_rows: 200, max_rows_per_second: 1500, signal_table: %s.debezium_signal}\n", p.name)
	p.writeMyConfig()
	p.myRows("orders", n)
	p.start()
	p.waitFor("streaming", 2*time.Minute, func(st daemon.Status) bool { return st.Source.Streaming })
	stopW := p.myHammer("orders", n, 31)
	p.sql(fmt.Sprintf(`INSERT INTO debezium_signal VALUES ('full-1', 'execute-snapshot', '{"data-collections": ["%s.orders"], "type": "incremental", "replace": true}')`, p.name))
	p.waitFor("the signal's snapshot running", 2*time.Minute, func(st daemon.Status) bool {
		for _, s := range st.Snapshots {
			if s.State == "running" && s.Rows > 0 {
				return true
			}
		}
		return false
	})
	p.kill()
	p.start()
	st := p.waitFor("the signal's snapshot done", 5*time.Minute, func(st daemon.Status) bool {
		return len(st.Snapshots) > 0 && !st.Snapshots[len(st.Snapshots)-1].Finished.IsZero()
	})
	stopW()
	p.waitMirror("orders")
	for _, s := range st.Snapshots {
		if s.Origin != "signal" || !s.Replace || s.State != "done" {
			t.Errorf("snapshot %+v, want the signal's replacing run, done", s)
		}
	}
	for _, tb := range st.Tables {
		if tb.Source != p.name+".orders" {
			t.Errorf("a table %s (%s) is mirrored besides orders", tb.Table, tb.Source)
		}
	}
}
