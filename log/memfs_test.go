package log

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// memFS is an in-memory FS that knows what is durable: a file's data as of
// its last Sync, and a directory's entries as of its last Sync. crashClone
// returns what a machine crash would leave: only the durable state (as
// pebble's vfs.NewCrashableMem does).
type memFS struct {
	mu    sync.Mutex
	root  *memNode
	locks map[string]bool
}

type memNode struct {
	dir bool
	// A file's bytes, and those as of its last Sync.
	data, synced []byte
	// A directory's entries, and those as of its last Sync.
	children, syncedChildren map[string]*memNode
	modTime                  time.Time
}

func newMemFS() *memFS {
	return &memFS{root: newMemDir(), locks: map[string]bool{}}
}

func newMemDir() *memNode {
	return &memNode{dir: true, children: map[string]*memNode{}, syncedChildren: map[string]*memNode{}}
}

var _ FS = (*memFS)(nil)

// crashClone returns the state a crash would leave: every file's synced
// data, reachable through synced directory entries only.
func (m *memFS) crashClone() *memFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &memFS{root: m.root.cloneSynced(), locks: map[string]bool{}}
}

func (n *memNode) cloneSynced() *memNode {
	if !n.dir {
		return &memNode{data: slices.Clone(n.synced), synced: slices.Clone(n.synced), modTime: n.modTime}
	}
	c := newMemDir()
	for name, child := range n.syncedChildren {
		cc := child.cloneSynced()
		c.children[name], c.syncedChildren[name] = cc, cc
	}
	return c
}

func splitPath(name string) []string {
	name = filepath.Clean(name)
	var out []string
	for _, p := range strings.Split(name, string(filepath.Separator)) {
		if p != "" && p != "." {
			out = append(out, p)
		}
	}
	return out
}

func pathErr(op, name string, err error) error { return &fs.PathError{Op: op, Path: name, Err: err} }

// lookupLocked returns the parent directory of name, its last element and
// the node (nil if absent). REQUIRES: m.mu.
func (m *memFS) lookupLocked(op, name string) (*memNode, string, *memNode, error) {
	parts := splitPath(name)
	if len(parts) == 0 {
		return nil, "", m.root, nil
	}
	dir := m.root
	for _, p := range parts[:len(parts)-1] {
		next := dir.children[p]
		if next == nil {
			return nil, "", nil, pathErr(op, name, fs.ErrNotExist)
		}
		if !next.dir {
			return nil, "", nil, pathErr(op, name, errors.New("not a directory"))
		}
		dir = next
	}
	base := parts[len(parts)-1]
	return dir, base, dir.children[base], nil
}

func (m *memFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	parent, base, n, err := m.lookupLocked("open", name)
	if err != nil {
		return nil, err
	}
	switch {
	case n != nil && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, pathErr("open", name, fs.ErrExist)
	case n != nil && n.dir:
		return nil, pathErr("open", name, errors.New("is a directory"))
	case n == nil && flag&os.O_CREATE == 0:
		return nil, pathErr("open", name, fs.ErrNotExist)
	case n == nil:
		n = &memNode{modTime: time.Now()}
		parent.children[base] = n
	}
	if flag&os.O_TRUNC != 0 {
		n.data = n.data[:0]
	}
	return &memFile{fs: m, n: n, name: name, writable: flag&(os.O_WRONLY|os.O_RDWR) != 0}, nil
}

func (m *memFS) OpenDir(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _, n, err := m.lookupLocked("open", name)
	if err == nil && n == nil {
		err = pathErr("open", name, fs.ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	return &memFile{fs: m, n: n, name: name}, nil
}

func (m *memFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	parent, base, n, err := m.lookupLocked("remove", name)
	switch {
	case err != nil:
		return err
	case n == nil:
		return pathErr("remove", name, fs.ErrNotExist)
	case n.dir && len(n.children) > 0:
		return pathErr("remove", name, errors.New("directory not empty"))
	}
	delete(parent.children, base)
	return nil
}

func (m *memFS) RemoveAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	parent, base, n, err := m.lookupLocked("removeall", name)
	if err != nil || n == nil {
		return nil
	}
	delete(parent.children, base)
	return nil
}

func (m *memFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	op, ob, n, err := m.lookupLocked("rename", oldname)
	if err == nil && n == nil {
		err = pathErr("rename", oldname, fs.ErrNotExist)
	}
	if err != nil {
		return err
	}
	np, nb, _, err := m.lookupLocked("rename", newname)
	if err != nil {
		return err
	}
	delete(op.children, ob)
	np.children[nb] = n
	return nil
}

func (m *memFS) Mkdir(name string, perm os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	parent, base, n, err := m.lookupLocked("mkdir", name)
	switch {
	case err != nil:
		return err
	case n != nil:
		return pathErr("mkdir", name, fs.ErrExist)
	}
	parent.children[base] = newMemDir()
	return nil
}

func (m *memFS) MkdirAll(name string, perm os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir := m.root
	for _, p := range splitPath(name) {
		next := dir.children[p]
		if next == nil {
			next = newMemDir()
			dir.children[p] = next
		}
		if !next.dir {
			return pathErr("mkdir", name, errors.New("not a directory"))
		}
		dir = next
	}
	return nil
}

func (m *memFS) ReadDir(name string) ([]os.DirEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _, n, err := m.lookupLocked("readdir", name)
	if err == nil && (n == nil || !n.dir) {
		err = pathErr("readdir", name, fs.ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	var out []os.DirEntry
	for child, cn := range n.children {
		out = append(out, fs.FileInfoToDirEntry(memInfo{name: child, n: cn}))
	}
	slices.SortFunc(out, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

func (m *memFS) Stat(name string) (os.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _, n, err := m.lookupLocked("stat", name)
	if err == nil && n == nil {
		err = pathErr("stat", name, fs.ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	return memInfo{name: filepath.Base(name), n: n}, nil
}

func (m *memFS) Lock(name string) (io.Closer, error) {
	f, err := m.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	_ = f.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	key := filepath.Clean(name)
	if m.locks[key] {
		return nil, errLockHeld
	}
	m.locks[key] = true
	return closerFunc(func() error {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.locks, key)
		return nil
	}), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

type memInfo struct {
	name string
	n    *memNode
}

func (i memInfo) Name() string { return i.name }
func (i memInfo) Size() int64  { return int64(len(i.n.data)) }
func (i memInfo) Mode() os.FileMode {
	if i.n.dir {
		return os.ModeDir | 0o755
	}
	return 0o644
}
func (i memInfo) ModTime() time.Time { return i.n.modTime }
func (i memInfo) IsDir() bool        { return i.n.dir }
func (i memInfo) Sys() any           { return nil }

// memFile is an open file (or directory) of a memFS.
type memFile struct {
	fs       *memFS
	n        *memNode
	name     string
	writable bool
	pos      int64
	closed   bool
}

func (f *memFile) check(write bool) error {
	switch {
	case f.closed:
		return os.ErrClosed
	case write && !f.writable:
		return pathErr("write", f.name, errors.New("bad file descriptor"))
	}
	return nil
}

func (f *memFile) ReadAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(false); err != nil {
		return 0, err
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(b, f.n.data[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(true); err != nil {
		return 0, err
	}
	if end := off + int64(len(b)); end > int64(len(f.n.data)) {
		f.n.data = append(f.n.data, make([]byte, end-int64(len(f.n.data)))...)
	}
	copy(f.n.data[off:], b)
	return len(b), nil
}

func (f *memFile) Write(b []byte) (int, error) {
	n, err := f.WriteAt(b, f.pos)
	f.pos += int64(n)
	return n, err
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return os.ErrClosed
	}
	f.closed = true
	return nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(false); err != nil {
		return err
	}
	if f.n.dir {
		f.n.syncedChildren = maps(f.n.children)
	} else {
		f.n.synced = slices.Clone(f.n.data)
	}
	return nil
}

func maps(m map[string]*memNode) map[string]*memNode {
	c := make(map[string]*memNode, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func (f *memFile) Stat() (os.FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return nil, os.ErrClosed
	}
	return memInfo{name: filepath.Base(f.name), n: f.n}, nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(true); err != nil {
		return err
	}
	if size <= int64(len(f.n.data)) {
		f.n.data = f.n.data[:size]
	} else {
		f.n.data = append(f.n.data, make([]byte, size-int64(len(f.n.data)))...)
	}
	return nil
}

func (f *memFile) Name() string { return f.name }

// errorFS wraps an FS and fails operations inject chooses: inject is
// called with the operation ("write", "sync", "create", "truncate",
// "rename", "mkdir", "remove") and the path, and its error is returned
// instead of doing the operation.
type errorFS struct {
	FS
	mu     sync.Mutex
	inject func(op, path string) error
}

func (e *errorFS) fail(op, path string) error {
	e.mu.Lock()
	inject := e.inject
	e.mu.Unlock()
	if inject == nil {
		return nil
	}
	if err := inject(op, path); err != nil {
		return pathErr(op, path, err)
	}
	return nil
}

// set replaces the injector (nil: nothing fails).
func (e *errorFS) set(inject func(op, path string) error) {
	e.mu.Lock()
	e.inject = inject
	e.mu.Unlock()
}

func (e *errorFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if flag&os.O_CREATE != 0 {
		if err := e.fail("create", name); err != nil {
			return nil, err
		}
	}
	f, err := e.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &errorFile{File: f, e: e}, nil
}

func (e *errorFS) OpenDir(name string) (File, error) {
	f, err := e.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &errorFile{File: f, e: e}, nil
}

func (e *errorFS) Rename(oldname, newname string) error {
	if err := e.fail("rename", newname); err != nil {
		return err
	}
	return e.FS.Rename(oldname, newname)
}

func (e *errorFS) Mkdir(name string, perm os.FileMode) error {
	if err := e.fail("mkdir", name); err != nil {
		return err
	}
	return e.FS.Mkdir(name, perm)
}

func (e *errorFS) MkdirAll(name string, perm os.FileMode) error {
	if err := e.fail("mkdir", name); err != nil {
		return err
	}
	return e.FS.MkdirAll(name, perm)
}

func (e *errorFS) Remove(name string) error {
	if err := e.fail("remove", name); err != nil {
		return err
	}
	return e.FS.Remove(name)
}

type errorFile struct {
	File
	e *errorFS
}

func (f *errorFile) WriteAt(b []byte, off int64) (int, error) {
	if err := f.e.fail("write", f.Name()); err != nil {
		return 0, err
	}
	return f.File.WriteAt(b, off)
}

func (f *errorFile) Write(b []byte) (int, error) {
	if err := f.e.fail("write", f.Name()); err != nil {
		return 0, err
	}
	return f.File.Write(b)
}

func (f *errorFile) Sync() error {
	if err := f.e.fail("sync", f.Name()); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *errorFile) Truncate(size int64) error {
	if err := f.e.fail("truncate", f.Name()); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

// String helps failure messages.
func (f *memFile) String() string { return fmt.Sprintf("memFile(%s)", f.name) }
