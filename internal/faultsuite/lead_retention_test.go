package faultsuite

import (
	"slices"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
)

// TestLogRetentionNearPausedTable: the embedded log's age retention
// removes segments whether or not a table has committed them; a table
// paused for most of the retention then loses its changes (loud only
// afterwards, as offsets the log no longer holds). CdcdLogRetentionNear
// must fire before that, naming the table, and resolve once the table
// commits again.
func TestLogRetentionNearPausedTable(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE a (id int PRIMARY KEY, v text);
			INSERT INTO a SELECT g, 'v' || g FROM generate_series(1, 50) g;`,
		Tables:   []string{"public.a"},
		LogExtra: "retention: 1m", // the alert's window: 30 s
	})
	p.start()
	p.waitCaughtUp()
	p.stop()
	// Pause the table: another engine renames a mirror column.
	p.renameMirrorColumn("a", "v", "v_renamed")
	p.start()
	p.exec(`UPDATE a SET v = 'u' WHERE id <= 10`)
	p.waitPaused("cdc.a")
	p.requireAlert(daemon.AlertLogRetentionNear, "cdc.a", "has not committed offsets", "retention (1m0s)", "log.retention", "--replace public.a")
	p.renameMirrorColumn("a", "v_renamed", "v")
	p.waitFor("the retention alert resolved", 3*time.Minute, func(st daemon.Status) bool {
		return !slices.ContainsFunc(st.Alerts, func(a daemon.Alert) bool { return a.Name == daemon.AlertLogRetentionNear })
	})
	p.waitCaughtUp()
	p.requireMirror()
}
