package postgres

import (
	"context"

	"github.com/cdcd-dev/cdcd/source"
)

// loadEmitter hands the initial load's batches to the Emitter in plan
// order, marking where the load and each table begin and end (Debezium's
// source.snapshot: first, first_in_data_collection,
// last_in_data_collection, last) and giving every row the snapshot's
// transaction id. Whether a row is its table's last is known only once
// the next batch comes from another table or the load ends, and a chunk
// may be empty; so the newest batch is held back until the next one
// arrives. The held batch's chunk is not done: the load's progress
// (heldSeq) never counts it until it is emitted.
type loadEmitter struct {
	emit func(context.Context, []source.Change) error
	free loadFree
	xid  uint64
	// first: the next row is the load's first (a resumed load's is not).
	first bool
	// table is the table of the newest batch taken.
	table string

	held    *loadBuf
	heldSeq int
	// emitted counts rows emitted since the last call of emittedRows.
	emitted int64
	stats   *Stats
}

// take takes one batch of chunk seq, of table, emitting the batch held
// before it.
func (l *loadEmitter) take(ctx context.Context, buf *loadBuf, seq int, table string) error {
	if len(buf.changes) == 0 {
		l.free.put(buf)
		return nil
	}
	for i := range buf.changes {
		buf.changes[i].TxID = l.xid
	}
	if table != l.table {
		buf.changes[0].Mark(source.PlaceFirstInTable)
	}
	if l.first {
		buf.changes[0].Mark(source.PlaceFirst)
		l.first = false
	}
	if err := l.flush(ctx, table != l.table, false); err != nil {
		return err
	}
	l.table, l.held, l.heldSeq = table, buf, seq
	return nil
}

// flush emits the held batch; tableEnds says its last row is its table's
// last, loadEnds the load's last.
func (l *loadEmitter) flush(ctx context.Context, tableEnds, loadEnds bool) error {
	b := l.held
	if b == nil {
		return nil
	}
	last := &b.changes[len(b.changes)-1]
	if tableEnds {
		last.Mark(source.PlaceLastInTable)
	}
	if loadEnds {
		last.Mark(source.PlaceLast)
	}
	n := int64(len(b.changes))
	if err := l.emit(ctx, b.changes); err != nil {
		return err
	}
	l.held = nil
	l.free.put(b)
	l.emitted += n
	l.stats.SnapshotRows.Add(n)
	return nil
}

// done returns the number of chunks wholly emitted when chunks [0, next)
// have been taken: up to the held batch's chunk.
func (l *loadEmitter) done(next int) int {
	if l.held != nil {
		return l.heldSeq
	}
	return next
}

// emittedRows returns the rows emitted since its last call.
func (l *loadEmitter) emittedRows() int64 {
	n := l.emitted
	l.emitted = 0
	return n
}
