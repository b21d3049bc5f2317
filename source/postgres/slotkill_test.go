package postgres

import (
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/failpoint"
)

// TestKillNineAfterSlotCreated kills the reader right after the server
// created the slot and before the pipeline recorded it (the failpoint
// source.after-slot-created). The crash suite met this window when the
// walsender finished a CREATE_REPLICATION_SLOT whose client had been
// killed while it waited for a consistent point. The restart must take
// the slot as its own, drop it and create it again (its exported snapshot
// is gone), not refuse it as foreign.
func TestKillNineAfterSlotCreated(t *testing.T) {
	t.Parallel()
	ke := newKillEnv(t, kvDDL+"; INSERT INTO kv VALUES (1, 1, 'loaded')", true)
	ke.proc = startChild(t, ke.cc, ke.logFile, failpoint.Env+"=source.after-slot-created")
	select {
	case <-ke.proc.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the failpoint never fired")
	}
	var n int
	if err := ke.conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", ke.names.Slot).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d slots named %s after the kill: %v", n, ke.names.Slot, err)
	}
	ke.start(t)
	waitRows := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ke.rowsInLog(t) != want; time.Sleep(20 * time.Millisecond) {
			select {
			case err := <-ke.proc.done:
				t.Fatalf("reader exited while waiting for %d rows in the log: %v", want, err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %d rows in the log", want)
			}
		}
	}
	waitRows(1)
	if _, err := ke.conn.Exec(t.Context(), "INSERT INTO kv VALUES (2, 2, 'streamed')"); err != nil {
		t.Fatal(err)
	}
	waitRows(2)
	ke.proc.stop(t)
}
