// Package dbproc holds what internal/pgserver and internal/mariadbserver share
// to run a throwaway database server as a child process: the OS account it
// runs as, a scratch directory that account can reach, a free TCP port, the
// child process itself (started so it dies with its parent), and the tail of
// its log for error messages.
//
// Lifecycle of a server directory, as both server packages use it:
//
//	MakeDir   /tmp/<prefix>XXXX, chowned to the account, with an owner file
//	          naming this process's PID
//	SetServerPID  records the server's PID in the owner file once it runs
//	Sweep     (called before making a new directory) removes directories of
//	          the same prefix whose owner process and server are both gone,
//	          e.g. left behind when a test binary was killed
package dbproc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Account is the OS identity a server process runs as.
type Account struct {
	// Name is the user name ("postgres", "mysql"), or the current user's
	// name when not running as root.
	Name string
	// UID and GID are the numeric ids; used to chown directories.
	UID, GID int
	// Cred is passed to exec.Cmd's SysProcAttr; nil means run as the
	// current user.
	Cred *syscall.Credential
}

// RunAs returns the account to run a server as: the OS user name when this
// process is root (database servers refuse to run as root), else the current
// user. The named user must exist when running as root.
func RunAs(name string) (Account, error) {
	if os.Geteuid() != 0 {
		a := Account{UID: os.Geteuid(), GID: os.Getegid()}
		if u, err := user.Current(); err == nil {
			a.Name = u.Username
		}
		return a, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return Account{}, fmt.Errorf("dbproc: running as root, the server must run as OS user %q: %w", name, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return Account{}, fmt.Errorf("dbproc: uid of %q: %w", name, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return Account{}, fmt.Errorf("dbproc: gid of %q: %w", name, err)
	}
	return Account{
		Name: name, UID: uid, GID: gid,
		// Groups nil with NoSetGroups false drops root's supplementary groups.
		Cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
	}, nil
}

// ownerFile is the name of the file in a server directory that records the
// PID of the process that made it and, once running, the server's PID.
const ownerFile = "cdcd-owner"

// MakeDir creates a fresh directory /tmp/<prefix>XXXX (under os.TempDir(),
// not t.TempDir(), whose parent only root may enter), mode 0700, owned by
// acct, and records this process as its owner. Stale directories of the same
// prefix are swept first (see Sweep).
func MakeDir(prefix string, acct Account) (string, error) {
	Sweep(prefix)
	dir, err := os.MkdirTemp(os.TempDir(), prefix)
	if err != nil {
		return "", fmt.Errorf("dbproc: make server directory: %w", err)
	}
	if err := writeOwner(dir, 0); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	if acct.Cred != nil {
		if err := os.Chown(dir, acct.UID, acct.GID); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("dbproc: chown %s to %s: %w", dir, acct.Name, err)
		}
	}
	return dir, nil
}

// SetServerPID records the server's PID in dir's owner file, so Sweep knows
// to leave the directory alone while that server runs.
func SetServerPID(dir string, pid int) error { return writeOwner(dir, pid) }

func writeOwner(dir string, serverPID int) error {
	// PIDs are reused (pid_max is 32768 here), so each PID is recorded with
	// its process's start time: a reused PID is not mistaken for the owner.
	body := fmt.Sprintf("%d %d %d %d\n", os.Getpid(), startTime(os.Getpid()), serverPID, startTime(serverPID))
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(body), 0o644); err != nil {
		return fmt.Errorf("dbproc: write owner file: %w", err)
	}
	return nil
}

// Sweep removes directories /tmp/<prefix>* left behind by processes that
// died without cleaning up: those whose owner file names an owner process
// and a server process that both no longer exist. Directories without an
// owner file (being created right now, or not ours) are left alone. A PID
// counts as its recorded process only if the start time matches too, so a
// reused PID does not keep a directory alive. Errors are ignored: sweeping
// is best effort.
func Sweep(prefix string) {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	for _, dir := range matches {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		var owner, server int
		var ownerStart, serverStart uint64
		if n, _ := fmt.Sscanf(string(b), "%d %d %d %d", &owner, &ownerStart, &server, &serverStart); n != 4 {
			continue
		}
		if owner == os.Getpid() || same(owner, ownerStart) || same(server, serverStart) {
			continue
		}
		os.RemoveAll(dir)
	}
}

// same reports whether pid is alive and is the process that started at start
// (start 0: unknown, so any live process counts).
func same(pid int, start uint64) bool {
	if !Alive(pid) {
		return false
	}
	return start == 0 || startTime(pid) == start
}

// Alive reports whether a process with this PID exists and is not a zombie
// (a dead process its parent has not reaped yet; an orphaned server's
// zombie may linger when PID 1 reaps slowly).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return !deadOrZombie(pid)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago: it
// listens on port 0 and closes the listener. Another process may take the
// port before the server binds it, so callers retry on a bind error.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("dbproc: find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("dbproc: find a free port: %w", err)
	}
	return port, nil
}

// Tail returns the last lines (at most n, from at most the last 8 KiB) of
// the file at path, for error messages; "" when it can't be read.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 8 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		if _, err := f.Seek(-max, io.SeekEnd); err != nil {
			return ""
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WithTail appends the tail of the log at path to an error message.
func WithTail(err error, path string) error {
	tail := Tail(path, 30)
	if tail == "" {
		return err
	}
	return fmt.Errorf("%w\n--- last lines of %s ---\n%s", err, path, tail)
}
