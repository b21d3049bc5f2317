package iceberg

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/log"
)

// The classes of a table's failures. classify (the one place that decides)
// puts every error into one of them; the commit loop and Sink.Run act on
// the class, never on an error's text.
var (
	// ErrConflict: another commit moved the table between this commit's
	// read and its write. The table is reloaded, the commit revalidated
	// (the offsets must still be this writer's) and replayed at once.
	ErrConflict = errors.New("iceberg: commit conflict")
	// ErrCommitUnknown: the catalog may or may not have applied the
	// commit. It is settled by looking for its commit id in the reloaded
	// table: never replayed, and its files never removed, before that.
	ErrCommitUnknown = errors.New("iceberg: commit outcome unknown")
	// ErrTransient: the catalog or the storage could not be reached or
	// answered with a temporary failure. Retried with backoff within the
	// commit budget; past it the table's loop restarts from the offsets
	// its table holds, and its stall shows (CdcdCommitsFailing).
	ErrTransient = errors.New("iceberg: temporary failure")
	// ErrPaused: retrying cannot help (Iceberg refuses a change, another
	// writer owns the table, a change cannot be written, the log lost
	// offsets the table needs). The table pauses at once, naming the
	// reason and the fix (a *PauseError); it is looked at again every
	// RetryInterval, so a fix made meanwhile resumes it.
	ErrPaused = errors.New("iceberg: table paused")
	// ErrFenced: another sink process owns the table now (Config.Shared):
	// a newer owner epoch is in the table, so this process's commit is
	// refused and its loop of the table ends (owner.go). A *PauseError
	// wraps it, so it is also ErrPaused.
	ErrFenced = errors.New("iceberg: fenced by a newer owner of the table")
)

// errTableGone: the table is no longer in the catalog (dropped under the
// sink). Retrying the commit cannot help, and it did not land: the table's
// loop restarts at once from load (class errReload: rollback.go), which
// finds no table, re-creates it and writes it again from the log's start
// (a log that lost its start pauses it, naming the re-snapshot:
// checkDamage).
var errTableGone error = &reloadError{"iceberg: the table is gone from the catalog"}

// PauseError pauses one table: what happened (with where: table, column,
// offsets, file) and what the operator does about it.
type PauseError struct {
	Table string
	// What happened, one line.
	What string
	// Fix is what to do, one line.
	Fix string
	// Err is the cause, if any.
	Err error
}

func (e *PauseError) Error() string {
	return "iceberg: table " + e.Table + " paused: " + e.What + "; to fix: " + e.Fix
}

func (e *PauseError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrPaused}
	}
	return []error{ErrPaused, e.Err}
}

// refuse makes err pause the table, with fix (when fix is "", the
// re-snapshot that rebuilds the table's mirror).
func refuse(fix string, err error) error {
	return &PauseError{What: strings.TrimPrefix(err.Error(), "iceberg: "), Fix: fix, Err: err}
}

// tableShapeFix is the fix when the source table cannot be mirrored as it
// is (no primary key in upsert mode, a type or partition field Iceberg
// cannot take).
const tableShapeFix = "change the source table or the table's settings (sink.iceberg.mode, partition_by) as the reason says; the table resumes at its next try"

// undecodable makes an error decoding a log record pause the table: the
// record stays as it is.
func undecodable(err error) error {
	return refuse("the record cannot be decoded with the registry's schemas (the _schemas topic): report it as a bug; the table can be rebuilt with a re-snapshot (cdcd snapshot -c FILE --replace TABLE)", err)
}

// badData makes a change that cannot be written pause the table (a key
// column NULL, an unchanged value with no row to take it from): the fix
// is the re-snapshot that rebuilds the table's mirror.
func badData(err error) error { return refuse("", err) }

// resnapshotFix is the fix for a table whose mirror cannot be trusted any
// more: a re-snapshot that replaces its contents.
func resnapshotFix(table string) string {
	return "rebuild its mirror with a re-snapshot: cdcd snapshot -c FILE --replace " + table
}

// classify returns the class of err: one of ErrPaused, ErrConflict,
// ErrCommitUnknown or ErrTransient. Errors it does not recognise are
// transient: retried within the budget, then the table's loop restarts,
// as before classes existed.
func classify(err error) error {
	switch {
	case errors.Is(err, ErrPaused), errors.Is(err, log.ErrDataLost):
		return ErrPaused
	case errors.Is(err, ErrConflict), errors.Is(err, table.ErrCommitFailed), isRequirementFailure(err):
		return ErrConflict
	case errors.Is(err, ErrCommitUnknown), errors.Is(err, rest.ErrCommitStateUnknown):
		return ErrCommitUnknown
	case refusedByCatalog(err), missingFile(err) != "":
		return ErrPaused
	}
	return ErrTransient
}

// isRequirementFailure: iceberg-go's catalogs check a commit's
// requirements (the branch still at the parent, the schema unchanged)
// before they write, and its SQL catalog returns a failed one unwrapped,
// as a "requirement failed: ..." error — a conflict, like
// table.ErrCommitFailed.
func isRequirementFailure(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if strings.HasPrefix(strings.ToLower(e.Error()), "requirement failed") {
			return true
		}
	}
	return false
}

// refusedByCatalog: a REST catalog refused the request itself (bad
// request, credentials): sending it again gets the same answer.
func refusedByCatalog(err error) bool {
	return errors.Is(err, rest.ErrBadRequest) || errors.Is(err, rest.ErrForbidden) ||
		errors.Is(err, rest.ErrUnauthorized)
}

// missingFile returns the path of a file err says does not exist ("" if
// it says no such thing).
func missingFile(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) && errors.Is(err, fs.ErrNotExist) {
		return pe.Path
	}
	return ""
}

// asPause returns err, of class ErrPaused, as the *PauseError that says
// what happened to the table and the fix.
func asPause(table string, err error) *PauseError {
	var pe *PauseError
	if errors.As(err, &pe) {
		out := *pe
		if out.Table == "" {
			out.Table = table
		}
		if out.Fix == "" {
			out.Fix = resnapshotFix(table)
		}
		return &out
	}
	var lost *log.DataLossError
	switch {
	case errors.As(err, &lost):
		return &PauseError{Table: table, Err: err,
			What: fmt.Sprintf("the log lost offsets [%d, %d) of %s partition %d (%s), which the table has not read; "+
				"the sink never passes offsets it did not read", lost.From, lost.To, lost.Topic, lost.Partition, lost.Reason),
			Fix: resnapshotFix(table) + " (the table resumes at the re-snapshot's reset marker)"}
	case missingFile(err) != "":
		return &PauseError{Table: table, Err: err,
			What: fmt.Sprintf("file %s of the table is missing from the warehouse (deleted?): readers of the table fail too", missingFile(err)),
			Fix:  "restore the file from a backup, or " + resnapshotFix(table)}
	case refusedByCatalog(err):
		return &PauseError{Table: table, Err: err, What: "the catalog refused the request: " + err.Error(),
			Fix: "check the catalog's URI, credentials and permissions (sink.iceberg.catalog)"}
	}
	return &PauseError{Table: table, Err: err, What: err.Error(), Fix: "read the error"}
}
