package faultsuite

import (
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
)

// TestPausedTableAlertAtOnce: status never shows a paused table without
// its alert. The monitor evaluates the alert rules every alerts.interval
// (a schema pause asks it to at once; the sink's pauses did not), so a
// table the sink paused after the monitor's last round was shown paused
// under "no alerts" until the next one (seen in CI: TestModeChangedInConfig
// read its status 0.2 s after the pause). Here the interval is 10 minutes
// and the sink pauses the table at a commit while streaming (a mirror
// column renamed by another engine): the first status that shows the
// pause must hold its alert.
func TestPausedTableAlertAtOnce(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL:    `CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a SELECT g, 'v' FROM generate_series(1, 10) g;`,
		Tables: []string{"public.a"},
		Extra:  "alerts:\n  interval: 10m\n",
	})
	p.start()
	p.waitCaughtUp()
	p.stop()
	p.renameMirrorColumn("a", "v", "v_renamed")
	p.start()
	p.waitFor("streaming", 3*time.Minute, func(st daemon.Status) bool { return st.State == daemon.StateStreaming })
	p.exec(`UPDATE a SET v = 'u' WHERE id <= 5`)
	ts := p.waitPaused("cdc.a", `column "v"`)
	st := p.status()
	found := false
	for _, a := range st.Alerts {
		if a.Name == daemon.AlertTablePaused && a.Subject == "cdc.a" {
			found = true
			if a.Action == "" || a.Since.IsZero() {
				t.Errorf("the paused table's alert says too little: %+v", a)
			}
		}
	}
	if !found {
		t.Fatalf("status shows table cdc.a paused (%s) with alerts %+v", ts.PausedReason, st.Alerts)
	}
	p.stop()
}
