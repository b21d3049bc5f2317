// Package source defines the row-change event every database reader emits
// and the contract between a reader and the stage that makes its events
// durable. source/postgres and source/mysql implement it.
package source

import (
	"bytes"
	"context"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
)

// Op is the kind of a change, with Debezium's letters.
type Op byte

const (
	OpCreate   Op = 'c'
	OpUpdate   Op = 'u'
	OpDelete   Op = 'd'
	OpRead     Op = 'r' // a row read by a snapshot
	OpTruncate Op = 't'
)

func (o Op) String() string { return string(o) }

// Position is a source position as a byte string whose bytewise order is the
// order in which the source committed the changes. Each source defines its
// layout (PostgreSQL: package source/postgres/pgpos).
type Position []byte

// Compare orders two positions; an empty position sorts first.
func (p Position) Compare(o Position) int { return bytes.Compare(p, o) }

// Change is one row change, in the table model of package schema.
type Change struct {
	// Table is the shape of the table at this change. Changes of one table
	// share the pointer until the shape changes.
	Table *schema.Table
	Op    Op
	// Before is the old row of an update or delete as far as the source
	// knows it (PostgreSQL's replica identity; absent columns are nil); nil
	// for inserts, reads and truncates. After is the new row of an insert,
	// update or read; nil otherwise. A value may be schema.Unchanged.
	Before, After []any
	// Pos orders the change among all changes of the source.
	Pos Position
	// LSN is the commit LSN of a PostgreSQL transaction (0 for MySQL).
	LSN uint64
	// EventLSN is the WAL position of the change's own record (PostgreSQL;
	// 0 when unknown: snapshot reads, MySQL).
	EventLSN uint64
	// Binlog is where a MySQL change was read (nil elsewhere).
	Binlog *BinlogPlace
	// TxID is the source's transaction id (PostgreSQL xid), 0 if none.
	TxID uint64
	// CommitTime is when the source transaction committed (snapshot reads:
	// when the snapshot started).
	CommitTime time.Time
	// Snapshot marks rows read by a snapshot rather than streamed.
	Snapshot bool
	// Place says where a snapshot row lies in its snapshot (Debezium's
	// source.snapshot); PlaceInside for the rows between the marked ones.
	Place SnapshotPlace
	// Message, when set, makes the change a logical decoding message
	// (PostgreSQL's transactional pg_logical_emit_message) with a prefix
	// the reader was asked to deliver, at its place in its transaction;
	// Table is then nil and Op 0. The outbox relay takes these.
	Message *Message
	// KeyChange marks the delete half of an update that changed the
	// primary key (a delete of the old key, then an insert of the new key
	// at the next position of the transaction) when that insert carries the
	// old key as its Before because some of its values arrived unchanged.
	// A consumer taking those values from the old key's row needs both
	// halves together; the two keys usually live in different log
	// partitions, and only the delete's own record can say, before the
	// insert has been read, that an insert depends on it.
	KeyChange bool
	// Fault, when set, marks a change the source could not read
	// faithfully — a value with no exact form in the table model (a
	// timestamp past year 294247, an array of other dimensions than its
	// column declares, invalid UTF-8 in a text column) — or a table it can
	// no longer follow (dropped, left out of the publication). The Emitter
	// stops that table alone: the change and the table's later changes
	// wait, in order, until an operator resolves the fault; the other
	// tables flow. Before and After hold what could be read (the faulty
	// value nil); a fault of a whole table carries no row (Op 0, Before
	// and After nil) and only stops the table.
	Fault *Fault
	// Reset, on a truncate, makes it a reset marker: the start of a snapshot
	// run (Reset is the run's id) that replaces the table's contents. The
	// daemon writes it as the record header cdcd.reset into every partition;
	// a sink that stopped trusting a table may resume at it.
	Reset string
	// Prepared, when set, is an Emitter's encoding of the change made
	// ahead of its Emit (Preparer). Only the Emitter that set it reads it,
	// and only while Table has the shape it was made with; a source that
	// changes After must clear it.
	Prepared any
}

// Message is a logical decoding message delivered as a change.
type Message struct {
	Prefix  string
	Content []byte
}

// BinlogPlace is where a change was read from a MySQL binlog (Debezium's
// source.file, pos, row, server_id and gtid).
type BinlogPlace struct {
	File string
	// Pos is the position of the row event in File; Row the row's index
	// in it.
	Pos      uint64
	Row      int32
	ServerID uint32
	GTID     string
}

// SnapshotPlace is where a row read by a snapshot lies in it, so consumers
// see where a snapshot starts and ends. Where one row is more than one of
// them, it is the latest listed: Last over First over FirstInTable over
// LastInTable (Debezium's precedence).
type SnapshotPlace uint8

const (
	PlaceInside       SnapshotPlace = iota // a row of the initial load, not first or last
	PlaceLastInTable                       // the last row of its table
	PlaceFirstInTable                      // the first row of its table
	PlaceFirst                             // the load's first row
	PlaceLast                              // the load's last row
	PlaceIncremental                       // a row of an incremental snapshot (its rows interleave with streaming)
)

// Mark gives c place p unless it has one that takes precedence.
func (c *Change) Mark(p SnapshotPlace) {
	if p > c.Place {
		c.Place = p
	}
}

// Fault says what stops a table and how to resolve it.
type Fault struct {
	// Reason says what happened, naming the table and, for a value, the
	// key, the column and the value.
	Reason string
	// Column is the column of a faulty value ("" for a fault of the table).
	Column string
	// Value is the faulty value as the database prints it ("" when the
	// fault is the table's or the value has no text).
	Value string
	// Fix says what the operator can do.
	Fix string
}

// Key returns the primary-key values of the change: from After when there is
// one, else from Before. Nil for truncates.
func (c *Change) Key() []any {
	row := c.After
	if row == nil {
		row = c.Before
	}
	if row == nil {
		return nil
	}
	k := make([]any, len(c.Table.Key))
	for i, ci := range c.Table.Key {
		k[i] = row[ci]
	}
	return k
}

// Emitter is where a source hands its changes. Emit returns once every change
// in batch is durable downstream; only then may the source tell its database
// that it may forget them — and only for transactions all of whose changes
// have been emitted. Batches come in position order; a large transaction may
// span several batches. After Emit returns, the Emitter keeps nothing of
// batch but the changes' positions (the source reuses the changes and their
// rows for the next batch: the initial load does).
type Emitter interface {
	Emit(ctx context.Context, batch []Change) error
}

// Pipeliner is an optional ability of an Emitter (found by type assertion):
// taking the next batch while earlier ones are still being made durable, so
// a source with many rows and no need to acknowledge each batch (an initial
// load) keeps reading while the log syncs. Submit and Sync are called from
// one goroutine, interleaved with Emit as the source likes.
type Pipeliner interface {
	// Submit hands batch over like Emit but may return before it is
	// durable; it keeps nothing of batch after it returns but the changes'
	// positions, as for Emit. Batches become
	// durable in the order submitted. An error (also one of an earlier
	// batch) means nothing submitted since the last successful Sync may be
	// assumed durable.
	Submit(ctx context.Context, batch []Change) error
	// Sync returns once every batch submitted so far is durable, or with
	// the first error.
	Sync(ctx context.Context) error
}

// Tracker is an optional ability of a Pipeliner (found by type assertion):
// telling, without waiting, which submitted batches are durable. A source
// that confirms positions to its database (a stream) submits a batch,
// reads on, and confirms the batch's position once Durable reaches the
// batch's number: decoding and the log's sync overlap instead of taking
// turns. Submitted batches become durable on their own (no Sync needed),
// in the order submitted; how many are in flight is bounded by Submit,
// which waits while the pipeline is full.
type Tracker interface {
	Pipeliner
	// SubmitTracked is Submit that also returns the batch's number.
	// Numbers grow with every batch handed over (by Emit and Submit too),
	// so a batch's number is greater than every earlier batch's.
	SubmitTracked(ctx context.Context, batch []Change) (uint64, error)
	// Durable returns the number of the newest batch that is durable with
	// every batch before it (0: none yet), and the first error of any
	// batch: from then on nothing submitted after the batches counted
	// durable may be assumed durable, and the source stops.
	Durable() (uint64, error)
}

// Preparer is an optional ability of an Emitter (found by type assertion):
// encoding changes before they are handed over, on another goroutine than
// the source's stream, so the stream's goroutine only puts them in their
// place. An incremental snapshot prepares a chunk's rows on the goroutine
// that read them, while the stream has not reached the chunk's high
// watermark yet.
type Preparer interface {
	// Prepare encodes what of each change of batch does not depend on
	// its position, source position or time, and keeps it in the change's
	// Prepared; a change it cannot prepare is left as it is (Emit and
	// Submit encode it then). The changes' Pos may still be unset. Safe to
	// call concurrently with Emit, Submit, Sync and other Prepare calls.
	Prepare(batch []Change)
}

// Holder is an optional ability of an Emitter (found by type assertion):
// a stage that delivers some changes after Emit returned (the outbox
// relay's webhooks) holds the source's confirmed position back, so that
// the database sends those changes again after a restart unless they were
// delivered.
type Holder interface {
	// Held returns the position of the oldest change handed over and not
	// yet delivered everywhere, and false when none is held. The source
	// confirms nothing from its transaction on.
	Held() (Position, bool)
}

// CatchUpNotifier is an optional ability of an Emitter (found by type
// assertion): hearing that the source, after reading a backlog, has
// caught up with its database. A consumer that gathers changes until a
// timer fires (the Iceberg sink's commit interval) can then hand on what
// it holds at once: a restarted pipeline's mirror is current as soon as
// the backlog is read, not an interval later. A source says it once a
// backlog, never while it merely keeps up with a steady stream.
type CatchUpNotifier interface {
	// CaughtUp says that every change read before it has been handed over
	// (Emit, Submit). Called from the goroutine that hands changes over;
	// it does not wait.
	CaughtUp()
}

// Source reads a database's changes until ctx ends or a terminal error.
type Source interface {
	// Run emits changes to e. After a restart it starts from what the
	// database still holds for it (PostgreSQL: the slot's confirmed
	// position), so changes already durable downstream may come again; the
	// Emitter drops those by position, per log partition.
	Run(ctx context.Context, e Emitter) error
}
