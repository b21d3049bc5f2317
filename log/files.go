package log

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// replaceFile writes data to path atomically: a temp file in the same
// directory, renamed over path. With durable set it fsyncs the file before
// the rename and the directory after it, so after a crash path holds either
// the old or the new content, never a mix.
func replaceFile(fs FS, path string, data []byte, durable bool) error {
	dir, base := filepath.Split(path)
	tmp := filepath.Join(dir, tmpPrefix+base)
	f, err := fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err != nil {
		_ = fs.Remove(tmp)
		return err
	}
	if durable {
		return syncDir(fs, dir)
	}
	return nil
}

// syncDir fsyncs a directory so that entries created, renamed or removed in
// it survive a crash.
func syncDir(fs FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// dirLock is an exclusive lock on <dir>/LOCK, held while the log is open
// for writing. The holder's PID is written into the file for the error
// message of the next process that tries.
type dirLock struct{ c io.Closer }

func lockDir(fs FS, dir string) (*dirLock, error) {
	path := filepath.Join(dir, lockFileName)
	c, err := fs.Lock(path)
	if errors.Is(err, errLockHeld) {
		return nil, &LockError{Dir: dir, PID: readPID(fs, path)}
	}
	if err != nil {
		return nil, fmt.Errorf("log: lock %s: %w", path, err)
	}
	if f, err := fs.OpenFile(path, os.O_WRONLY, 0); err == nil {
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		_ = f.Close()
	}
	return &dirLock{c: c}, nil
}

func readPID(fs FS, path string) int {
	b, _ := readFile(fs, path)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}

func (l *dirLock) release() error {
	if l == nil {
		return nil
	}
	// The file stays (removing it would race with a new holder); closing
	// the descriptor drops the lock.
	return l.c.Close()
}
