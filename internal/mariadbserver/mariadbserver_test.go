package mariadbserver_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/dbproc"
	"github.com/cdcd-dev/cdcd/internal/dbtest"
	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
)

func TestStartStop(t *testing.T) {
	t.Parallel()
	began := time.Now()
	srv := mariadbtest.NewServer(t, mariadbserver.Options{ServerID: 7, Args: []string{"--max-binlog-size=8192"}})
	t.Logf("install-db + start: %v", time.Since(began).Round(time.Millisecond))

	db, err := srv.Open("")
	if err != nil {
		t.Fatal(err)
	}
	var id, size int
	if err := db.QueryRowContext(t.Context(), "SELECT @@server_id, @@max_binlog_size").Scan(&id, &size); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if id != 7 || size != 8192 {
		t.Errorf("server_id %d, max_binlog_size %d; want 7 and 8192 from Options", id, size)
	}

	pid, dir := srv.PID(), srv.Dir()
	began = time.Now()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stop: %v", time.Since(began).Round(time.Millisecond))
	if dbproc.Alive(pid) {
		t.Errorf("mariadbd %d survived Stop", pid)
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
	_, err := mariadbserver.Start(t.Context(), mariadbserver.Options{Mariadbd: "/nonexistent/mariadbd"})
	if !errors.Is(err, mariadbserver.ErrNotInstalled) || !strings.Contains(err.Error(), mariadbserver.Package) {
		t.Fatalf("Start with a missing mariadbd: %v; want ErrNotInstalled naming %s", err, mariadbserver.Package)
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--port=3306", "--datadir=/var/lib/mysql", "--defaults-file=/etc/my.cnf", "max_connections=5"} {
		_, err := mariadbserver.Start(t.Context(), mariadbserver.Options{Args: []string{arg}})
		if !errors.Is(err, mariadbserver.ErrBadOptions) {
			t.Errorf("Start with Args %q: %v, want ErrBadOptions", arg, err)
		}
	}
}

// TestOwnerDies: when the process that started a server dies without
// stopping it, mariadbd dies too, and Sweep removes the directory it leaves.
func TestOwnerDies(t *testing.T) {
	if os.Getenv("MARIADBSERVER_TEST_OWNER") == "1" {
		srv, err := mariadbserver.Start(context.Background(), mariadbserver.Options{})
		if err != nil {
			fmt.Printf("ERR %q\n", err.Error())
			os.Exit(1)
		}
		fmt.Println("OK", srv.PID(), srv.Dir())
		time.Sleep(time.Minute)
		os.Exit(1)
	}
	t.Parallel()
	if err := mariadbserver.CheckInstalled(mariadbserver.Options{}); err != nil {
		dbtest.MissingBinaries(t, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	owner := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestOwnerDies$", "-test.v=false")
	owner.Env = append(os.Environ(), "MARIADBSERVER_TEST_OWNER=1")
	out, err := owner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	owner.Process.Kill()
	owner.Wait()
	var pid int
	var dir string
	if _, err := fmt.Sscanf(line, "OK %d %s", &pid, &dir); err != nil {
		t.Fatalf("owner process said %q", line)
	}

	deadline := time.Now().Add(20 * time.Second)
	for dbproc.Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("mariadbd %d still running 20 s after its owner died", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Other test binaries running at the same time sweep too, so the
	// directory may already be gone, or be going (its owner file is removed
	// first): what must hold is that it is removed, by this Sweep or theirs.
	dbproc.Sweep("cdcd-mariadb-")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Sweep left %s behind", dir)
		}
		dbproc.Sweep("cdcd-mariadb-")
	}
}

// TestStartFailure: a server that can't start reports why, with its log,
// and leaves no directory behind.
func TestStartFailure(t *testing.T) {
	t.Parallel()
	if err := mariadbserver.CheckInstalled(mariadbserver.Options{}); err != nil {
		dbtest.MissingBinaries(t, err)
	}
	_, err := mariadbserver.Start(t.Context(), mariadbserver.Options{Args: []string{"--binlog-format=SIDEWAYS"}})
	if err == nil || !strings.Contains(err.Error(), "mariadbd.log") || !strings.Contains(err.Error(), "SIDEWAYS") {
		t.Fatalf("Start with --binlog-format=SIDEWAYS: %v; want an error quoting the server log", err)
	}
	t.Logf("error as reported:\n%v", err)
	dir := regexp.MustCompile(`/\S*/cdcd-mariadb-[0-9]+`).FindString(err.Error())
	if dir == "" {
		t.Fatal("error names no server directory")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("failed Start left %s behind (stat: %v)", dir, err)
	}
}
