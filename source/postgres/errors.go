package postgres

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// SlotErrorKind says what is wrong with the replication slot or the
// cluster behind it. Every kind stops the reader: continuing could lose or
// invent changes, so an operator decides. The daemon alerts on them.
type SlotErrorKind string

const (
	// SlotInvalidated: the server removed WAL the slot still needed
	// (pg_replication_slots.wal_status = lost, e.g. max_slot_wal_keep_size);
	// changes are lost. cdcd never recreates the slot by itself.
	SlotInvalidated SlotErrorKind = "slot_invalidated"
	// SlotMissing: the slot this pipeline created is gone (dropped, or a
	// failover to a server without it); changes since may be lost.
	SlotMissing SlotErrorKind = "slot_missing"
	// SlotAhead: the slot's confirmed position is past the newest position
	// this pipeline made durable (someone else consumed or advanced it, or
	// the pipeline's data was restored from an older backup); the changes
	// between are lost to the pipeline.
	SlotAhead SlotErrorKind = "slot_ahead"
	// SystemIDChanged: another cluster answers at the DSN (failover to a
	// server that is not a physical replica, a restored backup); its WAL is
	// not the WAL the pipeline read.
	SystemIDChanged SlotErrorKind = "system_id_changed"
	// SlotForeign: the slot exists but this pipeline has no record of it,
	// and it needs a slot created with its own snapshot for the initial load.
	SlotForeign SlotErrorKind = "slot_foreign"
	// SlotWrongPlugin: the slot decodes with another plugin than pgoutput, or
	// belongs to another database.
	SlotWrongPlugin SlotErrorKind = "slot_wrong_plugin"
)

// SlotError stops the reader when the slot or the cluster can no longer be
// trusted to deliver every change. Retrying does not help; Detail says
// what the operator can do.
type SlotError struct {
	Kind   SlotErrorKind
	Slot   string
	Detail string
}

func (e *SlotError) Error() string {
	return fmt.Sprintf("postgres: replication slot %s: %s: %s", e.Slot, e.Kind, e.Detail)
}

// PublicationError reports a publication that does not publish what the
// pipeline needs; Detail names the fix.
type PublicationError struct {
	Publication string
	Detail      string
}

func (e *PublicationError) Error() string {
	return fmt.Sprintf("postgres: publication %s: %s", e.Publication, e.Detail)
}

// TableError refuses a table the reader cannot capture faithfully (no
// key, REPLICA IDENTITY NOTHING, a column type without a mapping). It
// names the table, the column and type when there is one, and the fixes.
type TableError struct {
	Table  string
	Column string // "" when the table as a whole is refused
	Type   string
	Err    error
}

func (e *TableError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("postgres: table %s: %v", e.Table, e.Err)
	}
	return fmt.Sprintf("postgres: table %s column %q (type %s): %v", e.Table, e.Column, e.Type, e.Err)
}

func (e *TableError) Unwrap() error { return e.Err }

// ValueError reports a value that could not be decoded, or that has no
// exact form in the table model, naming where.
type ValueError struct {
	Table, Column, Type string
	// Index is the column's place in the row; Raw the value as the server
	// sent it (nil when the tuple, not the value, was at fault).
	Index int
	Raw   []byte
	Err   error
}

func (e *ValueError) Error() string {
	return fmt.Sprintf("postgres: %s column %q (type %s): %v", e.Table, e.Column, e.Type, e.Err)
}

func (e *ValueError) Unwrap() error { return e.Err }

// connError marks a failure of the connection or of the server's session
// (network, restart, a terminated walsender): the reader reconnects.
type connError struct{ err error }

func (e *connError) Error() string { return e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

// retryable reports whether err is worth reconnecting for: a lost
// connection, or a server that is shutting down, starting, overloaded, or
// still holds the slot for a walsender that is going away. Everything the
// reader decides itself (slot, publication, table and value errors) is
// terminal.
func retryable(err error) bool {
	if err == nil {
		return false
	}
	var se *SlotError
	var pe *PublicationError
	var te *TableError
	var ve *ValueError
	var pre *PreconditionError
	if errors.As(err, &se) || errors.As(err, &pe) || errors.As(err, &te) || errors.As(err, &ve) || errors.As(err, &pre) {
		return false
	}
	var ce *connError
	if errors.As(err, &ce) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", // connection exception
			"53", // insufficient resources (too many connections)
			"57": // operator intervention: admin shutdown, crash shutdown, cannot connect now
			return true
		}
		return pgErr.Code == "55006" // object in use: the slot is still active for an old walsender
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) {
		return true
	}
	return pgconn.SafeToRetry(err) || isConnectError(err)
}

// slotInUse reports whether err is the server's "replication slot is
// active for PID n" (object in use).
func slotInUse(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55006"
}

func isConnectError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}
