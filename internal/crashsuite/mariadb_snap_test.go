package crashsuite

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/cdcdtest"
)

// The MariaDB snapshots configuration's helpers: a table added to the
// running pipeline and another re-snapshotted on demand, under the
// workload and the kills.

// snapshotRunning waits up to a minute for a snapshot of the daemon c to
// be running with rows read (the next kill then lands mid-snapshot); false
// when none was seen (over before a poll, or the daemon died first).
func snapshotRunning(c *cdcdtest.Child) bool {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && !c.Exited(); time.Sleep(20 * time.Millisecond) {
		st, err := c.Status()
		if err != nil {
			continue
		}
		unfinished := 0
		for _, s := range st.Snapshots {
			if s.Finished.IsZero() {
				unfinished++
				if s.State == "running" && s.Rows > 0 {
					return true
				}
			}
		}
		if len(st.Snapshots) > 0 && unfinished == 0 {
			return false
		}
	}
	return false
}

// requestMyReplace asks the daemon c for a replacing snapshot of table
// (db.table) with the CLI, as a user would, retrying while it starts.
func requestMyReplace(t *testing.T, bin, cfgPath string, c *cdcdtest.Child, table string) {
	t.Helper()
	var out []byte
	var err error
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if c.Exited() {
			t.Fatalf("cdcd exited before the snapshot could be requested: %v", c.ExitErr())
		}
		cmd := exec.Command(bin, "snapshot", "-c", cfgPath, "--replace", table)
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		if err = cmd.Run(); err == nil {
			return
		}
		out = b.Bytes()
	}
	t.Fatalf("cdcd snapshot --replace %s: %v: %s", table, err, out)
}

// snapshotsSettled reports whether no snapshot is queued or running; a
// failed one fails the test.
func snapshotsSettled(t *testing.T, st daemon.Status) bool {
	for _, s := range st.Snapshots {
		if s.State == "failed" {
			t.Fatalf("snapshot of %s failed: %s", s.Table, s.Error)
		}
		if s.Finished.IsZero() {
			return false
		}
	}
	return true
}

// checkMySnapshots requires, from the daemon's log, that each snapshot
// ran to its end once (resumed across kills, not started over): acct's
// initial load and its replacement, item's load as a table added; and
// that a kill met a running snapshot.
func checkMySnapshots(t *testing.T, daemonLog, db string, midSnapshot int) {
	t.Helper()
	for tb, want := range map[string]int{"acct": 2, "item": 1} {
		table := "table=" + db + "." + tb + " "
		started, done := 0, 0
		for line := range strings.Lines(daemonLog) {
			switch {
			case strings.Contains(line, `msg="snapshot started"`) && strings.Contains(line, table):
				started++
			case strings.Contains(line, `msg="snapshot done"`) && strings.Contains(line, table):
				done++
			}
		}
		if started != want || done != want {
			t.Errorf("snapshots of %s.%s: started %d times and finished %d times, want %d each", db, tb, started, done, want)
		}
	}
	if midSnapshot == 0 {
		t.Errorf("no kill met a running snapshot")
	}
	t.Logf("snapshots: %s.item added after kill 2, %s.acct replaced after kill 4; %d kills met a running snapshot", db, db, midSnapshot)
}
