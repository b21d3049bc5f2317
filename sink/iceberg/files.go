package iceberg

import (
	"context"
	"errors"
	"fmt"

	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// attemptFiles names the files of one commit attempt after its write id
// (doc.go, "Files") and remembers every name it gave, so the files of an
// attempt that did not land can be removed.
type attemptFiles struct {
	id    string // 16 hex digits
	seq   int
	paths []string
}

func newAttemptFiles() *attemptFiles { return &attemptFiles{id: newCommitID()[:16]} }

// data names a new data, position-delete or Puffin file (ext), under the
// partition directory partPath ("" for none).
func (a *attemptFiles) data(tbl *table.Table, partPath, ext string) string {
	a.seq++
	name := fmt.Sprintf("%s-%05d.%s", a.id, a.seq, ext)
	if partPath != "" {
		name = partPath + "/" + name
	}
	var path string
	if lp, err := tbl.LocationProvider(); err != nil {
		path = tbl.Location() + "/data/" + name
	} else {
		path = lp.NewDataLocation(name)
	}
	a.paths = append(a.paths, path)
	return path
}

// manifest names a new manifest.
func (a *attemptFiles) manifest(lp table.LocationProvider) string {
	a.seq++
	return a.metadata(lp, fmt.Sprintf("%s-m%d.avro", a.id, a.seq))
}

// metadata names a new file of the metadata directory.
func (a *attemptFiles) metadata(lp table.LocationProvider, name string) string {
	path := lp.NewMetadataLocation(name)
	a.paths = append(a.paths, path)
	return path
}

// remove removes every file named (those not written are not there); a
// file it cannot remove is left to the orphan sweep. It returns how many
// it removed.
func (a *attemptFiles) remove(fs icebergio.IO) int {
	n := 0
	for _, p := range a.paths {
		if fs.Remove(p) == nil {
			n++
		}
	}
	a.paths = nil
	return n
}

// discardAttempt removes the files of a commit attempt that did not land
// (err is why), so a failing commit does not leave a file at every retry.
// An attempt the catalog may still apply (its commit was sent, and the
// catalog did not refuse it) keeps its files until a later commit lands:
// that commit moves the branch past the attempt's parent, which the
// attempt requires, so it can never land after.
func (w *tableWriter) discardAttempt(ctx context.Context, err error) {
	if w.files == nil || len(w.files.paths) == 0 {
		return
	}
	var sent catalogCommitError
	if c := classify(err); errors.As(err, &sent) && (c == ErrTransient || c == ErrCommitUnknown) {
		w.keepAttempt()
		return
	}
	fs, ferr := w.tbl.FS(ctx)
	if ferr != nil {
		return // left to the orphan sweep
	}
	n := w.files.remove(fs)
	w.logger.Debug("removed the files of a commit attempt that did not land", "files", n, "err", err)
	w.files = nil
}

// keepAttempt keeps the files of an attempt whose outcome is not settled
// until a later commit lands (removeUnsettled).
func (w *tableWriter) keepAttempt() {
	if w.files != nil {
		w.unsettled = append(w.unsettled, w.files.paths...)
		w.files = nil
	}
}

// removeUnsettled removes the files of attempts that did not land, once a
// commit has landed after them.
func (w *tableWriter) removeUnsettled(ctx context.Context) {
	if len(w.unsettled) == 0 {
		return
	}
	fs, err := w.tbl.FS(ctx)
	if err != nil {
		return
	}
	old := &attemptFiles{paths: w.unsettled}
	n := old.remove(fs)
	w.logger.Debug("removed the files of earlier commit attempts that did not land", "files", n)
	w.unsettled = nil
}
