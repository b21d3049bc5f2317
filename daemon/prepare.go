package daemon

import (
	"math"
	"strconv"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// Encoding ahead (source.Preparer).
//
// An incremental snapshot's chunk is emitted at its high watermark, on the
// stream's goroutine, under the emitter's lock: encoding its rows there
// (Avro row, key, partition) was most of that goroutine's work, while the
// chunks read ahead waited (38% of a snapshot's CPU profile). Prepare
// encodes a row's key and its envelope's before and after on the reader's
// goroutine, before the high watermark; Submit then writes only what
// depends on where the row lands — the frames, the source block, times
// and position (one tail a run of rows of one table, position apart) —
// and copies the rest. A row prepared under one table version and emitted
// under another shape (DDL in the chunk's window: the engine reads the
// chunk again anyway) is encoded afresh, as is every row of a masked
// pipeline, an oversized row, a row the encoding refuses (the pause path
// decides), and a held table's row.

// prepared is a change encoded ahead: what does not depend on its place.
// 32 bytes: a load prepares every row, and these are in memory for every
// batch in flight.
type prepared struct {
	slab  *prepSlab
	table *schema.Table // the version it was encoded with; nil once used
	// The key record's Avro body [key, mid) and the value's before and
	// after [mid, end) (no frames), in the slab's arena.
	key, mid, end uint32
	part          int32
}

func (p *prepared) keyBytes() []byte  { return p.slab.arena[p.key:p.mid:p.mid] }
func (p *prepared) headBytes() []byte { return p.slab.arena[p.mid:p.end:p.end] }

// prepSlab is the memory of one Prepare call's encodings. Once Submit has
// used every one of them (copied into its batch), it goes back to the
// emitter's free list for another Prepare: an initial load prepares every
// row, and a slab a batch (about 150 bytes a row) was garbage as fast as
// the load read. A slab some of whose rows are never used (dropped from a
// snapshot's window, encoded afresh) is left to the collector.
type prepSlab struct {
	owner *emitter
	pre   []prepared
	arena []byte
	left  int // rows prepared and not yet used; under the emitter's mu
}

// prepSlabsKept is how many used-up slabs the emitter keeps: about a
// load's batches in flight (two for each chunk in flight), at about 1.5 MB
// a slab of 10,000 rows.
const prepSlabsKept = 4

// slab returns an empty slab for n rows, a recycled one if any.
func (e *emitter) slab(n int) *prepSlab {
	select {
	case s := <-e.prepFree:
		if cap(s.pre) >= n {
			s.pre, s.arena = s.pre[:n], s.arena[:0]
			clear(s.pre)
			return s
		}
	default:
	}
	return &prepSlab{owner: e, pre: make([]prepared, n)}
}

// used notes that Submit copied p; the slab goes back once all of its
// rows were. REQUIRES: e.mu.
func (e *emitter) used(p *prepared) {
	p.table = nil // never used twice
	s := p.slab
	if s.left--; s.left == 0 && e.prepFree != nil && cap(s.arena) <= maxKeptArena {
		select {
		case e.prepFree <- s:
		default:
		}
	}
}

var _ source.Preparer = (*emitter)(nil)

// Prepare encodes the rows of batch that a snapshot read (op r) ahead of
// their Submit; see source.Preparer.
func (e *emitter) Prepare(batch []source.Change) {
	if e.masker != nil || len(batch) == 0 {
		return // masking picks a table version per change, in Submit
	}
	limit := e.maxRow()
	sl := e.slab(len(batch))
	arena := sl.arena
	var env schema.Envelope // one for the batch: zeroing its source block a row cost as much as a column's encoding
	for i := range batch {
		c := &batch[i]
		if !preparableWithin(c, limit) || len(arena) > math.MaxUint32-limit {
			continue
		}
		start := len(arena)
		var err error
		if arena, err = schema.AppendKey(arena, c.Table, c.After); err != nil {
			arena = arena[:start]
			continue
		}
		mid := len(arena)
		env.After = c.After
		if arena, _, err = schema.AppendEnvelopeHead(arena, c.Table, &env); err != nil {
			arena = arena[:start]
			continue
		}
		if want := (len(arena) + len(arena)/4) * len(batch); i == 0 && len(batch) > 1 && cap(arena) < want { // size the rest like the first
			arena = append(make([]byte, 0, want), arena...)
		}
		p := &sl.pre[i]
		p.slab, p.table = sl, c.Table
		p.key, p.mid, p.end = uint32(start), uint32(mid), uint32(len(arena))
		p.part = log.PartitionFor(arena[start:mid], e.partitions)
		c.Prepared = p
		sl.left++
	}
	sl.arena = arena // before the batch is handed over: Submit reads it
}

// preparable reports whether c is a row Prepare encodes: a snapshot's read
// with no value left to the sink (schema.Unchanged), no fault, no reset.
func preparable(c *source.Change) bool {
	if c.Op != source.OpRead || c.Table == nil || c.After == nil || c.Before != nil || c.Fault != nil || c.Reset != "" || c.KeyChange {
		return false
	}
	for _, v := range c.After {
		if schema.IsUnchanged(v) {
			return false
		}
	}
	return true
}

// preparableWithin is preparable(c) && c.Bytes() <= limit in one pass over
// the row: Prepare asked both of every row of a load, two loops of a type
// question a value (session 19). The sizes are source.RowBytes's
// (TestPreparableWithin holds the two to each other).
func preparableWithin(c *source.Change, limit int) bool {
	if c.Op != source.OpRead || c.Table == nil || c.After == nil || c.Before != nil || c.Fault != nil || c.Reset != "" || c.KeyChange {
		return false
	}
	n := 0
	if c.Message != nil {
		n = len(c.Message.Content)
	}
	for _, v := range c.After {
		switch v := v.(type) {
		case string:
			n += 11 + len(v)
		case []byte:
			n += 11 + len(v)
		case []any:
			n += source.ValueBytes(v)
		default:
			if schema.IsUnchanged(v) {
				return false
			}
			n += 64
		}
	}
	return n <= limit
}

// preparedOf returns c's encoding made ahead when Submit may use it: made
// by e, for a table of c's shape, not held, nothing masked.
func (e *emitter) preparedOf(eb *batchRecords, c *source.Change, held bool) *prepared {
	p, ok := c.Prepared.(*prepared)
	if !ok || p.table == nil || p.slab.owner != e || held || e.masker != nil || c.Fault != nil || !preparable(c) {
		return nil
	}
	if p.table != c.Table {
		if eb.sameFrom != p.table || eb.sameTo != c.Table {
			if !p.table.Equal(c.Table) {
				return nil
			}
			eb.sameFrom, eb.sameTo = p.table, c.Table
		}
	}
	return p
}

// preparedRecord writes the record of a prepared change into *r, its
// memory in b: frames, the tail (shared by a run of rows of one place) and
// the position around what Prepare encoded. Submit gives it the record's
// place in the topic's list: the record was built in b and copied there,
// 112 bytes a row with the collector's write barriers (session 19).
func (e *emitter) preparedRecord(r *log.Record, b *batchRecords, tc *tableCodec, c *source.Change, p *prepared) {
	start := len(b.arena)
	b.arena = append(schema.AppendFrame(b.arena, tc.valueID), p.headBytes()...)
	b.arena = append(b.arena, e.tail(b, c)...)
	b.arena = schema.AppendPosition(b.arena, c.Pos)
	value := b.cut(start)
	if c.TxID != b.txid || b.txidText == nil {
		start = len(b.arena)
		b.arena = strconv.AppendUint(b.arena, c.TxID, 10)
		b.txid, b.txidText = c.TxID, b.cut(start)
	}
	h0 := len(b.headers)
	b.headers = append(b.headers, log.Header{Key: HeaderPosition, Value: c.Pos}, log.Header{Key: HeaderTxID, Value: b.txidText})
	headers := b.headers[h0:len(b.headers):len(b.headers)]
	start = len(b.arena)
	b.arena = append(schema.AppendFrame(b.arena, tc.keyID), p.keyBytes()...)
	*r = log.Record{Key: b.cut(start), Value: value, Headers: headers, Timestamp: c.CommitTime, Partition: p.part}
	e.used(p)
}

// tailKey is what a prepared change's envelope tail depends on.
type tailKey struct {
	table      *schema.Table
	txid       uint64
	lsn        uint64
	eventLSN   uint64
	commit     int64
	place      source.SnapshotPlace
	snapshot   bool
	binlog     source.BinlogPlace
	haveBinlog bool
	op         source.Op // binlogEnvelope's; prepared changes are all op r
}

// same is k == o, the binlog's strings compared only when k has a binlog
// place: a load's rows (none) compare a few words a row. The struct's
// generated equality compared every field through a call, about a
// twentieth of a load's Submit (session 17).
func (k *tailKey) same(o *tailKey) bool {
	return k.table == o.table && k.lsn == o.lsn && k.txid == o.txid && k.commit == o.commit && k.eventLSN == o.eventLSN &&
		k.place == o.place && k.snapshot == o.snapshot && k.op == o.op && k.haveBinlog == o.haveBinlog &&
		(!k.haveBinlog || k.binlog == o.binlog)
}

// tail returns the envelope's fields from source to before the position
// for c (prepared, so op r with no before and no unchanged value), made
// once for a run of changes that share them.
func (e *emitter) tail(b *batchRecords, c *source.Change) []byte {
	if b.tailSet && b.tailKey.matches(c) {
		return b.tailBuf
	}
	env := e.envelopeInto(c, b.now, &b.seq)
	b.tailBuf = schema.AppendEnvelopeTail(b.tailBuf[:0], c.Table, &env, nil)
	b.tailKey, b.tailSet = prepTailKey(c), true
	return b.tailBuf
}

// prepTailKey is the tailKey of c, a prepared change.
func prepTailKey(c *source.Change) tailKey {
	k := tailKey{table: c.Table, txid: c.TxID, lsn: c.LSN, eventLSN: c.EventLSN, commit: commitNanos(c),
		place: c.Place, snapshot: c.Snapshot}
	if c.Binlog != nil {
		k.binlog, k.haveBinlog = *c.Binlog, true
	}
	return k
}

// matches is k.same(prepTailKey(c)) without making that key: a load's
// Submit built one (about 130 bytes, a binlog place's strings among them)
// a row to compare a few words (session 19).
func (k *tailKey) matches(c *source.Change) bool {
	return k.table == c.Table && k.lsn == c.LSN && k.txid == c.TxID && k.eventLSN == c.EventLSN && k.place == c.Place &&
		k.snapshot == c.Snapshot && k.op == 0 && k.haveBinlog == (c.Binlog != nil) && k.commit == commitNanos(c) &&
		(c.Binlog == nil || k.binlog == *c.Binlog)
}

// commitNanos is c's commit time in Unix nanoseconds, 0 for none.
func commitNanos(c *source.Change) int64 {
	if c.CommitTime.IsZero() {
		return 0
	}
	return c.CommitTime.UnixNano()
}
