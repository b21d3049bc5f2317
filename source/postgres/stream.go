package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// streamer is the state of one replication session.
type streamer struct {
	r     *Reader
	conn  *pgx.Conn // catalog queries
	repl  *pgconn.PgConn
	emit  source.Emitter
	known map[string]*schema.Table // last version per table, to reuse pointers

	relations map[uint32]*relation
	tx        txState
	inTx      bool
	batch     []source.Change
	batchAt   time.Time // when the oldest change in batch arrived
	// committed is the commit LSN of the newest transaction whose Commit
	// message was processed: every change of it is in batch or emitted.
	committed uint64
	// flushed is the newest LSN reported to the server as flushed.
	flushed    uint64
	nextStatus time.Time
}

func (r *Reader) stream(ctx context.Context, conn *pgx.Conn, repl *pgconn.PgConn, start uint64, tables []*catalogTable, e source.Emitter) error {
	s := &streamer{
		r: r, conn: conn, repl: repl, emit: e,
		known: r.known, relations: map[uint32]*relation{},
		flushed: start, committed: start,
	}
	args := []string{"proto_version '1'", fmt.Sprintf("publication_names '%s'", r.cfg.Publication), "binary 'true'"}
	if err := pglogrepl.StartReplication(ctx, repl, r.cfg.Slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: args}); err != nil {
		return fmt.Errorf("postgres: start replication on slot %s: %w", r.cfg.Slot, err)
	}
	r.logger.Info("streaming", "from", pglogrepl.LSN(start).String())
	r.stats.Flushed.Store(start)
	r.stats.Streaming.Store(true)
	defer r.stats.Streaming.Store(false)
	err := s.loop(ctx)
	if ctx.Err() != nil {
		// Stopping: report what is durable so a restart re-sends less.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = sendStatus(sctx, repl, s.flushed)
		cancel()
	}
	return err
}

func (s *streamer) loop(ctx context.Context) error {
	s.nextStatus = time.Now().Add(s.r.cfg.StatusInterval)
	for {
		if err := s.maybeFlush(ctx, false); err != nil {
			return err
		}
		deadline := s.nextStatus
		if len(s.batch) > 0 {
			if due := s.batchAt.Add(s.r.cfg.BatchDelay); due.Before(deadline) {
				deadline = due
			}
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		msg, err := s.repl.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if isTimeout(err) {
				continue
			}
			return fmt.Errorf("postgres: receive: %w", err)
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if err := s.copyData(ctx, msg.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return errorFromBackend(msg)
		default:
			return fmt.Errorf("postgres: unexpected message %T on the replication stream", msg)
		}
	}
}

// maybeFlush emits the batch when it is full or old enough (or force), then
// reports progress when the status interval has passed.
func (s *streamer) maybeFlush(ctx context.Context, force bool) error {
	now := time.Now()
	if len(s.batch) > 0 && (force || len(s.batch) >= s.r.cfg.BatchMax || now.Sub(s.batchAt) >= s.r.cfg.BatchDelay) {
		if err := s.flushBatch(ctx); err != nil {
			return err
		}
	}
	if !now.Before(s.nextStatus) {
		return s.status(ctx)
	}
	return nil
}

// flushBatch hands the batch to the Emitter; once it returns, every
// transaction committed so far is durable and may be confirmed.
func (s *streamer) flushBatch(ctx context.Context) error {
	committed := s.committed
	if err := s.emit.Emit(ctx, s.batch); err != nil {
		return err
	}
	s.r.stats.Events.Add(int64(len(s.batch)))
	last := s.batch[len(s.batch)-1]
	s.r.stats.LastCommitted.Store(last.CommitTime.UnixMilli())
	clear(s.batch)
	s.batch = s.batch[:0]
	if committed > s.flushed {
		s.flushed = committed
		s.r.stats.Flushed.Store(committed)
	}
	return nil
}

func (s *streamer) status(ctx context.Context) error {
	if err := sendStatus(ctx, s.repl, s.flushed); err != nil {
		return fmt.Errorf("postgres: send standby status: %w", err)
	}
	s.nextStatus = time.Now().Add(s.r.cfg.StatusInterval)
	return nil
}

func (s *streamer) copyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("postgres: empty CopyData on the replication stream")
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("postgres: keepalive: %w", err)
		}
		if uint64(ka.ServerWALEnd) > s.r.stats.Received.Load() {
			s.r.stats.Received.Store(uint64(ka.ServerWALEnd))
		}
		if ka.ReplyRequested {
			// Flush what we hold first so the reply carries fresh progress.
			if err := s.maybeFlush(ctx, !s.inTx); err != nil {
				return err
			}
			return s.status(ctx)
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("postgres: xlogdata: %w", err)
		}
		if end := uint64(xld.WALStart) + uint64(len(xld.WALData)); end > s.r.stats.Received.Load() {
			s.r.stats.Received.Store(end)
		}
		return s.message(ctx, xld.WALData)
	}
	return nil
}

func (s *streamer) message(ctx context.Context, data []byte) error {
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return fmt.Errorf("postgres: pgoutput: %w", err)
	}
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		return s.relation(ctx, m)
	case *pglogrepl.BeginMessage:
		s.tx = txState{xid: m.Xid, commitLSN: uint64(m.FinalLSN), commitTime: m.CommitTime}
		s.inTx = true
	case *pglogrepl.CommitMessage:
		s.inTx = false
		s.committed = uint64(m.CommitLSN)
		if len(s.batch) == 0 && s.committed > s.flushed {
			// Nothing of it is pending: it is as durable as it will get.
			s.flushed = s.committed
			s.r.stats.Flushed.Store(s.committed)
		}
	case *pglogrepl.InsertMessage:
		rel, err := s.rel(m.RelationID)
		if err != nil {
			return err
		}
		after, err := decodeTuple(rel, m.Tuple)
		if err != nil {
			return err
		}
		s.add(s.tx.change(rel.table, source.OpCreate, nil, after))
	case *pglogrepl.UpdateMessage:
		rel, err := s.rel(m.RelationID)
		if err != nil {
			return err
		}
		n := len(s.batch)
		if s.batch, err = s.tx.updateChanges(rel, m, s.batch); err != nil {
			return err
		}
		s.added(n)
	case *pglogrepl.DeleteMessage:
		rel, err := s.rel(m.RelationID)
		if err != nil {
			return err
		}
		before, err := decodeTuple(rel, m.OldTuple)
		if err != nil {
			return err
		}
		s.add(s.tx.change(rel.table, source.OpDelete, before, nil))
	case *pglogrepl.TruncateMessage:
		for _, id := range m.RelationIDs {
			rel, err := s.rel(id)
			if err != nil {
				return err
			}
			s.add(s.tx.change(rel.table, source.OpTruncate, nil, nil))
		}
	}
	return nil
}

func (s *streamer) add(c source.Change) {
	n := len(s.batch)
	s.batch = append(s.batch, c)
	s.added(n)
}

func (s *streamer) added(before int) {
	if before == 0 && len(s.batch) > 0 {
		s.batchAt = time.Now()
	}
}

func (s *streamer) rel(id uint32) (*relation, error) {
	rel, ok := s.relations[id]
	if !ok {
		return nil, fmt.Errorf("postgres: change for relation %d before its Relation message", id)
	}
	return rel, nil
}

// relation records a table version. The catalog is asked for the key,
// NOT NULL flags and type names, which pgoutput does not send.
func (s *streamer) relation(ctx context.Context, m *pglogrepl.RelationMessage) error {
	ct, err := describeTable(ctx, s.conn, m.Namespace, m.RelationName)
	if err != nil {
		return err
	}
	rel, err := buildRelation(m, ct.info())
	if err != nil {
		return err
	}
	qn := rel.table.QualifiedName()
	if prev := s.known[qn]; prev != nil && prev.Equal(rel.table) {
		rel.table = prev
	} else {
		if prev != nil {
			s.r.logger.Info("table changed shape", "table", qn, "from", prev.String(), "to", rel.table.String())
		}
		s.known[qn] = rel.table
	}
	s.relations[m.RelationID] = rel
	return nil
}
