package pgtest_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func show(t *testing.T, conn *pgx.Conn, setting string) string {
	t.Helper()
	var v string
	if err := conn.QueryRow(t.Context(), "SHOW "+setting).Scan(&v); err != nil {
		t.Fatalf("SHOW %s: %v", setting, err)
	}
	return v
}

func TestSettings(t *testing.T) {
	t.Parallel()
	conn := connect(t, pgtest.NewDB(t))
	for setting, want := range map[string]string{
		"wal_level":             "logical",
		"max_replication_slots": "20",
		"max_wal_senders":       "20",
		"synchronous_commit":    "on",
		"listen_addresses":      "127.0.0.1",
		"server_encoding":       "UTF8",
	} {
		if got := show(t, conn, setting); got != want {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}
	if v := show(t, conn, "server_version"); !strings.HasPrefix(v, "15.") {
		t.Errorf("server_version = %q, want 15.x", v)
	}
}

// TestLogicalSlot creates a pgoutput slot, sees a committed insert decoded
// right after the commit, and drops the slot.
func TestLogicalSlot(t *testing.T) {
	t.Parallel()
	conn := connect(t, pgtest.NewDB(t))
	n := pgtest.Names(t)
	ctx := t.Context()
	for _, sql := range []string{
		"CREATE TABLE t (id int PRIMARY KEY, v text)",
		"CREATE PUBLICATION " + n.Publication + " FOR TABLE t",
		"SELECT pg_create_logical_replication_slot('" + n.Slot + "', 'pgoutput')",
		"INSERT INTO t VALUES (1, 'one')",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var changes int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', $2)`, n.Slot, n.Publication).Scan(&changes)
	if err != nil {
		t.Fatal(err)
	}
	if changes < 3 { // BEGIN, RELATION, INSERT, COMMIT
		t.Errorf("decoded %d messages after an insert, want >= 3", changes)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", n.Slot); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", n.Slot).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("slot %s still there after drop", n.Slot)
	}
}

// TestNewDBCleanup: parallel tests get different databases, and each
// database is dropped at cleanup although a walsender is streaming from a
// slot in it.
func TestNewDBCleanup(t *testing.T) {
	t.Parallel()
	srv := pgtest.Server(t)
	var (
		mu    sync.Mutex
		dbs   []string
		slots []string
		// streaming gets pg_recvlogical's exit status
		streaming <-chan error
	)
	t.Run("group", func(t *testing.T) {
		for i := range 2 {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				dsn := pgtest.NewDB(t)
				conn := connect(t, dsn)
				var db string
				if err := conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&db); err != nil {
					t.Fatal(err)
				}
				slot := pgtest.UniqueName(t, "slot") // not Names: its cleanup would drop the slot before NewDB's
				if _, err := conn.Exec(t.Context(), "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot); err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				dbs, slots = append(dbs, db), append(slots, slot)
				mu.Unlock()
				if i == 0 {
					streaming = startStreaming(t, srv.BinDir(), dsn, slot)
				}
			})
		}
	})
	if streaming != nil {
		select {
		case <-streaming: // its walsender was terminated by NewDB's cleanup
		case <-time.After(20 * time.Second):
			t.Error("pg_recvlogical still streaming 20 s after its database was dropped")
		}
	}
	if len(dbs) != 2 || dbs[0] == dbs[1] {
		t.Fatalf("parallel tests got databases %q, want two different ones", dbs)
	}
	conn := connect(t, srv.DSN("postgres"))
	var n int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_database WHERE datname = ANY($1)", dbs).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d of the databases %q survived their tests", n, dbs)
	}
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = ANY($1)", slots).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d of the slots %q survived their tests", n, slots)
	}
}

// startStreaming keeps slot active with pg_recvlogical (which exits when its
// walsender is terminated) and returns a channel that gets its exit status.
func startStreaming(t *testing.T, binDir, dsn, slot string) <-chan error {
	t.Helper()
	cmd := exec.Command(binDir+"/pg_recvlogical", "-d", dsn, "--slot", slot, "--start",
		"--no-loop", "-o", "proto_version=1", "-o", "publication_names=none", "-f", "/dev/null")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Whatever happens, pg_recvlogical is gone within 30 s.
	time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })

	conn := connect(t, dsn)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var active bool
		err := conn.QueryRow(t.Context(), "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active)
		if err != nil {
			t.Fatal(err)
		}
		if active {
			return exited
		}
		if time.Now().After(deadline) {
			t.Fatal("pg_recvlogical did not make the slot active within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestUniqueNames(t *testing.T) {
	t.Parallel()
	a, b := pgtest.Names(t), pgtest.Names(t)
	if a.Slot == b.Slot || a.Publication == b.Publication || a.Slot == a.Publication {
		t.Errorf("names not unique: %+v %+v", a, b)
	}
}
