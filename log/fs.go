package log

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
)

// FS is the file system under the embedded log: the few operations it
// uses, so that tests can put a file system under it that loses unsynced
// writes at a simulated crash or fails writes on demand (pebble's vfs is
// the model). Paths are OS paths (filepath).
type FS interface {
	// OpenFile opens a file as os.OpenFile does; the log uses O_RDONLY,
	// O_WRONLY, O_RDWR, O_CREATE, O_EXCL and O_TRUNC.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// OpenDir opens a directory, for Sync.
	OpenDir(name string) (File, error)
	Remove(name string) error
	RemoveAll(name string) error
	Rename(oldname, newname string) error
	Mkdir(name string, perm os.FileMode) error
	MkdirAll(name string, perm os.FileMode) error
	// ReadDir returns a directory's entries sorted by name.
	ReadDir(name string) ([]os.DirEntry, error)
	Stat(name string) (os.FileInfo, error)
	// Lock takes an exclusive lock on the file name (creating it), held
	// until the returned Closer is closed. Another holder gives an error
	// wrapping errLockHeld.
	Lock(name string) (io.Closer, error)
}

// File is an open file of an FS.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Writer
	io.Closer
	// Sync makes the file's written data durable, and its size (fdatasync
	// where the OS has it); for a directory, its entries.
	Sync() error
	Stat() (os.FileInfo, error)
	Truncate(size int64) error
	Name() string
}

// errLockHeld: another holder has the lock (FS.Lock).
var errLockHeld = errors.New("lock held")

// OSFS is the operating system's file system, the default.
var OSFS FS = osFS{}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) OpenDir(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return osDir{osFile{f}}, nil
}

func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) RemoveAll(name string) error                  { return os.RemoveAll(name) }
func (osFS) Rename(oldname, newname string) error         { return os.Rename(oldname, newname) }
func (osFS) Mkdir(name string, perm os.FileMode) error    { return os.Mkdir(name, perm) }
func (osFS) MkdirAll(name string, perm os.FileMode) error { return os.MkdirAll(name, perm) }
func (osFS) ReadDir(name string) ([]os.DirEntry, error)   { return os.ReadDir(name) }
func (osFS) Stat(name string) (os.FileInfo, error)        { return os.Stat(name) }
func (osFS) Lock(name string) (io.Closer, error)          { return lockFile(name) }

// osFile is an os.File whose Sync is syncData.
type osFile struct{ *os.File }

func (f osFile) Sync() error { return syncData(f.File) }

// osDir is an open directory: Sync is a full fsync.
type osDir struct{ osFile }

func (d osDir) Sync() error { return d.File.Sync() }

// readFile reads a whole file.
func readFile(fs FS, name string) ([]byte, error) {
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, fi.Size())
	n, err := f.ReadAt(b, 0)
	if err == io.EOF {
		err = nil
	}
	return b[:n], err
}

// mkdirTemp creates a new directory in dir whose name begins with prefix,
// as os.MkdirTemp does.
func mkdirTemp(fs FS, dir, prefix string) (string, error) {
	for {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		name := filepath.Join(dir, prefix+hex.EncodeToString(b))
		err := fs.Mkdir(name, 0o755)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		return name, err
	}
}
