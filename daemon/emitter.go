package daemon

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cdcd-dev/cdcd/internal/failpoint"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/mask"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// Record headers every change record carries (defined in schema).
const (
	HeaderPosition    = schema.HeaderPosition
	HeaderTxID        = schema.HeaderTxID
	HeaderKeyChange   = schema.HeaderKeyChange
	HeaderReset       = schema.HeaderReset
	HeaderKeySchema   = schema.HeaderKeySchema
	HeaderValueSchema = schema.HeaderValueSchema
)

// tableCodec is the registered schemas of one table version.
type tableCodec struct {
	topic   string
	keyID   uint32
	valueID uint32
	// keySchema and valueSchema are the texts, for holding records when the
	// registry refuses them.
	keySchema, valueSchema string
	refused                error
}

// emitter is the source.Emitter that encodes changes as Confluent-framed
// Avro and appends them to the log. It drops changes at or before the
// newest position already stored in their partition: after a restart the
// database re-sends from its confirmed position, which may be older.
//
// A table whose new schema the registry refuses (an incompatible change)
// is paused: its changes — that one and every later one, in order — go to
// a holding topic with their schemas, so nothing is lost and the source
// keeps going for the other tables. Once the registry accepts the schema
// (`cdcd schema accept`, or a compatibility change) the held changes are
// replayed into the table's topic and the table resumes.
type emitter struct {
	lg         log.Log
	reg        schema.Client
	state      *stateStore
	pipeline   string
	db         string
	connector  string
	topicOf    func(namespace, table string) string
	partitions int32
	// tombstones: a delete's record is followed by a tombstone of its key
	// (log.tombstones).
	tombstones bool
	logger     *slog.Logger

	mu     sync.Mutex // Emit and resume
	codecs map[*schema.Table]*tableCodec
	last   map[string][]source.Position // topic -> partition -> newest stored
	paused map[string]*pauseState       // topic -> pause
	// pausedView is a copy of paused for readers that must not wait for
	// mu (the monitor, /status): Submit and Sync hold mu while an append
	// waits for the log, which may be long (a full disk). Refreshed as mu
	// is released (unlock) and when a table pauses.
	pausedView   atomic.Pointer[map[string]pauseState]
	pokeOnUnlock bool // a table paused: call onPause once mu is released

	masker *mask.Masker // nil: no table is masked (see masking.go)
	// onPause, when set, is called once a table pauses (the monitor checks
	// at once, so the alert fires without waiting for its interval).
	onPause func()
	// onCaughtUp, when set, is called once the batches handed over before
	// a source's catch-up (CaughtUp) are durable: the sink commits what
	// it holds of them at once.
	onCaughtUp func()

	produced atomic.Int64
	dropped  atomic.Int64
	// pipe appends submitted batches in order while the next is encoded;
	// used under mu.
	pipe source.Pipeline
	// free holds the batches' record buffers the log is done with (nil:
	// none are reused).
	free chan *batchRecords
	// prepFree holds Prepare's slabs that Submit has used up (nil: none
	// are reused; prepare.go).
	prepFree chan *prepSlab
}

var (
	_ source.Emitter   = (*emitter)(nil)
	_ source.Pipeliner = (*emitter)(nil)
	_ source.Tracker   = (*emitter)(nil)
)

// loadLast reads the newest stored position of every partition of topic.
func (e *emitter) loadLast(ctx context.Context, topic string) error {
	info, err := e.lg.DescribeTopic(ctx, topic)
	if err != nil {
		return err
	}
	last := make([]source.Position, len(info.Partitions))
	for _, p := range info.Partitions {
		rec, ok, err := log.ReadLast(ctx, e.lg, topic, p) // past a lost tail, aborted transactions
		if err != nil {
			return fmt.Errorf("daemon: read last record of %s/%d: %w", topic, p.Partition, err)
		}
		if ok {
			last[p.Partition] = source.Position(rec.Header(HeaderPosition))
		}
	}
	e.last[topic] = last
	return nil
}

// codec returns the schemas of a table version, registering them on first
// use. A refusal is kept in the codec (refused), not returned: the table
// pauses.
func (e *emitter) codec(ctx context.Context, t *schema.Table) (*tableCodec, error) {
	if c, ok := e.codecs[t]; ok {
		return c, nil
	}
	topic := e.topicOf(t.Namespace, t.Name)
	ks, err := schema.KeySchema(t, topic)
	if err != nil {
		return nil, err
	}
	vs, err := schema.ValueSchemaFor(t, topic, e.connector)
	if err != nil {
		return nil, err
	}
	c := &tableCodec{topic: topic, keySchema: ks, valueSchema: vs}
	c.keyID, err = e.reg.Register(ctx, topic+"-key", ks)
	if err == nil {
		c.valueID, err = e.registerValue(ctx, topic+"-value", vs)
	}
	var inc *schema.IncompatibleError
	switch {
	case errors.As(err, &inc):
		c.refused = inc
	case err != nil:
		return nil, err
	}
	if _, ok := e.last[topic]; !ok {
		if err := e.loadLast(ctx, topic); err != nil {
			return nil, err
		}
	}
	e.codecs[t] = c
	return c, nil
}

// registerValue registers a value schema; a refusal that is only the
// subject's move from cdcd's legacy envelope to Debezium's (an upgraded
// pipeline's first schema of the table) registers it anyway
// (schema.MigrateEnvelope), saying so.
func (e *emitter) registerValue(ctx context.Context, subject, vs string) (uint32, error) {
	id, err := e.reg.Register(ctx, subject, vs)
	var inc *schema.IncompatibleError
	if !errors.As(err, &inc) {
		return id, err
	}
	sv, ok, merr := schema.MigrateEnvelope(ctx, e.reg, subject, vs, inc)
	if !ok {
		if merr != nil {
			e.logger.Warn("could not tell whether a refused value schema is only the move to Debezium's envelope", "subject", subject, "err", merr)
		}
		return 0, err
	}
	e.logger.Warn("value schema moved to Debezium's envelope without a compatibility check: the table did not change, "+
		"its records are now written as Debezium's connectors write them; records before keep cdcd's former envelope "+
		"under their own schema ids", "subject", subject, "version", sv.Version, "id", sv.ID, "level", inc.Level.String())
	if merr != nil {
		e.logger.Error("the move to Debezium's envelope left the subject's compatibility level changed", "subject", subject, "err", merr)
	}
	return sv.ID, nil
}

// Emit encodes batch and appends it; it returns once all of it is durable.
func (e *emitter) Emit(ctx context.Context, batch []source.Change) error {
	if err := e.Submit(ctx, batch); err != nil {
		return err
	}
	return e.Sync(ctx)
}

// Sync returns once every submitted batch is durable.
func (e *emitter) Sync(ctx context.Context) error {
	e.mu.Lock()
	defer e.unlock()
	return e.pipe.Wait(ctx)
}

// SubmitTracked is Submit returning the batch's number (source.Tracker):
// its place in the pipeline's queue.
func (e *emitter) SubmitTracked(ctx context.Context, batch []source.Change) (uint64, error) {
	e.mu.Lock()
	defer e.unlock()
	if err := e.submitLocked(ctx, batch); err != nil {
		return 0, err
	}
	return e.pipe.Queued(), nil
}

// Durable returns the number of the newest batch durable with all before
// it, and the first error of any (source.Tracker). It does not wait for mu.
func (e *emitter) Durable() (uint64, error) { return e.pipe.Done() }

// Submit encodes batch and queues its append behind the batches submitted
// before it; it returns before the append is durable (see Sync). The
// newest positions per partition move on at once, so the next batch is
// deduplicated against this one; an append that fails fails every later
// Submit and Sync, and the source stops.
//
// A change that stops its table — a schema the registry refuses, a fault
// the source marked, a row its encoding refuses — pauses that table alone
// (pause.go): from it on, the table's changes go to its holding topic.
func (e *emitter) Submit(ctx context.Context, batch []source.Change) error {
	e.mu.Lock()
	defer e.unlock()
	return e.submitLocked(ctx, batch)
}

// submitLocked is Submit under mu.
func (e *emitter) submitLocked(ctx context.Context, batch []source.Change) error {
	eb := e.encodeBuf()
	eb.now = time.Now().UnixNano() // the envelopes' ts_ms, ts_us, ts_ns: when the batch was encoded
	eb.tailSet, eb.rowTailSet, eb.txidText = false, false, nil
	newest := map[string][]source.Position{}
	// What a change's table decides, kept while the changes are of one
	// table (a load's batch is): four map lookups a change were a tenth of
	// the encoding.
	var (
		table    *schema.Table
		tc       *tableCodec
		topic    string
		held     bool
		last, nw []source.Position
		out      *topicRecords
	)
	route := func() {
		topic = tc.topic
		if held = e.paused[topic] != nil; held {
			topic = heldTopic(tc.topic)
		}
		last, nw = e.last[topic], newest[topic]
		if nw == nil {
			nw = make([]source.Position, len(last))
			newest[topic] = nw
		}
		out = eb.list(topic, len(batch))
	}
	for i := range batch {
		c, err := e.masked(&batch[i]) // before encoding: masked values never reach the log
		if err != nil {
			return err
		}
		if c.Fault != nil && rowOf(c) == nil { // the whole table: nothing to hold
			if err := e.tableFault(ctx, e.topicOf(c.Table.Namespace, c.Table.Name), c); err != nil {
				return err
			}
			table = nil
			continue
		}
		if c.Reset != "" {
			table = nil // a reset marker may end the table's pause: decide afresh
		}
		if c.Table != table {
			if tc, err = e.codec(ctx, c.Table); err != nil {
				return err
			}
			if c.Reset != "" && e.paused[tc.topic] != nil {
				if err := e.liftPause(ctx, tc.topic, c.Reset); err != nil {
					return err
				}
			}
			if tc.refused != nil && e.paused[tc.topic] == nil {
				if err := e.pause(ctx, schemaPause(tc, c)); err != nil {
					return err
				}
			}
			route()
			table = c.Table
		}
		if p := e.preparedOf(eb, c, held); p != nil {
			// One record, its partition known: dropped before it is
			// written, else written in its place in the list.
			if part := p.part; last[part] != nil && c.Pos.Compare(last[part]) <= 0 {
				e.dropped.Add(1)
				e.used(p)
			} else {
				out.recs = append(out.recs, log.Record{})
				e.preparedRecord(&out.recs[len(out.recs)-1], eb, tc, c, p)
				nw[part] = c.Pos
			}
			continue
		}
		recs, paused, err := e.encode(ctx, eb, tc, c, held)
		if err != nil {
			return err
		}
		if paused { // c stopped its table: it and what follows are held
			route()
		}
		for _, r := range recs {
			p := r.Partition
			if last[p] != nil && c.Pos.Compare(last[p]) <= 0 {
				e.dropped.Add(1)
				continue
			}
			out.recs = append(out.recs, r)
			nw[p] = c.Pos
		}
	}
	for _, tr := range eb.order {
		for p, pos := range newest[tr.topic] {
			if pos != nil {
				// A copy: a source cuts positions from chunks (the load's a
				// batch's, the stream's 512 at a time), and a quiet table's
				// newest position would keep its chunk alive.
				e.last[tr.topic][p] = bytes.Clone(pos)
			}
		}
	}
	if failpoint.Enabled {
		e.truncateCut(ctx, eb)
	}
	if ap, ok := e.lg.(log.AsyncProducer); ok {
		return e.startProduce(ctx, ap, eb)
	}
	return e.pipe.Go(ctx, func() error {
		for _, tr := range eb.order {
			if err := e.lg.Produce(ctx, tr.topic, tr.recs); err != nil {
				return fmt.Errorf("daemon: append to %s: %w", tr.topic, err)
			}
			e.produced.Add(int64(len(tr.recs)))
		}
		e.recycle(eb) // Produce keeps nothing of the records
		return nil
	})
}

// encode turns c into its records: the topic's, or, when held, one
// record of the holding topic. A change that stops its table (a fault the
// source marked, a row its encoding refuses, a row too large for the log:
// bigvalue.go) pauses the table and becomes a fault record of the holding
// topic; paused reports that.
func (e *emitter) encode(ctx context.Context, eb *batchRecords, tc *tableCodec, c *source.Change, held bool) (_ []log.Record, paused bool, err error) {
	c = e.oversized(c)
	var f *source.Fault
	if !held {
		f = c.Fault
		if f == nil {
			recs, err := e.records(eb, tc, c)
			if f = valueFault(c, err); f == nil {
				return recs, false, err
			}
		}
		if err := e.pause(ctx, faultPause(tc.topic, c, f)); err != nil {
			return nil, false, err
		}
	}
	var rec log.Record
	if f != nil {
		rec, err = e.faultRecord(c, f)
	} else {
		rec, _, err = e.heldRecord(tc, c)
	}
	if err != nil {
		return nil, false, err
	}
	eb.one[0] = rec
	return eb.one[:], f != nil, nil
}

// startProduce hands a batch's records to a log that appends in two steps:
// here, in Submit order, the log takes them (and eb is free again); the
// pipeline then waits for them to be durable. So the next batch reaches
// the log while this one syncs, and one fsync covers both (an initial load
// waited for an fsync a batch, most of its time).
func (e *emitter) startProduce(ctx context.Context, ap log.AsyncProducer, eb *batchRecords) error {
	type started struct {
		topic string
		n     int
		wait  func(context.Context) error
	}
	var waits []started
	for _, tr := range eb.order {
		wait, err := ap.StartProduce(ctx, tr.topic, tr.recs)
		if err != nil {
			return fmt.Errorf("daemon: append to %s: %w", tr.topic, err)
		}
		waits = append(waits, started{tr.topic, len(tr.recs), wait})
	}
	e.recycle(eb) // the log copied the records
	return e.pipe.Go(ctx, func() error {
		for _, w := range waits {
			if err := w.wait(ctx); err != nil {
				return fmt.Errorf("daemon: append to %s: %w", w.topic, err)
			}
			e.produced.Add(int64(w.n))
		}
		return nil
	})
}

// batchRecords is one batch's records and the memory they are cut from:
// their keys, values and transaction ids (arena) and headers. A batch's
// encoding allocated a few small objects a change; a load of millions of
// rows spent more in the collector than in the encoder. Two of them
// circulate — one encoding, one being appended — through e.free.
type batchRecords struct {
	arena   []byte
	headers []log.Header
	one     [1]log.Record
	two     [2]log.Record // a change's records: itself and its tombstone
	now     int64         // Unix nanoseconds
	seq     []byte        // the change being encoded's source.sequence (envelopeInto)
	byTopic map[string]*topicRecords
	order   []*topicRecords // the topics of this batch, in order of their first record
	// For prepared changes (prepare.go): the last table versions found of
	// one shape, the last transaction id written, the last envelope tail.
	sameFrom, sameTo *schema.Table
	txid             uint64
	txidText         []byte // in arena; nil: none this batch
	tailKey          tailKey
	tailSet          bool
	tailBuf          []byte
	// For changes read from a binlog (binlogEnvelope): the last envelope
	// tail made, where its row index lies in it [rowTailAt, rowTailEnd),
	// and what it depends on.
	rowTail               []byte
	rowTailAt, rowTailEnd int
	rowTailKey            tailKey
	rowTailSet            bool
	// For PostgreSQL changes (pgEnvelope): the last envelope tail made.
	pgTail pgTail
}

// topicRecords is a batch's records of one topic.
type topicRecords struct {
	topic  string
	recs   []log.Record
	listed bool // in order
}

// encodeBuf returns an empty batchRecords, a recycled one if any.
func (e *emitter) encodeBuf() *batchRecords {
	select {
	case b := <-e.free:
		return b
	default:
		return &batchRecords{byTopic: map[string]*topicRecords{}}
	}
}

// recycle empties b (dropping what it refers to) for another batch.
func (e *emitter) recycle(b *batchRecords) {
	for _, tr := range b.order {
		clear(tr.recs)
		tr.recs, tr.listed = tr.recs[:0], false
	}
	clear(b.order)
	clear(b.headers)
	b.arena, b.headers, b.order = b.arena[:0], b.headers[:0], b.order[:0]
	if cap(b.arena) > maxKeptArena { // one large value: not kept for the batches after it
		b.arena = nil
	}
	if e.free == nil {
		return
	}
	select {
	case e.free <- b:
	default:
	}
}

// list returns topic's records in this batch, listing the topic; n sizes
// a new topic's first slice.
func (b *batchRecords) list(topic string, n int) *topicRecords {
	tr := b.byTopic[topic]
	if tr == nil {
		tr = &topicRecords{topic: topic, recs: make([]log.Record, 0, min(n, 4096))}
		b.byTopic[topic] = tr
	}
	if !tr.listed {
		b.order = append(b.order, tr)
		tr.listed = true
	}
	return tr
}

// cut returns the arena's bytes from start on, capped so that appending to
// them never writes into what follows.
func (b *batchRecords) cut(start int) []byte { return b.arena[start:len(b.arena):len(b.arena)] }

// produce appends recs to topic and records the newest positions stored.
func (e *emitter) produce(ctx context.Context, topic string, recs []log.Record, newest []source.Position) error {
	if err := e.lg.Produce(ctx, topic, recs); err != nil {
		return fmt.Errorf("daemon: append to %s: %w", topic, err)
	}
	e.produced.Add(int64(len(recs)))
	for p, pos := range newest {
		if pos != nil {
			e.last[topic][p] = pos
		}
	}
	return nil
}

// envelope is the Debezium envelope of a change; now is when cdcd
// processed it (Unix nanoseconds).
func (e *emitter) envelope(c *source.Change, now int64) schema.Envelope {
	return e.envelopeInto(c, now, nil)
}

// envelopeInto is envelope with PostgreSQL's source.sequence built in
// *seq (when not nil) and aliasing it: two allocations a change fewer.
// REQUIRES: the envelope is encoded before *seq is used again.
func (e *emitter) envelopeInto(c *source.Change, now int64, seq *[]byte) schema.Envelope {
	env := schema.Envelope{
		Before: c.Before, After: c.After, Op: byte(c.Op), TsMs: now / 1e6, TsUs: now / 1e3, TsNs: now,
		Source: schema.SourceInfo{
			Version: Version, Connector: e.connector, Name: e.pipeline, Snapshot: schema.SnapshotFalse,
			DB: e.db, Schema: c.Table.Namespace, Table: c.Table.Name, Position: c.Pos,
		},
	}
	s := &env.Source
	if !c.CommitTime.IsZero() {
		s.TsMs, s.TsUs, s.TsNs = c.CommitTime.UnixMilli(), c.CommitTime.UnixMicro(), c.CommitTime.UnixNano()
	}
	if c.Snapshot {
		s.Snapshot = snapshotValues[c.Place]
	}
	if e.connector == schema.ConnectorMySQL {
		s.DB, s.Schema = c.Table.Namespace, "" // Debezium's MySQL db is the table's database
		if b := c.Binlog; b != nil {
			s.File, s.Pos, s.Row, s.ServerID, s.GTID = b.File, int64(b.Pos), b.Row, int64(b.ServerID), b.GTID
		}
		return env
	}
	// lsn: the change's own WAL position, as Debezium gives it; rows read
	// by a snapshot carry the snapshot's LSN.
	s.TxID, s.LSN = c.TxID, cmp.Or(c.EventLSN, c.LSN)
	if s.LSN != 0 {
		if seq != nil {
			*seq = appendPGSequence((*seq)[:0], c.LSN, s.LSN)
			s.Sequence = unsafe.String(unsafe.SliceData(*seq), len(*seq))
		} else {
			s.Sequence = pgSequence(c.LSN, s.LSN)
		}
	}
	return env
}

// snapshotValues are source.snapshot's values for the places of a
// snapshot row.
var snapshotValues = [...]string{
	source.PlaceInside: schema.SnapshotTrue, source.PlaceLastInTable: schema.SnapshotLastInColl,
	source.PlaceFirstInTable: schema.SnapshotFirstInColl, source.PlaceFirst: schema.SnapshotFirst,
	source.PlaceLast: schema.SnapshotLast, source.PlaceIncremental: schema.SnapshotIncremental,
}

// pgSequence is PostgreSQL's source.sequence: a JSON array of the commit
// LSN of the change's transaction and the change's own LSN, as decimal
// strings, so that positions compare the way they sort.
func pgSequence(commit, lsn uint64) string {
	return string(appendPGSequence(make([]byte, 0, 48), commit, lsn))
}

func appendPGSequence(b []byte, commit, lsn uint64) []byte {
	b = append(b, `["`...)
	b = strconv.AppendUint(b, commit, 10)
	b = append(b, `","`...)
	b = strconv.AppendUint(b, lsn, 10)
	return append(b, `"]`...)
}

func (e *emitter) headers(c *source.Change) []log.Header {
	h := []log.Header{{Key: HeaderPosition, Value: c.Pos}, {Key: HeaderTxID, Value: []byte(strconv.FormatUint(c.TxID, 10))}}
	if c.KeyChange {
		h = append(h, log.Header{Key: HeaderKeyChange, Value: []byte("1")})
	}
	if c.Reset != "" {
		h = append(h, log.Header{Key: HeaderReset, Value: []byte(c.Reset)})
	}
	return h
}

// records encodes one change into b: one record, or one per partition for a
// truncate (it applies to every key, so every partition carries it in
// order). The records are valid until b is recycled.
func (e *emitter) records(b *batchRecords, tc *tableCodec, c *source.Change) ([]log.Record, error) {
	start := len(b.arena)
	var err error
	if e.connector == schema.ConnectorMySQL && c.Binlog != nil {
		if b.arena, err = e.binlogEnvelope(schema.AppendFrame(b.arena, tc.valueID), b, c); err != nil {
			return nil, err
		}
	} else if b.arena, err = e.pgEnvelope(schema.AppendFrame(b.arena, tc.valueID), b, c); err != nil {
		return nil, err
	}
	value := b.cut(start)
	start = len(b.arena)
	b.arena = strconv.AppendUint(b.arena, c.TxID, 10)
	txid := b.cut(start)
	h0 := len(b.headers)
	b.headers = append(b.headers, log.Header{Key: HeaderPosition, Value: c.Pos}, log.Header{Key: HeaderTxID, Value: txid})
	if c.KeyChange {
		b.headers = append(b.headers, log.Header{Key: HeaderKeyChange, Value: keyChangeMark})
	}
	if c.Reset != "" {
		b.headers = append(b.headers, log.Header{Key: HeaderReset, Value: []byte(c.Reset)})
	}
	headers := b.headers[h0:len(b.headers):len(b.headers)]
	ts := c.CommitTime
	if c.Op == source.OpTruncate {
		recs := make([]log.Record, e.partitions)
		for p := range recs {
			recs[p] = log.Record{Value: value, Headers: headers, Timestamp: ts, Partition: int32(p)}
		}
		return recs, nil
	}
	row := c.After
	if row == nil {
		row = c.Before
	}
	start = len(b.arena)
	if b.arena, err = schema.AppendKey(schema.AppendFrame(b.arena, tc.keyID), c.Table, row); err != nil {
		return nil, err
	}
	key := b.cut(start)
	p := partitionOf(key, e.partitions)
	b.two[0] = log.Record{Key: key, Value: value, Headers: headers, Timestamp: ts, Partition: p}
	if c.Op == source.OpDelete && e.tombstones {
		// Debezium's tombstone: the key, no value. It carries the
		// delete's headers: the position keeps the partition's newest
		// stored position that of the delete (restart deduplication).
		b.two[1] = log.Record{Key: key, Headers: headers, Timestamp: ts, Partition: p}
		return b.two[:], nil
	}
	return b.two[:1], nil
}

var keyChangeMark = []byte("1")

// binlogEnvelope appends the envelope of c, a change read from a MySQL
// binlog, to dst. Its tail (the source block, op, times, the names of
// unchanged and absent columns) is the same for every change of one row
// event and op but for the row's index in the event, so it is made once
// for a run of such changes (b.rowTail) and each change's row index is
// spliced in: the tail was about a third of a streamed change's
// encoding. The bytes are AppendEnvelope's (TestBinlogTailSpliced).
func (e *emitter) binlogEnvelope(dst []byte, b *batchRecords, c *source.Change) ([]byte, error) {
	head := schema.Envelope{Before: c.Before, After: c.After}
	dst, absent, err := schema.AppendEnvelopeHead(dst, c.Table, &head)
	if err != nil {
		return dst, err
	}
	k := tailKey{table: c.Table, txid: c.TxID, commit: c.CommitTime.UnixNano(), place: c.Place, snapshot: c.Snapshot,
		binlog: *c.Binlog, haveBinlog: true, op: c.Op}
	if c.CommitTime.IsZero() {
		k.commit = 0
	}
	k.binlog.Row = 0
	if len(absent) > 0 || hasUnchanged(c.After) {
		b.rowTailSet = false
		env := e.envelopeInto(c, b.now, &b.seq)
		return schema.AppendPosition(schema.AppendEnvelopeTail(dst, c.Table, &env, absent), c.Pos), nil
	}
	if !b.rowTailSet || b.rowTailKey != k {
		env := e.envelopeInto(c, b.now, &b.seq)
		b.rowTail, b.rowTailAt = schema.AppendEnvelopeTailRow(b.rowTail[:0], c.Table, &env, nil)
		if b.rowTailAt < 0 {
			return schema.AppendPosition(append(dst, b.rowTail...), c.Pos), nil
		}
		var row [10]byte
		b.rowTailKey, b.rowTailSet = k, true
		b.rowTailEnd = b.rowTailAt + len(schema.AppendLong(row[:0], int64(c.Binlog.Row)))
	}
	dst = append(dst, b.rowTail[:b.rowTailAt]...)
	dst = schema.AppendLong(dst, int64(c.Binlog.Row))
	dst = append(dst, b.rowTail[b.rowTailEnd:]...)
	return schema.AppendPosition(dst, c.Pos), nil
}

// pgEnvelope appends the envelope of c, a change not read from a binlog,
// to dst. A PostgreSQL change's tail (the source block, op, times, the
// names of unchanged and absent columns) is the same for every change of
// one table, transaction and op in a batch but for two fields, the
// source's sequence and lsn, which hold the change's own WAL position; so
// it is made once for a run of such changes (b.pgTail) and each change's
// two fields are spliced in: the tail was more than half of a streamed
// change's encoding. The bytes are AppendEnvelope's (TestPGTailSpliced).
func (e *emitter) pgEnvelope(dst []byte, b *batchRecords, c *source.Change) ([]byte, error) {
	lsn := cmp.Or(c.EventLSN, c.LSN)
	if e.connector == schema.ConnectorMySQL || lsn == 0 {
		env := e.envelopeInto(c, b.now, &b.seq)
		return schema.AppendEnvelope(dst, c.Table, &env)
	}
	head := schema.Envelope{Before: c.Before, After: c.After}
	dst, absent, err := schema.AppendEnvelopeHead(dst, c.Table, &head)
	if err != nil {
		return dst, err
	}
	k := pgTailKey{table: c.Table, txid: c.TxID, commit: c.CommitTime.UnixNano(), now: b.now, place: c.Place,
		snapshot: c.Snapshot, op: c.Op}
	if c.CommitTime.IsZero() {
		k.commit = 0
	}
	t := &b.pgTail
	if len(absent) > 0 || hasUnchanged(c.After) || (t.key != k || !t.set) && !e.makePGTail(t, c, b.now, k) {
		env := e.envelopeInto(c, b.now, &b.seq)
		return schema.AppendPosition(schema.AppendEnvelopeTail(dst, c.Table, &env, absent), c.Pos), nil
	}
	b.seq = appendPGSequence(b.seq[:0], c.LSN, lsn)
	dst = append(dst, t.buf[:t.seqAt]...)
	dst = schema.AppendPosition(schema.AppendLong(dst, 1), b.seq) // [null, string]: a string's bytes
	dst = append(dst, t.buf[t.seqAt+1:t.lsnAt]...)
	dst = schema.AppendLong(schema.AppendLong(dst, 1), int64(lsn)) // [null, long]
	dst = append(dst, t.buf[t.lsnAt+1:]...)
	return schema.AppendPosition(dst, c.Pos), nil
}

// pgTail is the tail of a run of PostgreSQL changes (pgEnvelope) with
// null in place of the sequence, at buf[seqAt], and of the lsn, at
// buf[lsnAt]; key is what the tail depends on besides those.
type pgTail struct {
	buf, probe   []byte
	seqAt, lsnAt int
	key          pgTailKey
	set          bool
}

// pgTailKey is what a PostgreSQL change's envelope tail depends on but
// the two spliced fields, the rows' unchanged and absent columns (a tail
// that names some is not kept) and the emitter's own settings: the batch's
// time is in it, so a tail is never taken for a later batch's.
type pgTailKey struct {
	table    *schema.Table
	txid     uint64
	commit   int64
	now      int64
	place    source.SnapshotPlace
	snapshot bool
	op       source.Op
}

// makePGTail makes t the tail of c's run, finding where the sequence and
// the lsn lie as the first byte at which a tail with each of them set
// differs from one with both null. It reports false (t unset) if the
// tails are not laid out so, which the encoder's layout never does.
func (e *emitter) makePGTail(t *pgTail, c *source.Change, now int64, k pgTailKey) bool {
	env := e.envelopeInto(c, now, nil)
	s := &env.Source
	s.Sequence, s.LSN = "", 0
	t.set = false
	t.buf = schema.AppendEnvelopeTail(t.buf[:0], c.Table, &env, nil)
	s.Sequence = "x"
	t.probe = schema.AppendEnvelopeTail(t.probe[:0], c.Table, &env, nil)
	t.seqAt = firstDiff(t.buf, t.probe)
	if len(t.probe) != len(t.buf)+2 || t.seqAt >= len(t.buf) || t.buf[t.seqAt] != 0 {
		return false
	}
	s.Sequence, s.LSN = "", 1
	t.probe = schema.AppendEnvelopeTail(t.probe[:0], c.Table, &env, nil)
	t.lsnAt = firstDiff(t.buf, t.probe)
	if len(t.probe) != len(t.buf)+1 || t.lsnAt >= len(t.buf) || t.lsnAt <= t.seqAt || t.buf[t.lsnAt] != 0 {
		return false
	}
	t.key, t.set = k, true
	return true
}

// firstDiff is the index of the first byte at which a and b differ (the
// shorter's length if one is the other's start).
func firstDiff(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// hasUnchanged reports whether row holds a value the source did not send.
func hasUnchanged(row []any) bool {
	for _, v := range row {
		if schema.IsUnchanged(v) {
			return true
		}
	}
	return false
}

// partitionOf places a framed key: by murmur2 of its Avro body, without
// the schema id, so a key keeps its partition when the key schema gets a
// new id (changes of one key must stay in one partition, in order). The
// Kafka backend sets the same partition explicitly.
func partitionOf(framedKey []byte, n int32) int32 {
	_, body, err := schema.ParseFrame(framedKey)
	if err != nil {
		body = framedKey
	}
	return log.PartitionFor(body, n)
}
