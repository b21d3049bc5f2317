package iceberg

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"strings"
	"sync"

	"github.com/cdcd-dev/cdcd/log"
)

// A file of a table deleted from the warehouse (issue 24 item 6) makes the
// table unreadable for everyone: the sink notices it when it reads the
// file (a rewrite, a deletion vector, an unchanged value's row) and pauses
// the table, naming the file. The pause holds, at every retry, while the
// table still references the file and it is still missing: the table
// resumes when the file is put back, or at the reset markers of a
// re-snapshot, whose truncate drops it.

// damaged remembers, per topic, a file its table references but the
// warehouse lost.
type damaged struct {
	mu    sync.Mutex
	files map[string]string
}

func (d *damaged) set(topic, path string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.files == nil {
		d.files = map[string]string{}
	}
	d.files[topic] = path
}

func (d *damaged) get(topic string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.files[topic]
	return p, ok
}

func (d *damaged) clear(topic string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.files, topic)
}

// referenced returns the location of the upsert table's live file that
// path (a location, or a local path as an error names it) is.
func (u *upsert) referenced(path string) (string, bool) {
	if u == nil {
		return "", false
	}
	same := func(loc string) bool { return loc == path || strings.TrimPrefix(loc, "file://") == path }
	for loc := range u.data {
		if same(loc) {
			return loc, true
		}
	}
	for _, d := range u.dvs {
		if same(d.FilePath()) {
			return d.FilePath(), true
		}
	}
	for _, d := range u.posDeletes {
		if same(d.FilePath()) {
			return d.FilePath(), true
		}
	}
	return "", false
}

// checkDamage holds the pause of a table whose file the warehouse lost:
// while the table references it and it is still missing, the table
// resumes only at reset markers after its offsets (they truncate it), or
// stays paused.
func (w *tableWriter) checkDamage(ctx context.Context, info log.TopicInfo) error {
	path, ok := w.s.damaged.get(w.cfg.Topic)
	if !ok || w.tbl == nil {
		return nil
	}
	fs, err := w.tbl.FS(ctx)
	if err != nil {
		return err
	}
	if loc, ok := w.up.referenced(path); ok {
		f, err := fs.Open(loc)
		if err == nil {
			f.Close()
		}
		if errors.Is(err, iofs.ErrNotExist) {
			at, err := w.resetMarkers(ctx, info, func(p int) int64 { return max(w.next[p], info.Partitions[p].Start) })
			if err != nil {
				return err
			}
			if at == nil {
				return &PauseError{Table: identString(w.cfg.Ident), Err: err,
					What: fmt.Sprintf("file %s of the table is missing from the warehouse (deleted?): readers of the table fail too", path),
					Fix:  "restore the file from a backup, or " + resnapshotFix(identString(w.cfg.Ident))}
			}
			w.logger.Warn("a file of the table is missing from the warehouse; resuming at the reset markers of a re-snapshot, which truncate the table",
				"file", path, "offsets", encodeOffsets(at))
			w.resumeAt(at)
			return nil
		}
	}
	w.logger.Info("the table's missing file is back, or the table no longer references it", "file", path)
	w.s.damaged.clear(w.cfg.Topic)
	return nil
}
