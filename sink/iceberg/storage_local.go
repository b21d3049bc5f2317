package iceberg

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	icebergio "github.com/apache/iceberg-go/io"
)

// durableLocal is the file IO of local warehouses (file:// and paths
// without a scheme): iceberg-go's LocalFS, except that a file it writes is
// on disk, and so is its directory entry, when its Close or WriteFile
// returns. LocalFS writes through the page cache and never syncs, so a
// power failure or kernel crash after a commit could leave the catalog
// (SQLite, which syncs) pointing at a metadata file, manifest list,
// manifest, data file or deletion vector that is empty or missing — a
// table that no longer loads, though every stage before it had
// acknowledged only what was durable (kill -9 cannot show this: the page
// cache outlives the process). A commit writes each file it refers to
// before the catalog's pointer moves, so syncing each file as it is closed
// orders them: data files (synced in the range writers, in parallel),
// deletion vectors, manifests, the list, the metadata file, then the
// catalog. It costs an fsync a file (0.7–3.5 ms on the development machine's
// disk; docs/internals.md, "The local warehouse made durable").
type durableLocal struct{ icebergio.LocalFS }

// The catalogs build every table's IO through iceberg-go's registry
// (io.LoadFS), which maps file:// and scheme-less locations to LocalFS in
// its init; this package's init, which runs after it, puts durableLocal
// in its place.
func init() {
	for _, scheme := range []string{"file", ""} {
		icebergio.Unregister(scheme)
		icebergio.Register(scheme, func(context.Context, *url.URL, map[string]string) (icebergio.IO, error) {
			return durableLocal{}, nil
		})
	}
}

// Create creates name (and its directories) for writing; the returned
// writer's Close syncs the file and its directory.
func (d durableLocal) Create(name string) (icebergio.FileWriter, error) {
	w, err := d.LocalFS.Create(name)
	if err != nil {
		return nil, err
	}
	f, ok := w.(*os.File)
	if !ok { // not what LocalFS returns; nothing to sync it with
		_ = w.Close()
		return nil, fmt.Errorf("iceberg: local file IO: %s: unexpected writer %T", name, w)
	}
	return syncedFile{f}, nil
}

// WriteFile writes p to name and syncs it and its directory.
func (d durableLocal) WriteFile(name string, p []byte) error {
	w, err := d.Create(name)
	if err != nil {
		return err
	}
	if _, err := w.Write(p); err != nil {
		_ = w.(syncedFile).File.Close()
		return err
	}
	return w.Close()
}

// Rename renames and syncs the directories of both names.
func (d durableLocal) Rename(oldpath, newpath string) error {
	if err := d.LocalFS.Rename(oldpath, newpath); err != nil {
		return err
	}
	return syncDirsOf(oldpath, newpath)
}

// RenameNoReplace renames unless newpath exists, and syncs the
// directories of both names.
func (d durableLocal) RenameNoReplace(oldpath, newpath string) error {
	if err := d.LocalFS.RenameNoReplace(oldpath, newpath); err != nil {
		return err
	}
	return syncDirsOf(oldpath, newpath)
}

// syncDirsOf syncs the directories holding the named files.
func syncDirsOf(names ...string) error {
	for _, n := range names {
		if err := syncDir(filepath.Dir(localOSPath(n))); err != nil {
			return err
		}
	}
	return nil
}

// localOSPath is the operating system's path of a file:// URL or a plain
// path (iceberg-go's LocalFS has the full rules, unexported; its Create
// has already refused what it cannot map).
func localOSPath(name string) string {
	if u, err := url.Parse(name); err == nil && strings.EqualFold(u.Scheme, "file") {
		return filepath.FromSlash(u.Path)
	}
	return name
}

// syncedFile is a file of a local warehouse being written.
type syncedFile struct{ *os.File }

// Close syncs the file, closes it and syncs its directory.
func (f syncedFile) Close() error {
	serr := f.File.Sync()
	cerr := f.File.Close()
	if serr != nil {
		return fmt.Errorf("iceberg: sync %s: %w", f.Name(), serr)
	}
	if cerr != nil {
		return cerr
	}
	if err := syncDir(filepath.Dir(f.Name())); err != nil {
		return err
	}
	if h := onLocalSynced; h != nil {
		h(f.Name())
	}
	return nil
}

// onLocalSynced, when set (tests), learns every file a local warehouse
// made durable.
var onLocalSynced func(path string)

// seenDirs are the directories whose entries in their parents were synced
// (or existed before this process wrote into them, which syncDir cannot
// tell: it syncs each ancestor once).
var seenDirs sync.Map

// syncDir syncs dir, so that the entries of the files created in it are
// durable. The first time a directory is met its ancestors are synced too,
// once each a process: it may be new (LocalFS.Create makes missing
// directories), and a file in a directory whose own entry was lost is lost
// with it. A directory's sync that the file system does not support
// (EINVAL, ENOTSUP) is skipped, as databases do; an ancestor's failure to
// open (a parent the process may not read) is too.
func syncDir(dir string) error {
	if err := fsyncDir(dir); err != nil {
		return err
	}
	for d := dir; ; {
		if _, seen := seenDirs.LoadOrStore(d, true); seen {
			return nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return nil
		}
		if err := fsyncDir(parent); err != nil && !errors.Is(err, os.ErrPermission) {
			return err
		}
		d = parent
	}
}

func fsyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("iceberg: sync directory %s: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return fmt.Errorf("iceberg: sync directory %s: %w", dir, err)
	}
	return nil
}
