package mysql

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	sqldriver "github.com/go-sql-driver/mysql"
)

var (
	// errNoMetadata: a table map without column names, written while
	// binlog_row_metadata was not FULL.
	errNoMetadata = errors.New("mysql: the binlog's table map has no column names (binlog_row_metadata is not FULL): " +
		"SET GLOBAL binlog_row_metadata = FULL (and in the server's config file)")
	// errPartialImage: a row image without every column (binlog_row_image
	// is not FULL).
	errPartialImage = errors.New("mysql: a row image lacks columns (binlog_row_image is not FULL): " +
		"SET GLOBAL binlog_row_image = FULL (and in the server's config file)")
)

// PreconditionError is a server setting or privilege the reader needs and
// does not have. Fix says what to run.
type PreconditionError struct {
	What string // e.g. "binlog_format is STATEMENT"
	Fix  string
}

func (e *PreconditionError) Error() string {
	return fmt.Sprintf("mysql: precondition failed: %s; to fix: %s", e.What, e.Fix)
}

// PurgedError: the binlogs holding the transactions after the pipeline's
// resume point are gone (purged, or expired by binlog_expire_logs_seconds /
// expire_logs_days), so changes were lost to the pipeline. cdcd never jumps
// over them: the captured tables must be loaded again.
type PurgedError struct {
	Resume string // the GTID set the pipeline would resume from
	Detail string // what the server said or showed
}

func (e *PurgedError) Error() string {
	return fmt.Sprintf("mysql: the binlogs after the pipeline's resume point %q were purged (%s): changes were lost to the "+
		"pipeline; re-snapshot every captured table (cdcd snapshot -c FILE --replace TABLE), and keep binlogs longer "+
		"(binlog_expire_logs_seconds / expire_logs_days) than cdcd may be stopped", e.Resume, e.Detail)
}

// TableError refuses a table the reader cannot capture faithfully (missing,
// no primary key, a column type without a mapping). It names the table,
// the column and type when there is one, and the fixes.
type TableError struct {
	Table  string
	Column string // "" when the table as a whole is refused
	Type   string
	Err    error
}

func (e *TableError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("mysql: table %s: %v", e.Table, e.Err)
	}
	return fmt.Sprintf("mysql: table %s column %q (type %s): %v", e.Table, e.Column, e.Type, e.Err)
}

func (e *TableError) Unwrap() error { return e.Err }

// ValueError reports a value that could not be decoded, naming where.
type ValueError struct {
	Table, Column, Type string
	Err                 error
}

func (e *ValueError) Error() string {
	return fmt.Sprintf("mysql: %s column %q (type %s): %v", e.Table, e.Column, e.Type, e.Err)
}

func (e *ValueError) Unwrap() error { return e.Err }

// connError marks a failure of the connection or the server's session: the
// reader reconnects.
type connError struct{ err error }

func (e *connError) Error() string { return e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

// Server error codes the reader tells apart.
const (
	erMasterFatalReadingBinlog = 1236 // the binlog position or GTID asked for is gone
	erServerShutdown           = 1053
	erConnCountError           = 1040 // too many connections
	erQueryInterrupted         = 1317
	erConnKilled               = 1927 // MariaDB: connection was killed
	erNoSuchThread             = 1094
)

// serverCode returns the server's error code in err, or 0.
func serverCode(err error) uint16 {
	var me *gomysql.MyError
	if errors.As(err, &me) {
		return me.Code
	}
	var de *sqldriver.MySQLError
	if errors.As(err, &de) {
		return de.Number
	}
	return 0
}

// retryable reports whether err is worth reconnecting for: a lost
// connection, a server shutting down or starting. Everything the reader
// decides itself is terminal.
func retryable(err error) bool {
	if err == nil {
		return false
	}
	var pe *PreconditionError
	var pu *PurgedError
	var te *TableError
	var ve *ValueError
	var re *ResumeError
	if errors.As(err, &pe) || errors.As(err, &pu) || errors.As(err, &te) || errors.As(err, &ve) || errors.As(err, &re) {
		return false
	}
	var ce *connError
	if errors.As(err, &ce) {
		return true
	}
	switch serverCode(err) {
	case erServerShutdown, erConnCountError, erQueryInterrupted, erConnKilled:
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, sqldriver.ErrInvalidConn)
}

// ResumeError: the server cannot stream from the pipeline's resume point
// for a reason other than purged binlogs (the server is behind it: a
// restored backup, a failover to a lagging replica). Nothing is skipped.
type ResumeError struct {
	Resume string
	Detail string
}

func (e *ResumeError) Error() string {
	return fmt.Sprintf("mysql: the server cannot stream from the pipeline's resume point %q: %s; point the dsn at the server "+
		"the pipeline read (or one that has caught up with it), or re-snapshot the tables (cdcd snapshot -c FILE --replace TABLE)",
		e.Resume, e.Detail)
}
