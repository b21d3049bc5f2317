package pgserver_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/dbproc"
	"github.com/cdcd-dev/cdcd/internal/dbtest"
	"github.com/cdcd-dev/cdcd/internal/pgserver"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

// children lists the PIDs of the live (not zombie) children of pid.
func children(pid int) []int {
	var pids []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parens.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		var child, ppid int
		fmt.Sscan(s, &child)
		if len(fields) > 1 && fields[0] != "Z" {
			fmt.Sscan(fields[1], &ppid)
		}
		if ppid == pid {
			pids = append(pids, child)
		}
	}
	return pids
}

// anyAlive returns the PIDs in pids that are still running.
func anyAlive(pids []int) []int {
	var alive []int
	for _, p := range pids {
		if dbproc.Alive(p) {
			alive = append(alive, p)
		}
	}
	return alive
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	began := time.Now()
	srv := pgtest.NewServer(t, pgserver.Options{Settings: map[string]string{"max_slot_wal_keep_size": "1MB"}})
	t.Logf("initdb + start: %v", time.Since(began).Round(time.Millisecond))

	conn, err := srv.Connect(t.Context(), "postgres")
	if err != nil {
		t.Fatal(err)
	}
	var keep string
	if err := conn.QueryRow(t.Context(), "SHOW max_slot_wal_keep_size").Scan(&keep); err != nil {
		t.Fatal(err)
	}
	conn.Close(context.Background())
	if keep != "1MB" {
		t.Errorf("max_slot_wal_keep_size = %q, want the 1MB from Options.Settings", keep)
	}
	pid, dir := srv.PID(), srv.Dir()
	procs := append(children(pid), pid)
	if len(procs) < 3 {
		t.Errorf("expected the postmaster and its helper processes, found %v", procs)
	}

	began = time.Now()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stop: %v", time.Since(began).Round(time.Millisecond))
	if left := anyAlive(procs); len(left) > 0 {
		t.Errorf("server processes %v (of %v) survived Stop", left, procs)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("server directory %s survived Stop (stat: %v)", dir, err)
	}
	if err := srv.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestNotInstalled(t *testing.T) {
	t.Parallel()
	_, err := pgserver.Start(t.Context(), pgserver.Options{BinDir: t.TempDir()})
	if !errors.Is(err, pgserver.ErrNotInstalled) || !strings.Contains(err.Error(), pgserver.Package) {
		t.Fatalf("Start with an empty BinDir: %v; want ErrNotInstalled naming %s", err, pgserver.Package)
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	_, err := pgserver.Start(t.Context(), pgserver.Options{Settings: map[string]string{"port": "5432"}})
	if !errors.Is(err, pgserver.ErrBadOptions) {
		t.Fatalf("Start with Settings[port]: %v, want ErrBadOptions", err)
	}
}

// TestOwnerDies: when the process that started a server dies without
// stopping it, the postmaster and its children exit, and Sweep removes the
// directory they leave.
func TestOwnerDies(t *testing.T) {
	if os.Getenv("PGSERVER_TEST_OWNER") == "1" {
		// The doomed owner: start a server, report it, wait to be killed.
		srv, err := pgserver.Start(context.Background(), pgserver.Options{})
		if err != nil {
			fmt.Printf("ERR %q\n", err.Error())
			os.Exit(1)
		}
		fmt.Println("OK", srv.PID(), srv.Dir())
		time.Sleep(time.Minute)
		os.Exit(1)
	}
	t.Parallel()
	if err := pgserver.CheckInstalled(""); err != nil {
		dbtest.MissingBinaries(t, err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	owner := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestOwnerDies$", "-test.v=false")
	owner.Env = append(os.Environ(), "PGSERVER_TEST_OWNER=1")
	out, err := owner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	var pid int
	var dir string
	if _, err := fmt.Sscanf(line, "OK %d %s", &pid, &dir); err != nil {
		owner.Process.Kill()
		owner.Wait()
		t.Fatalf("owner process said %q", line)
	}
	procs := append(children(pid), pid)
	owner.Process.Kill()
	owner.Wait()

	deadline := time.Now().Add(20 * time.Second)
	for len(anyAlive(procs)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("server processes %v (of %v) still running 20 s after their owner died", anyAlive(procs), procs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Other test binaries running at the same time sweep too, so the
	// directory may already be gone, or be going (its owner file is removed
	// first): what must hold is that it is removed, by this Sweep or theirs.
	dbproc.Sweep("cdcd-pg-")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Sweep left %s behind", dir)
		}
		dbproc.Sweep("cdcd-pg-")
	}
}

// TestStartFailure: a server that can't start reports why, with its log,
// and leaves no directory behind.
func TestStartFailure(t *testing.T) {
	t.Parallel()
	if err := pgserver.CheckInstalled(""); err != nil {
		dbtest.MissingBinaries(t, err)
	}
	_, err := pgserver.Start(t.Context(), pgserver.Options{Settings: map[string]string{"wal_level": "sideways"}})
	if err == nil || !strings.Contains(err.Error(), `invalid value for parameter "wal_level"`) ||
		!strings.Contains(err.Error(), "postgres.log") {
		t.Fatalf("Start with wal_level=sideways: %v; want an error quoting the server log", err)
	}
	t.Logf("error as reported:\n%v", err)
	dir := regexp.MustCompile(`/\S*/cdcd-pg-[0-9]+`).FindString(err.Error())
	if dir == "" {
		t.Fatal("error names no server directory")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("failed Start left %s behind (stat: %v)", dir, err)
	}
}

// TestRestart: the cluster and port survive a restart, connections don't.
func TestRestart(t *testing.T) {
	t.Parallel()
	srv := pgtest.NewServer(t, pgserver.Options{Settings: map[string]string{"max_slot_wal_keep_size": "1MB"}})
	ctx := t.Context()
	if err := srv.CreateDatabase(ctx, "kept"); err != nil {
		t.Fatal(err)
	}
	pid, port := srv.PID(), srv.Port()
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.PID() == pid || srv.Port() != port {
		t.Fatalf("pid %d -> %d, port %d -> %d", pid, srv.PID(), port, srv.Port())
	}
	if dbproc.Alive(pid) {
		t.Fatalf("old postmaster %d still runs", pid)
	}
	conn, err := pgx.Connect(ctx, srv.DSN("kept"))
	if err != nil {
		t.Fatal(err)
	}
	var v string
	if err := conn.QueryRow(ctx, "SHOW max_slot_wal_keep_size").Scan(&v); err != nil || v != "1MB" {
		t.Fatalf("setting after restart: %q %v", v, err)
	}
	conn.Close(ctx)
}
