package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/spill"
)

// heartbeatPrefix is the prefix of the reader's heartbeat messages.
const heartbeatPrefix = "cdcd.heartbeat"

// streamer is the state of one replication session.
type streamer struct {
	r     *Reader
	conn  *pgx.Conn // catalog queries and heartbeats
	types *typeResolver
	repl  *pgconn.PgConn
	emit  source.Emitter
	st    *sourceState
	spill *spill.Set
	inc   *incStream // incremental snapshots

	relations map[uint32]*relation // nil entry: a relation that is not captured
	tx        txState
	inTx      bool // between Begin and Commit, or replaying a streamed transaction
	inStream  bool // between Stream Start and Stream Stop
	streamXid uint32
	row       rowMessage // the Insert, Update or Delete being handled; its slices reused
	alloc     rowAlloc   // the decoded rows' memory
	// rowsKept: a change since the last flush may be kept past its hand-over
	// (a faulty row: the table's pause); the flush forgets alloc's chunks
	// instead of reusing them (recycleRows).
	rowsKept  bool
	batch     []source.Change
	batchAt   time.Time // when the oldest change in batch arrived
	batchSize int       // the batch's row bytes (source.Change.Bytes)
	// committed is the newest LSN up to which every transaction's changes
	// are in batch or emitted: a commit LSN, or a heartbeat's LSN.
	committed uint64
	// flushed is the newest LSN known durable; saved is the newest LSN
	// recorded in the state as confirmed. The server is told saved.
	flushed, saved uint64
	// track, when the Emitter tracks its pipeline (source.Tracker), takes
	// the batches: a flush submits the batch and the stream reads on; the
	// batch's position becomes flushed once the log says it is durable
	// (poll). Nil: a flush is an Emit, durable when it returns.
	track source.Tracker
	// inflight is, oldest first, the positions waiting for their batches
	// to be durable: each LSN may be confirmed once batch n is.
	inflight   []inflight
	lastSubmit uint64 // the number of the newest batch submitted
	// inflightBytes is the row bytes of the stream's batches handed over
	// since nothing was last in flight (flushBatch bounds it).
	inflightBytes int
	// catchUpAt, when not 0, is the server's WAL end the stream was
	// found far behind of, catchUpBehind by how much, catchUpData the
	// XLogData bytes received since; nextLagCheck when to look
	// (caughtup.go).
	catchUpAt     uint64
	catchUpBehind uint64
	catchUpData   uint64
	nextLagCheck  time.Time
	nextStatus    time.Time
	lastStatus    time.Time // when the last status was sent
	lastData      time.Time // when the last change or commit arrived
	nextHeartbeat time.Time
	nextPubCheck  time.Time
	// nextFinishCheck is when to look next whether a snapshot run has
	// read its last chunk (maybeFinishing).
	nextFinishCheck time.Time
	// readDeadline is the receive deadline last set on the connection
	// (zero: not known; status forgets it, see loop).
	readDeadline time.Time
}

// stream replicates from start until ctx ends or an error.
func (sess *session) stream(ctx context.Context, start uint64) error {
	spills, err := spill.Open(sess.cfg.SpillDir)
	if err != nil {
		return err
	}
	defer spills.Close()
	s := &streamer{
		r: sess.Reader, conn: sess.conn, types: sess.types, repl: sess.repl, emit: sess.emit, st: sess.st, spill: spills,
		relations: map[uint32]*relation{}, flushed: start, committed: start, saved: sess.st.Confirmed,
	}
	// A session before this one may have left batches in flight. Nothing
	// of them is confirmed (start is at most what the log holds); the
	// server sends their transactions again, whose changes go into this
	// session's batches, numbered after them: confirmed only once those,
	// and so the earlier ones, are durable.
	s.track, _ = sess.emit.(source.Tracker)
	// The decoded rows' chunks are written again once a batch is handed
	// over (recycleRows), unless the Emitter delivers some changes after
	// Emit returned (source.Holder: the outbox relay's queued events keep
	// texts of their rows) or signal rows may become a snapshot request's
	// strings.
	_, holds := sess.emit.(source.Holder)
	s.alloc = newRowAlloc(!holds && sess.cfg.Incremental.SignalTable == "")
	args := []string{"proto_version '2'", fmt.Sprintf("publication_names '%s'", sess.cfg.Publication),
		"binary 'true'", "messages 'true'", "streaming 'on'"}
	if err := pglogrepl.StartReplication(ctx, sess.repl, sess.cfg.Slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: args}); err != nil {
		if slotInUse(err) {
			if holder, herr := slotHolder(ctx, sess.conn, sess.cfg.Slot); herr == nil && holder != "" {
				return fmt.Errorf("postgres: start replication on slot %s: it is in use by %s: %w", sess.cfg.Slot, holder, err)
			}
		}
		return fmt.Errorf("postgres: start replication on slot %s: %w", sess.cfg.Slot, err)
	}
	sess.logger.Info("streaming", "from", pglogrepl.LSN(start).String())
	sess.stats.Flushed.Store(start)
	sess.stats.Streaming.Store(true)
	defer sess.stats.Streaming.Store(false)
	if s.inc, err = sess.startIncremental(ctx, s); err != nil {
		return err
	}
	defer s.inc.close()
	err = s.loop(ctx)
	if ctx.Err() != nil && s.saved > 0 {
		// Stopping: report what is durable so a restart re-sends less.
		// CopyDone after it and waiting for the server's end of the stream
		// makes sure the walsender read the status before the connection
		// closes (it handles messages in order); the deadline bounds the
		// wait while it drains what it was sending.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if err := s.sync(sctx); err != nil {
			sess.logger.Debug("batches in flight not made durable before the stop", "err", err)
		}
		if err := s.status(sctx); err == nil {
			_ = s.repl.Conn().SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := pglogrepl.SendStandbyCopyDone(sctx, s.repl); err != nil {
				sess.logger.Debug("end of replication stream not confirmed", "err", err)
			}
		}
		cancel()
	}
	return err
}

func (s *streamer) loop(ctx context.Context) error {
	// A receive waits until the schedule's deadline, set on the connection
	// itself: a context with a deadline per message, and pgconn's watch of
	// it, cost about 7% of cdcd's CPU while streaming. A cancel ends the
	// wait at once through the same deadline (pgconn keeps the connection
	// after a read timeout).
	conn := s.repl.Conn()
	var mu sync.Mutex
	looping := true
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if looping {
			_ = conn.SetReadDeadline(time.Unix(1, 0))
		}
	})
	defer func() {
		stop()
		mu.Lock()
		looping = false
		mu.Unlock()
	}()
	now := time.Now()
	s.nextStatus = now.Add(s.r.cfg.StatusInterval)
	s.lastData, s.nextHeartbeat = now, now.Add(s.r.cfg.HeartbeatInterval)
	s.nextPubCheck = now.Add(s.r.cfg.PublicationCheckInterval)
	for {
		if err := s.inc.err(); err != nil {
			return err
		}
		// One clock read a message for the schedule's checks: each read
		// costs 40–80 ns here, and three a message were 2% of cdcd's CPU
		// while streaming.
		now := time.Now()
		if err := s.maybeFlushAt(ctx, false, now); err != nil {
			return err
		}
		if err := s.maybeHeartbeat(ctx, now); err != nil {
			return err
		}
		if err := s.maybeCheckPublication(ctx, now); err != nil {
			return err
		}
		if err := s.maybeCheckLag(ctx, now); err != nil {
			return err
		}
		s.maybeFinishing(now)
		deadline := s.nextStatus
		if s.inc.active() && s.nextFinishCheck.Before(deadline) {
			deadline = s.nextFinishCheck
		}
		if len(s.batch) > 0 {
			if due := s.batchAt.Add(s.batchWait()); due.Before(deadline) {
				deadline = due
			}
		} else if len(s.inflight) > 0 {
			// Look again soon whether the batches in flight are durable:
			// a quiet stream confirms them (and ends a snapshot run
			// waiting for them) without waiting for the next message.
			// Not while the batch fills: a deadline moved at every
			// message (and its clock read) cost about 2% of cdcd's CPU,
			// and the batch's own deadline comes soon enough.
			if due := time.Now().Add(durablePoll); due.Before(deadline) {
				deadline = due
			}
		}
		if s.r.cfg.HeartbeatInterval > 0 && s.nextHeartbeat.Before(deadline) {
			deadline = s.nextHeartbeat
		}
		if !s.inTx && !s.inStream && s.nextPubCheck.Before(deadline) {
			// Not while a transaction arrives: the check waits for its end
			// (a deadline already past would stop every receive).
			deadline = s.nextPubCheck
		}
		// Set only when it moved: while a batch fills, the deadline stays
		// where it is for message after message, and setting it again
		// (the poller's lock, its timer moved) was about 6% of the loop's
		// CPU. A status send forgets it (a cancelled call's watcher may
		// have cleared it); the cancel below sets its own.
		if !deadline.Equal(s.readDeadline) {
			if err := conn.SetReadDeadline(deadline); err != nil {
				return &connError{fmt.Errorf("postgres: receive: %w", err)}
			}
			s.readDeadline = deadline
		}
		if ctx.Err() != nil { // cancelled before the deadline was set
			return ctx.Err()
		}
		msg, err := s.repl.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue // a deadline from the schedule, not an error
			}
			return &connError{fmt.Errorf("postgres: receive: %w", err)}
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if err := s.copyData(ctx, msg.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return s.r.streamError(msg)
		default:
			return &connError{fmt.Errorf("postgres: unexpected message %T on the replication stream", msg)}
		}
	}
}

// maybeFlush emits the batch when it is full or old enough (or force),
// then reports progress when the status interval has passed. It is called
// between messages, also while a streamed transaction is replayed, so a
// transaction of any size neither fills memory nor starves the server of
// status updates (wal_sender_timeout).
func (s *streamer) maybeFlush(ctx context.Context, force bool) error {
	return s.maybeFlushAt(ctx, force, time.Now())
}

// maybeFlushAt is maybeFlush with the clock read by the caller.
func (s *streamer) maybeFlushAt(ctx context.Context, force bool, now time.Time) error {
	if err := s.poll(); err != nil {
		return err
	}
	if len(s.batch) > 0 && (force || s.batchFull(now)) {
		if err := s.flushBatch(ctx); err != nil {
			return err
		}
	}
	if !now.Before(s.nextStatus) {
		return s.status(ctx)
	}
	return nil
}

// batchFull reports whether the batch is to be handed over now: it holds
// BatchMax changes or source.BatchBytes, or its oldest change waited
// BatchDelay. While the stream reads a backlog (behind), a batch holds
// up to backlogBatchMax and waits up to backlogBatchDelay instead.
func (s *streamer) batchFull(now time.Time) bool {
	most := s.r.cfg.BatchMax
	if s.behind() {
		most *= backlogBatchMax
	}
	return len(s.batch) >= most || s.batchSize >= source.BatchBytes || now.Sub(s.batchAt) >= s.batchWait()
}

// batchWait is how long a batch's oldest change may wait: BatchDelay,
// backlogBatchDelay times it while behind.
func (s *streamer) batchWait() time.Duration {
	if s.behind() {
		return s.r.cfg.BatchDelay * backlogBatchDelay
	}
	return s.r.cfg.BatchDelay
}

// A stream reading a backlog hands over batches of up to backlogBatchMax
// times BatchMax changes (still at most source.BatchBytes), and a change
// waits up to backlogBatchDelay times BatchDelay: the count decides, the
// delay only bounds a change's wait when the distance was WAL the stream
// does not capture (caughtup.go) and its own changes come slowly.
const (
	backlogBatchMax   = 2
	backlogBatchDelay = 5
)

// behind reports whether the stream reads a backlog: it was found far
// behind the server's WAL end (maybeCheckLag) and has not received up to
// it yet. Its batches then hand the log fewer, larger appends (a group
// commit, a pwrite and an fdatasync per partition, was the log's largest
// cost a streamed change; BENCHMARKS.md, session 18). A stream that keeps
// up is never noted behind: its changes wait BatchDelay at most.
func (s *streamer) behind() bool {
	return s.catchUpAt != 0 && s.r.stats.Received.Load() < s.catchUpAt
}

// flushBatch hands the batch to the Emitter: everything up to committed
// may be confirmed once the batch is durable — when Emit returns, or, with
// a tracking Emitter, once the log says so (submit).
func (s *streamer) flushBatch(ctx context.Context) error {
	committed := s.committed
	// Streamed batches go tracked only while something is in flight (a
	// snapshot's chunks): measured, a stream that always ran ahead of the
	// log cost the pipeline more CPU a change (BENCHMARKS.md, session 11,
	// handover), while behind chunks an Emit's wait stalls the snapshot.
	tracked := s.track != nil && (len(s.inflight) > 0 || s.r.cfg.trackStream)
	if tracked {
		if s.inflightBytes > 0 && s.inflightBytes+s.batchSize > source.BatchBytes {
			// The stream outruns the log: what it handed over waits in
			// the log's buffers, which count against the memory limit.
			// Bounded to about one full batch besides the one decoding.
			if err := s.sync(ctx); err != nil {
				return err
			}
		}
		if err := s.submit(ctx, s.batch, committed); err != nil {
			return err
		}
		s.inflightBytes += s.batchSize
	} else if err := s.emit.Emit(ctx, s.batch); err != nil {
		return err
	}
	s.r.stats.Events.Add(int64(len(s.batch)))
	last := s.batch[len(s.batch)-1]
	s.r.stats.LastCommitted.Store(last.CommitTime.UnixMilli())
	clear(s.batch)
	s.batch, s.batchSize = s.batch[:0], 0
	s.recycleRows()
	if !tracked {
		s.advance(committed)
	}
	return nil
}

// recycleRows lets the rows decoded since the last flush be written over:
// the batch that held them is handed over, and an Emitter keeps nothing
// of a batch after Emit or Submit returned (the load's rule, loadFree).
// Not when something else may still refer to them — a faulty row's pause,
// or an incremental snapshot's run, which keeps key values of the changes
// it observes (snapshot.Engine.Observe): then the chunks are left to
// those and new ones made. Written once, the rows and their values were
// 354 of the 459 MB the reader allocated streaming 1.35M changes
// (BENCHMARKS.md, session 19).
func (s *streamer) recycleRows() {
	if !s.alloc.reuse {
		return
	}
	if s.rowsKept || s.snapshotsRunning() {
		s.alloc.forget()
	} else {
		s.alloc.reset()
	}
	s.rowsKept = false
}

// snapshotsRunning reports whether the incremental snapshot engine has a
// run queued or running (Progress lists those before the finished ones,
// which have their Finished time). A run's kept values leave with it.
func (s *streamer) snapshotsRunning() bool {
	if s.inc == nil {
		return false
	}
	for _, p := range s.inc.eng.Progress() {
		if p.Finished.IsZero() {
			return true
		}
	}
	return false
}

// inflight is a position waiting for a submitted batch: lsn may be
// confirmed once batch n is durable.
type inflight struct{ n, lsn uint64 }

// durablePoll is how long a stream with batches in flight waits at most
// for a message before it looks whether they became durable.
const durablePoll = 2 * time.Millisecond

// finishPoll is how often a stream with a snapshot running looks whether
// a run has read its last chunk.
const finishPoll = 50 * time.Millisecond

// maybeFinishing brings the next status (the snapshots' checkpoint) to a
// BatchDelay after the last one when a snapshot run has read its last
// chunk, instead of up to StatusInterval later. The one place this is
// looked at: the run is marked so by its worker after the chunk's rows
// were handed over, often after they became durable and the position
// moved, so looking only when the position moved (as advance did) left
// the run, on an idle stream, waiting for the next status.
func (s *streamer) maybeFinishing(now time.Time) {
	if !s.inc.active() || now.Before(s.nextFinishCheck) {
		return
	}
	s.nextFinishCheck = now.Add(finishPoll)
	if s.inc.finishing() {
		if due := s.lastStatus.Add(s.r.cfg.BatchDelay); due.Before(s.nextStatus) {
			s.nextStatus = due
		}
	}
}

// submit hands batch to the tracking Emitter without waiting for it to be
// durable; lsn (every change up to it is in batch or submitted before)
// becomes confirmable once it is. The Emitter bounds the batches in
// flight (Submit waits while its pipeline is full).
func (s *streamer) submit(ctx context.Context, batch []source.Change, lsn uint64) error {
	n, err := s.track.SubmitTracked(ctx, batch)
	if err != nil {
		return err
	}
	s.lastSubmit = n
	s.awaitDurable(n, lsn)
	return nil
}

// awaitDurable records that lsn may be confirmed once batch n is durable.
func (s *streamer) awaitDurable(n, lsn uint64) {
	if k := len(s.inflight); k > 0 && s.inflight[k-1].n == n {
		s.inflight[k-1].lsn = max(s.inflight[k-1].lsn, lsn)
		return
	}
	s.inflight = append(s.inflight, inflight{n, lsn})
}

// poll advances to the positions whose batches the Emitter now holds
// durable, without waiting. An error of any batch in flight is returned:
// the stream stops, as at a failed Emit, confirming nothing past it.
func (s *streamer) poll() error {
	if len(s.inflight) == 0 {
		return nil
	}
	d, err := s.track.Durable()
	i, lsn := 0, uint64(0)
	for ; i < len(s.inflight) && s.inflight[i].n <= d; i++ {
		lsn = max(lsn, s.inflight[i].lsn)
	}
	if i > 0 {
		s.inflight = append(s.inflight[:0], s.inflight[i:]...)
		s.advance(lsn)
	}
	if len(s.inflight) == 0 {
		s.inflightBytes = 0
	}
	return err
}

// sync waits until every batch submitted is durable, and advances to it.
func (s *streamer) sync(ctx context.Context) error {
	if len(s.inflight) == 0 {
		return nil
	}
	if err := s.track.Sync(ctx); err != nil {
		return err
	}
	return s.poll()
}

// advance records lsn as durable. A snapshot run that waits only for its
// rows to be durable is checkpointed by the status maybeFinishing brings
// forward.
func (s *streamer) advance(lsn uint64) {
	if lsn > s.flushed {
		s.flushed = lsn
		s.publishFlushed(s.confirmable())
	}
}

// commit records that every change up to lsn is in the batch or emitted.
func (s *streamer) commit(lsn uint64) {
	if lsn > s.committed {
		s.committed = lsn
	}
	s.lastData = time.Now()
	if len(s.batch) == 0 {
		if len(s.inflight) > 0 {
			// Its changes may be in a batch still in flight: confirmable
			// once the newest of them is durable.
			s.awaitDurable(s.lastSubmit, s.committed)
			return
		}
		s.advance(s.committed) // nothing of it is pending
	}
}

// status saves the durable position in the state, then reports it: the
// slot's confirmed position never passes what the pipeline recorded (see
// SlotAhead) nor what the log holds.
func (s *streamer) status(ctx context.Context) error {
	if err := s.poll(); err != nil {
		return err
	}
	lsn := s.confirmable() // durable, and not held back (hold.go)
	s.publishFlushed(lsn)
	if err := s.inc.checkpoint(ctx, lsn); err != nil {
		return err
	}
	if lsn > s.saved {
		s.st.Confirmed = lsn
		if err := saveJSON(ctx, s.r.state, s.r.stateKey(), s.st); err != nil {
			return fmt.Errorf("postgres: save confirmed position: %w", err)
		}
		s.saved = lsn
	}
	s.readDeadline = time.Time{} // pgconn's watch of ctx may move it
	if err := sendStatus(ctx, s.repl, s.saved); err != nil {
		return err
	}
	s.lastStatus = time.Now()
	s.nextStatus = s.lastStatus.Add(s.r.cfg.StatusInterval)
	return nil
}

// maybeHeartbeat writes a heartbeat message when nothing has arrived for
// the heartbeat interval. Its arrival confirms the slot forward (see
// logicalMessage).
func (s *streamer) maybeHeartbeat(ctx context.Context, now time.Time) error {
	if s.r.cfg.HeartbeatInterval <= 0 {
		return nil
	}
	if now.Before(s.nextHeartbeat) {
		return nil
	}
	s.nextHeartbeat = now.Add(s.r.cfg.HeartbeatInterval)
	if now.Sub(s.lastData) < s.r.cfg.HeartbeatInterval || s.inTx || s.inStream {
		// Next a HeartbeatInterval after the last data, not after this
		// look: a stream gone idle just after a look waited twice the
		// interval for its heartbeat.
		if !s.inTx && !s.inStream {
			s.nextHeartbeat = s.lastData.Add(s.r.cfg.HeartbeatInterval)
		}
		return nil
	}
	if _, err := s.conn.Exec(ctx, "SELECT pg_logical_emit_message(false, $1::text, ''::text)", heartbeatPrefix); err != nil {
		if retryable(err) {
			return &connError{fmt.Errorf("postgres: heartbeat: %w", err)}
		}
		s.r.logger.Warn("heartbeat failed; disabling heartbeats", "err", err,
			"what_to_do", "grant EXECUTE on pg_logical_emit_message to the pipeline's role, or set heartbeat_interval: 0")
		s.r.cfg.HeartbeatInterval = -1
		return nil
	}
	s.r.stats.Heartbeats.Add(1)
	return nil
}

// maybeCheckPublication checks the publication and the tables'
// identities (pubcheck.go) every PublicationCheckInterval, between
// transactions; the changes received before go out first.
func (s *streamer) maybeCheckPublication(ctx context.Context, now time.Time) error {
	if s.inTx || s.inStream || now.Before(s.nextPubCheck) {
		return nil
	}
	s.nextPubCheck = now.Add(s.r.cfg.PublicationCheckInterval)
	if err := s.maybeFlush(ctx, true); err != nil {
		return err
	}
	if err := s.r.checkPublication(ctx, s.conn, s.st, s.committed, s.emit); err != nil {
		if retryable(err) {
			return &connError{err}
		}
		return err
	}
	return nil
}

func (s *streamer) copyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return &connError{fmt.Errorf("postgres: empty CopyData on the replication stream")}
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
		if err := s.maybeCaughtUp(ctx, uint64(ka.ServerWALEnd)); err != nil {
			return err
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
		end := uint64(xld.WALStart) + uint64(len(xld.WALData))
		if end > s.r.stats.Received.Load() {
			s.r.stats.Received.Store(end)
		}
		if s.catchUpAt != 0 {
			s.catchUpData += uint64(len(xld.WALData))
		}
		return s.message(ctx, uint64(xld.WALStart), xld.WALData)
	}
	return nil
}
