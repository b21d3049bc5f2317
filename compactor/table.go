package compactor

import (
	"context"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"
)

// Table is what the compactor sees of one table: the narrow interface its
// writer (the sink) offers. The compactor calls it only from the table's
// own loop, between two of the writer's commits (the commit slot), except
// a Rewriter's methods, which the rewrite calls from its goroutine.
type Table interface {
	// Current is the table as of the writer's last commit.
	Current() *table.Table
	// Files are the live data files, with how many rows of each are
	// deleted; empty for a table whose files the writer does not track
	// (a changelog).
	Files() []File
	// DeleteFiles is how many delete files are live; Manifests how many
	// data and delete manifests the current snapshot has (both for the
	// status only; 0 when unknown).
	DeleteFiles() int
	Manifests() (data, deletes int)
	// Deleted returns each of files' deleted row positions now (a missing
	// entry: none). The bitmaps may be the writer's: copy to keep.
	Deleted(ctx context.Context, files []iceberg.DataFile) (map[string]*dv.RoaringPositionBitmap, error)
	// Rewriter reads and writes the data files of the current snapshot
	// for a rewrite; nil when the table's files are not sorted by a key
	// (a changelog), which is then never rewritten.
	Rewriter(ctx context.Context) (Rewriter, error)
	// CommitRewrite commits a finished rewrite (see Rewrite): one snapshot
	// replaces the old files with the new ones, and the writer's key index
	// moves the copied keys to their new places, atomically with it. On
	// an error the rewrite's files are removed unless the commit may have
	// landed; either way the writer's state stays consistent.
	CommitRewrite(ctx context.Context, r *Rewrite) error
	// CommitMaintenance commits tx, which changes no rows (an expiry, a
	// manifest rewrite), and makes the result the writer's table.
	CommitMaintenance(ctx context.Context, tx *table.Transaction) error
	// Pending lists files that a commit whose outcome is not settled yet
	// may reference: the orphan sweep leaves them.
	Pending() []string
}

// File is a live data file and how many of its rows are deleted.
type File struct {
	DataFile iceberg.DataFile
	Deleted  int64
}

// Rewriter reads and writes data files in the table's format, for one
// rewrite of one snapshot.
type Rewriter interface {
	// Open streams the rows of df in key order (the writer keeps every
	// data file sorted by key), with their positions.
	Open(df iceberg.DataFile) (Rows, error)
	// Create starts a data file at location name (a file name, placed
	// under the table's data location and first's partition) for rows of
	// the same partition as first.
	Create(name string, first []any) (FileWriter, error)
}

// Rows is a cursor over a data file's rows.
type Rows interface {
	// Next moves to the next row; false at the end.
	Next() (bool, error)
	// Pos is the current row's position in the file, Row its values in
	// the table's field order and Key its encoded key (byte order is key
	// order). All are valid until the next call of Next.
	Pos() int64
	Row() []any
	Key() []byte
	Close()
}

// FileWriter writes one data file.
type FileWriter interface {
	Add(row []any) error
	// Size is about how many bytes the file holds so far.
	Size() int
	// Finish completes the file and describes it.
	Finish() (iceberg.DataFile, error)
	// Abort removes a file that is not finished.
	Abort()
}

// Rewrite is a finished rewrite to commit.
type Rewrite struct {
	// ID is the commit id of the rewrite's snapshot.
	ID string
	// Old are the files rewritten, New the files written.
	Old, New []iceberg.DataFile
	// Deleted are positions, per new file, of rows the writer deleted in
	// the old files while the rewrite ran: deleted in the new ones too.
	Deleted map[string][]int64
	// Moves calls fn with every copied key still live and its new place.
	Moves func(fn func(key []byte, file string, pos int64))
}
