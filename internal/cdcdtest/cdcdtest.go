// Package cdcdtest runs the cdcd binary as a child process for end-to-end
// and crash tests: build it once, start it on a config file, read its
// admin status, kill it, and wait for it with bounded waits.
//
// The daemon package's own end-to-end tests re-execute their test binary
// instead (so they can reach unexported hooks); tests that want the real
// binary, with its flags, signals and exit codes, use this package.
package cdcdtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
)

// Build compiles ./cmd/cdcd of the module this file belongs to into dir
// with the given build tags and returns the binary's path. It takes a
// minute on a cold cache. A test that arms failpoints passes
// failpoint.BuildTag: without it the binary has none.
func Build(dir string, tags ...string) (string, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cdcdtest: cannot locate the module")
	}
	root := filepath.Join(filepath.Dir(self), "..", "..")
	bin := filepath.Join(dir, "cdcd")
	cmd := exec.Command("go", "build", "-tags", strings.Join(tags, ","), "-o", bin, "./cmd/cdcd")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cdcdtest: go build ./cmd/cdcd: %v\n%s", err, out)
	}
	return bin, nil
}

// Child is a running `cdcd run -c FILE`.
type Child struct {
	Cmd   *exec.Cmd
	Admin string // the admin listener's host:port
	// Done receives the result of Wait once the process has exited; use
	// Wait, Kill or Exited rather than receiving from it.
	Done   chan error
	exited bool
	exit   error
}

// Start runs bin with `run -c cfgPath`, its output appended to logFile and
// env added to the test's environment. The child dies with the test
// process (Pdeathsig) and is killed in t.Cleanup if still running.
func Start(t testing.TB, bin, cfgPath, admin string, logFile *os.File, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(bin, "run", "-c", cfgPath)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The kernel sends Pdeathsig when the thread that started the child
	// exits, so that thread stays locked until the child is gone
	// (go.dev/issue/27505).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c := &Child{Cmd: cmd, Admin: admin, Done: make(chan error, 1)}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.Done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Kill)
	return c
}

// Status fetches /status from the child's admin listener.
func (c *Child) Status() (daemon.Status, error) {
	var st daemon.Status
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + c.Admin + "/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// Kill sends SIGKILL and waits for the process to end (at once if it has
// already ended).
func (c *Child) Kill() {
	if c.Exited() {
		return
	}
	_ = c.Cmd.Process.Signal(syscall.SIGKILL)
	c.ended(<-c.Done)
}

// Wait waits up to d for the child to exit on its own and reports whether
// it did; its result is then ExitErr.
func (c *Child) Wait(d time.Duration) bool {
	if c.exited {
		return true
	}
	select {
	case err := <-c.Done:
		c.ended(err)
		return true
	case <-time.After(d):
		return false
	}
}

// Exited reports, without waiting, whether the child has exited.
func (c *Child) Exited() bool {
	if c.exited {
		return true
	}
	select {
	case err := <-c.Done:
		c.ended(err)
		return true
	default:
		return false
	}
}

// ended records the result of Wait, received from Done.
func (c *Child) ended(err error) { c.exited, c.exit = true, err }

// ExitErr is the result of the child's Wait once it has exited (through
// Kill or Wait).
func (c *Child) ExitErr() error { return c.exit }

// KilledBySIGKILL reports whether a finished child died of SIGKILL (sent
// by the test or by an armed failpoint).
func (c *Child) KilledBySIGKILL() bool {
	if !c.exited {
		return false
	}
	ps := c.Cmd.ProcessState
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// ExitCode is the finished child's exit code (-1 if it died of a signal).
func (c *Child) ExitCode() int {
	if !c.exited {
		return -1
	}
	return c.Cmd.ProcessState.ExitCode()
}

// WaitUntil polls ok every 50 ms until it holds, failing the test after
// timeout or when the child exits first. On a timeout the child gets
// SIGQUIT, so its goroutines' stacks land in its log.
func (c *Child) WaitUntil(t testing.TB, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		select {
		case err := <-c.Done:
			c.ended(err)
			t.Fatalf("cdcd exited while waiting for %s: %v", what, err)
		default:
		}
		if time.Now().After(deadline) {
			if st, err := c.Status(); err == nil {
				t.Logf("status: %+v", st)
			}
			_ = c.Cmd.Process.Signal(syscall.SIGQUIT)
			c.Wait(10 * time.Second)
			t.Fatalf("timed out after %s waiting for %s (the child's stacks are in its log)", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FreeAddr returns a loopback host:port nobody listens on right now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
