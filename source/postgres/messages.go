package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/spill"
)

// The pgoutput messages of protocol version 2 and what the reader does
// with them:
//
//   - Begin, changes, Commit: a transaction sent whole at its commit. Begin
//     carries the commit LSN, so its changes get their positions as they
//     arrive and leave in batches: a large transaction never sits in memory.
//   - Stream Start (xid), changes, Stream Stop, repeated; then Stream Commit
//     or Stream Abort: a large transaction sent while still in progress.
//     Every message of a stream block goes to the transaction's spill file;
//     Stream Abort of a subtransaction marks its changes to be skipped, of
//     the transaction removes the file; Stream Commit replays the file with
//     positions from the commit LSN, as if the transaction had been sent whole.
//   - Relation: a (new) shape of a table, from the next change of it on.
//   - Message (non-transactional): a heartbeat, or another application's
//     message; outside a transaction it marks a point up to which
//     everything has arrived.

// message handles one pgoutput message as received at WAL position lsn
// (the change's own LSN for a change).
func (s *streamer) message(ctx context.Context, lsn uint64, data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("postgres: empty pgoutput message")
	}
	if s.inStream {
		switch pglogrepl.MessageType(data[0]) {
		case pglogrepl.MessageTypeStreamStop:
			s.inStream = false
			return s.spill.Stop(s.streamXid)
		case pglogrepl.MessageTypeStreamStart, pglogrepl.MessageTypeStreamCommit, pglogrepl.MessageTypeStreamAbort,
			pglogrepl.MessageTypeBegin, pglogrepl.MessageTypeCommit:
			return fmt.Errorf("postgres: pgoutput message %q inside a stream block", data[0])
		}
		if err := s.spill.Write(s.streamXid, lsn, data); err != nil {
			return err
		}
		s.r.stats.SpilledBytes.Store(s.spill.Bytes())
		return nil
	}
	if isRowMessage(data) {
		s.tx.lsn = lsn
		return s.rowChange(ctx, data, false, nil)
	}
	m, err := pglogrepl.ParseV2(data, false)
	if err != nil {
		return fmt.Errorf("postgres: pgoutput message %q: %w", data[0], err)
	}
	switch m := m.(type) {
	case *pglogrepl.StreamStartMessageV2:
		s.inStream, s.streamXid = true, m.Xid
		s.lastData = time.Now()
		if err := s.spill.Start(m.Xid, m.FirstSegment == 1); err != nil {
			return &connError{err} // start over: the server streams it again whole
		}
		return nil
	case *pglogrepl.StreamCommitMessageV2:
		return s.streamCommit(ctx, m)
	case *pglogrepl.StreamAbortMessageV2:
		s.spill.Abort(m.Xid, m.SubXid)
		s.r.stats.SpilledBytes.Store(s.spill.Bytes())
		return nil
	}
	s.tx.lsn = lsn
	return s.apply(ctx, m, nil)
}

// streamCommit replays a streamed transaction's spill file.
func (s *streamer) streamCommit(ctx context.Context, m *pglogrepl.StreamCommitMessageV2) error {
	s.tx = txState{xid: m.Xid, commitLSN: uint64(m.CommitLSN), commitTime: m.CommitTime, alloc: &s.alloc}
	s.inTx = true
	s.inc.begin()
	spilled, began := s.spill.Bytes(), time.Now()
	err := s.spill.Replay(m.Xid, func(lsn uint64, data []byte, aborted map[uint32]bool) error {
		s.tx.lsn = lsn
		if isRowMessage(data) {
			if err := s.rowChange(ctx, data, true, aborted); err != nil {
				return err
			}
			return s.maybeFlush(ctx, false)
		}
		msg, err := pglogrepl.ParseV2(data, true)
		if err != nil {
			return fmt.Errorf("postgres: spilled pgoutput message %q: %w", data[0], err)
		}
		if err := s.apply(ctx, msg, aborted); err != nil {
			return err
		}
		return s.maybeFlush(ctx, false)
	})
	s.r.stats.SpilledBytes.Store(s.spill.Bytes())
	if errors.Is(err, spill.ErrGap) {
		return &connError{err} // start over: the server streams it again whole
	}
	if err != nil {
		return err
	}
	s.inTx = false
	s.inc.committed(m.Xid, uint64(m.CommitLSN))
	s.commit(uint64(m.CommitLSN))
	s.r.stats.StreamedTxns.Add(1)
	s.r.logger.Info("replayed a transaction streamed before its commit", "xid", m.Xid, "commit_lsn", m.CommitLSN.String(),
		"changes", s.tx.next, "spilled_bytes", spilled-s.spill.Bytes(), "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// apply handles a message outside a stream block, or one replayed from a
// spill file; aborted holds the replayed transaction's aborted
// subtransactions, whose changes are skipped.
func (s *streamer) apply(ctx context.Context, m pglogrepl.Message, aborted map[uint32]bool) error {
	skip := func(xid uint32) bool { return aborted[xid] }
	switch m := m.(type) {
	case *pglogrepl.BeginMessage:
		s.tx = txState{xid: m.Xid, commitLSN: uint64(m.FinalLSN), commitTime: m.CommitTime, alloc: &s.alloc}
		s.inTx = true
		s.inc.begin()
		s.lastData = time.Now()
	case *pglogrepl.CommitMessage:
		s.inTx = false
		s.inc.committed(s.tx.xid, uint64(m.CommitLSN))
		s.commit(uint64(m.CommitLSN))
	case *pglogrepl.RelationMessageV2:
		if skip(m.Xid) && s.relations[m.RelationID] != nil {
			// A shape sent inside a rolled-back subtransaction; the server
			// sends the shape again before a change that needs it.
			return nil
		}
		return s.relation(ctx, &m.RelationMessage)
	case *pglogrepl.TruncateMessageV2:
		if skip(m.Xid) {
			return nil
		}
		return s.truncate(&m.TruncateMessage)
	case *pglogrepl.LogicalDecodingMessageV2:
		if ok, err := s.inc.message(ctx, m); ok || err != nil {
			return err
		}
		if m.Transactional && s.inTx {
			return s.transactionalMessage(m, skip(m.Xid))
		}
		if !s.inTx && !m.Transactional {
			// Non-transactional, outside any transaction: every
			// transaction that committed before it has arrived.
			s.commit(uint64(m.LSN))
		}
	case *pglogrepl.TypeMessageV2, *pglogrepl.OriginMessage:
		// Types are looked up in the catalog; origins don't matter here.
	default:
		return fmt.Errorf("postgres: unexpected pgoutput message %T", m)
	}
	return nil
}

// rowChange handles an Insert, Update or Delete message (tuple.go parses
// it); a streamed one (from a spill file) is skipped when its
// subtransaction was aborted.
func (s *streamer) rowChange(ctx context.Context, data []byte, streamed bool, aborted map[uint32]bool) error {
	m := &s.row
	if err := parseRowMessage(data, streamed, m); err != nil {
		return err
	}
	if streamed && aborted[m.xid] {
		return nil
	}
	s.inc.touched(m.rel)
	switch m.op {
	case 'I':
		return s.insert(ctx, m)
	case 'U':
		return s.update(ctx, m)
	default:
		return s.delete(ctx, m)
	}
}

func (s *streamer) insert(ctx context.Context, m *rowMessage) error {
	rel, err := s.rel(m.rel)
	if rel == nil {
		return s.skipChange(err)
	}
	after, err := decodeTuple(rel, m.new, m.hasNew, &s.alloc)
	if ve := asValueError(err); ve != nil {
		return s.addFault(ctx, rel, source.OpCreate, nil, after, ve)
	}
	if err != nil {
		return err
	}
	return s.add(s.tx.change(rel.table, source.OpCreate, nil, after))
}

func (s *streamer) update(ctx context.Context, m *rowMessage) error {
	rel, err := s.rel(m.rel)
	if rel == nil {
		return s.skipChange(err)
	}
	after, err := decodeTuple(rel, m.new, m.hasNew, &s.alloc)
	before, berr := decodeTuple(rel, m.old, m.hasOld, &s.alloc)
	if ve := asValueError(err); ve != nil || asValueError(berr) != nil {
		// One change, not split at a key change: the faulty row may hide
		// whether its key changed.
		if ve == nil {
			ve = asValueError(berr)
		}
		return s.addFault(ctx, rel, source.OpUpdate, before, after, ve)
	}
	if err == nil {
		err = berr
	}
	if err != nil {
		return err
	}
	n := len(s.batch)
	if s.batch, err = s.tx.updateChanges(rel, m, before, after, s.batch); err != nil {
		return err
	}
	s.added(n)
	return nil
}

func (s *streamer) delete(ctx context.Context, m *rowMessage) error {
	rel, err := s.rel(m.rel)
	if rel == nil {
		return s.skipChange(err)
	}
	before, err := decodeTuple(rel, m.old, m.hasOld, &s.alloc)
	if ve := asValueError(err); ve != nil {
		return s.addFault(ctx, rel, source.OpDelete, before, nil, ve)
	}
	if err != nil {
		return err
	}
	return s.add(s.tx.change(rel.table, source.OpDelete, before, nil))
}

// addFault adds a change with a value cdcd cannot carry: the emitter
// pauses its table (see fault.go).
func (s *streamer) addFault(ctx context.Context, rel *relation, op source.Op, before, after []any, ve *ValueError) error {
	c, err := s.tx.change(rel.table, op, before, after)
	if err != nil {
		return err
	}
	c.Fault = s.r.fault(ctx, rel, ve)
	s.rowsKept = true // the pause may keep the row
	s.r.logger.Warn("a change holds a value cdcd cannot carry; its table pauses", "table", ve.Table, "column", ve.Column,
		"lsn", pglogrepl.LSN(c.LSN).String(), "err", ve.Err)
	return s.add(c, nil)
}

// truncate emits one truncate per captured table, in the statement's order.
func (s *streamer) truncate(m *pglogrepl.TruncateMessage) error {
	for _, id := range m.RelationIDs {
		s.inc.touched(id)
		rel, err := s.rel(id)
		if rel == nil {
			if err := s.skipChange(err); err != nil {
				return err
			}
			continue
		}
		if err := s.add(s.tx.change(rel.table, source.OpTruncate, nil, nil)); err != nil {
			return err
		}
	}
	return nil
}

// skipChange passes over a change of a table the pipeline does not
// capture, still counting it, so positions don't depend on the table list.
func (s *streamer) skipChange(err error) error {
	if err != nil {
		return err
	}
	_, err = s.tx.change(nil, 0, nil, nil)
	return err
}

func (s *streamer) add(c source.Change, err error) error {
	if err != nil {
		return err
	}
	n := len(s.batch)
	s.batch = append(s.batch, c)
	s.added(n)
	return nil
}

func (s *streamer) added(before int) {
	s.batch = s.inc.observe(s.batch, before)
	if before == 0 && len(s.batch) > 0 {
		s.batchAt = time.Now()
	}
	for i := before; i < len(s.batch); i++ {
		s.batchSize += s.batch[i].Bytes()
	}
}

var errUnknownRelation = errors.New("postgres: change for a relation before its Relation message")

// rel returns the relation of a change: nil with a nil error for a table
// the pipeline does not capture.
func (s *streamer) rel(id uint32) (*relation, error) {
	rel, ok := s.relations[id]
	if !ok {
		return nil, fmt.Errorf("%w (relation %d)", errUnknownRelation, id)
	}
	return rel, nil
}

// relation records a table version. The catalog is asked for the key,
// NOT NULL flags, type names and array dimensions, which pgoutput does not
// send; the message's own column list and types are the version's.
func (s *streamer) relation(ctx context.Context, m *pglogrepl.RelationMessage) error {
	// A type may have changed too (an attribute added to a composite, a
	// label to an enum): look user-defined types up afresh.
	s.types.forget()
	qn := m.Namespace + "." + m.RelationName
	if !s.captured(qn) {
		s.relations[m.RelationID] = nil
		if !s.wasCaptured(m.RelationID) {
			return nil
		}
		// A captured table under a name not captured: renamed, or moved
		// to another schema. The check stops it here, before its first
		// change under the new name.
		if err := s.maybeFlush(ctx, true); err != nil {
			return err
		}
		return s.r.checkPublication(ctx, s.conn, s.st, s.committed, s.emit)
	}
	if id, ok := s.st.Tables[qn]; ok && id.OID != m.RelationID {
		// A table of this name with another OID: dropped and created
		// again. Its changes from here on are held until it is repaired.
		if err := s.maybeFlush(ctx, true); err != nil {
			return err
		}
		if err := s.r.checkPublication(ctx, s.conn, s.st, s.committed, s.emit); err != nil {
			return err
		}
	}
	ct, err := describeCurrent(ctx, s.conn, m, s.tx.commitTime)
	if te := (*TableError)(nil); errors.As(err, &te) && !errors.Is(err, errNoTable) {
		return s.stopRelation(ctx, qn, m.RelationID, te)
	}
	if errors.Is(err, errNoTable) {
		// Dropped since: its changes still in the WAL cannot be described,
		// and are passed over; the check stops the table.
		s.relations[m.RelationID] = nil
		if err := s.maybeFlush(ctx, true); err != nil {
			return err
		}
		return s.r.checkPublication(ctx, s.conn, s.st, s.committed, s.emit)
	}
	if err != nil {
		return err
	}
	types, err := resolveColumns(ctx, s.types, m, ct)
	if te := (*TableError)(nil); errors.As(err, &te) {
		return s.stopRelation(ctx, qn, m.RelationID, te)
	} else if err != nil {
		return err
	}
	rel, err := buildRelation(m, ct.info(), types)
	if te := (*TableError)(nil); errors.As(err, &te) {
		return s.stopRelation(ctx, qn, m.RelationID, te)
	} else if err != nil {
		return err
	}
	rel.checkUTF8 = s.r.sqlASCII
	if err := fillDefaults(ctx, s.conn, ct, rel); err != nil {
		return err
	}
	prev := s.r.known[qn]
	cur := rel.table
	if rel.table, err = s.r.version(ctx, cur, ct.attnums(cur), s.tx.commitLSN, func(prevCols, recreated, renamed []string) error {
		return s.reReadAdded(ctx, ct, prevCols, recreated, renamed, cur)
	}); err != nil {
		return err
	}
	if prev != nil && prev != rel.table {
		s.r.logger.Info("table changed shape", "table", qn, "from", prev.String(), "to", rel.table.String())
	}
	s.relations[m.RelationID] = rel
	return nil
}

// stopRelation stops a captured table whose new version cdcd cannot read
// (its primary key dropped, a column of a type without a mapping added):
// a fault of that table alone, at the last commit, as the publication
// check's; its row changes are passed over until a version cdcd can read,
// and the table stays paused until the operator repairs it (a re-snapshot
// replaces what was passed over). Before, the whole reader stopped.
func (s *streamer) stopRelation(ctx context.Context, qn string, id uint32, te *TableError) error {
	s.relations[id] = nil
	if err := s.maybeFlush(ctx, true); err != nil {
		return err
	}
	f := refusedFault(qn, te)
	s.r.logFault(qn, f)
	return s.emit.Emit(ctx, []source.Change{tableFaultChange(qn, s.committed, f)})
}

// wasCaptured reports whether oid is a captured table's stored OID.
func (s *streamer) wasCaptured(oid uint32) bool {
	for _, id := range s.st.Tables {
		if id.OID == oid {
			return true
		}
	}
	return false
}

// captured reports whether a table is one of the configured ones.
func (s *streamer) captured(qualified string) bool {
	for _, t := range s.r.cfg.Tables {
		sch, name := splitTable(t)
		if sch+"."+name == qualified {
			return true
		}
	}
	return s.r.cfg.Incremental.SignalTable != "" && qualify(s.r.cfg.Incremental.SignalTable) == qualified
}
