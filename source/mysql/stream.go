package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcd-dev/cdcd/internal/failpoint"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// streamer is the state of one binlog session.
type streamer struct {
	r      *Reader
	db     *sql.DB
	flavor string
	colls  collations
	emit   source.Emitter
	inc    *incStream // incremental snapshots
	// captured holds the configured tables as the information schema
	// showed them last (at the start and after each DDL touching them).
	captured map[string]*tableDesc
	// foldNames: the server compares table and database names without
	// case (lower_case_table_names 1 or 2), so a statement may name a
	// captured table in any case (capturedNamed).
	foldNames bool
	byID      map[uint64]*tableVersion // table-map id → version
	// catchUpFile and catchUpPos, when the file is set, are the server's
	// binlog end the stream was found far behind of; nextLagCheck when to
	// look (caughtup.go).
	catchUpFile string
	catchUpPos  int64
	// catchUpBehind is how far behind the stream was then, catchUpData
	// the captured tables' row events read since (bytes).
	catchUpBehind, catchUpData int64
	nextLagCheck               time.Time
	latest                     map[string]*tableVersion // db.table → newest version

	// faultLogged is the reason last logged per table stopped while
	// streaming (tablefault.go).
	faultLogged map[string]string
	// fk holds, by parent db.table, the foreign key actions that change
	// captured tables without binlog rows; fkWarned the ones warned of
	// (fkcascade.go).
	fk       map[string][]fkAction
	fkWarned map[string]bool
	// xa holds the prepared XA transactions read but not resolved, by
	// xid (xa.go).
	xa map[string]*xaOpen

	// live is the GTID set and ordinal of every transaction committed in
	// the binlog read so far; tx is the transaction being read.
	live gtidState
	tx   struct {
		active bool
		gtid   txGTID
		ord    uint64
		idx    uint32
		ts     time.Time
		text   string // gtid's text, for the changes' binlog places
		// xa is the xid of an XA transaction's prepare group, with its
		// changes and tables (xa.go).
		xa        string
		xaChanges []source.Change
		xaTables  []string
		xaOver    bool
	}
	// file is the binlog being read; rowsEv and row place the changes of
	// the row event being read (source.BinlogPlace).
	file   string
	rowsEv *replication.EventHeader
	row    int32
	// streamBufs holds the batch, its decoded rows (arena, used again
	// after each hand-over: releaseRows), their values (vals, likewise)
	// and its binlog places (handover.go); hand is the Submit in flight
	// and the spare set.
	*streamBufs
	hand    handover
	batchAt time.Time
	fields  []field // a row image's columns (image.go)
	posSlab []byte  // the changes' positions (position)
	// durable is the checkpoint of the last transaction all of whose
	// changes the Emitter returned; while durableLive is set it is live
	// (every committed change is emitted).
	durable     checkpoint
	durableLive bool
	flushedPos  source.Position // the last change emitted

	saved          uint64
	nextCheckpoint time.Time
}

// tableVersion is a table as one table map described it.
type tableVersion struct {
	tm       *replication.TableMapEvent
	captured bool
	qn       string
	cols     []colType
	table    *schema.Table
	// shapeFault: a configured table whose shape cdcd cannot map; its rows
	// stop it (tablefault.go). table is then its last shape.
	shapeFault *source.Fault
}

// stream reads the binlog from st until ctx ends or an error.
func (r *Reader) stream(ctx context.Context, ci connInfo, db *sql.DB, flavor string, colls collations,
	tables map[string]*tableDesc, st gtidState, wmErr error, e source.Emitter) error {
	syncer := replication.NewBinlogSyncer(decodeSettings(replication.BinlogSyncerConfig{
		ServerID: r.cfg.ServerID, Flavor: flavor,
		Host: ci.host, Port: ci.port, User: ci.user, Password: ci.password, TLSConfig: ci.tls,
		HeartbeatPeriod:  r.cfg.HeartbeatInterval,
		ReadTimeout:      3 * r.cfg.HeartbeatInterval,
		DisableRetrySync: true, // Run reconnects, from the checkpoint
		EventCacheCount:  256,
		Logger:           slog.New(quietHandler{r.logger.Handler()}),
	}))
	defer syncer.Close()
	bs, err := syncer.StartSyncGTID(st.set.Clone())
	if err != nil {
		return dumpError(err, st)
	}
	s := &streamer{
		r: r, db: db, flavor: flavor, colls: colls, emit: e, captured: tables,
		byID: map[uint64]*tableVersion{}, latest: map[string]*tableVersion{}, streamBufs: newStreamBufs(),
		live: st, durable: checkpoint{Flavor: flavor, GTID: st.String(), Ordinal: st.ord, XA: r.xaResume}, saved: st.ord,
		xa: xaResumed(r.xaResume),
	}
	if v, err := globalVar(ctx, db, "lower_case_table_names"); err != nil {
		return err
	} else {
		s.foldNames = v != "0"
	}
	r.logger.Info("streaming", "flavor", flavor, "gtid", st.String(), "ordinal", st.ord, "tls", string(ci.sslMode))
	if ci.tls == nil && !isLoopback(ci.host) {
		r.logger.Warn("the connection to the server is not encrypted: its rows and the password cross the network in plaintext",
			"host", ci.host, "fix", "add ?ssl-mode=verify-identity&ssl-ca=<the server's CA file> to source.mysql.dsn (or ssl-mode=required)")
	}
	if s.inc, err = r.startIncremental(ctx, ci, flavor, wmErr, e); err != nil {
		return err
	}
	defer s.inc.close()
	if err := s.loadCascades(ctx); err != nil {
		return err
	}
	for _, qn := range r.cfg.Tables { // what changed while no session read the binlog (columns.go)
		if d := tables[qn]; d != nil {
			if err := s.syncColumns(ctx, d, 0, true); err != nil {
				return err
			}
		}
	}
	r.stats.Streaming.Store(true)
	defer r.stats.Streaming.Store(false)
	err = s.loop(ctx, bs, st)
	if herr := s.hand.wait(); err == nil {
		err = herr
	}
	if ctx.Err() != nil {
		// Stopping: record what is durable so a restart re-reads less.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if len(s.batch) > 0 {
			// What was read is handed over and synced first (the log stays
			// open until the source has stopped), so the checkpoint covers
			// it; a submitted batch's last change waits in the batch.
			if ferr := s.flushBatch(sctx); ferr != nil {
				r.logger.Warn("the last batch not emitted on stop; the next start reads it again", "err", ferr)
			}
		}
		if cerr := s.checkpoint(sctx); cerr != nil {
			r.logger.Warn("final checkpoint not saved", "err", cerr)
		}
		cancel()
	}
	return err
}

// decodeSettings sets how go-mysql decodes the events the stream reads.
func decodeSettings(c replication.BinlogSyncerConfig) replication.BinlogSyncerConfig {
	c.RowsEventDecodeFunc = rowsHook     // row images decoded by image.go
	c.ParseTime = true                   // TIMESTAMP and DATETIME as time.Time (decode.go), where go-mysql decodes them
	c.TimestampStringLocation = time.UTC // TIMESTAMP text in UTC, were ParseTime off
	c.UseFloatWithTrailingZero = true    // JSON doubles keep a "." (mysqlJSONText tells them from integers)
	return c
}

func (s *streamer) loop(ctx context.Context, bs *replication.BinlogStreamer, start gtidState) error {
	s.nextCheckpoint = time.Now().Add(s.r.cfg.CheckpointInterval)
	var rd readDeadline
	defer rd.stop()
	for {
		if err := s.inc.err(); err != nil {
			return err
		}
		if err := s.inc.meetMarks(ctx, s); err != nil {
			return err
		}
		// One clock read an event for the schedule's checks (each read
		// costs 40–80 ns here; the lag check's is a second old at most).
		now := time.Now()
		if err := s.maybeFlushAt(ctx, false, now); err != nil {
			return err
		}
		deadline := s.nextCheckpoint
		if len(s.batch) > 0 {
			if due := s.batchAt.Add(s.r.cfg.BatchDelay); due.Before(deadline) {
				deadline = due
			}
		}
		ev, err := bs.GetEvent(rd.at(ctx, deadline))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				continue // a deadline from the schedule, not an error
			}
			return dumpError(err, start)
		}
		if err := s.event(ctx, ev); err != nil {
			return err
		}
		if err := s.maybeCaughtUp(ctx); err != nil {
			return err
		}
		if err := s.maybeCheckLag(ctx, now); err != nil {
			return err
		}
	}
}

// readDeadline is one deadline context that serves every read until the
// schedule moves the deadline (a context per event cost an allocation and
// a timer each).
type readDeadline struct {
	ctx      context.Context
	cancel   context.CancelFunc
	deadline time.Time
}

func (d *readDeadline) at(parent context.Context, deadline time.Time) context.Context {
	if d.ctx == nil || !deadline.Equal(d.deadline) || d.ctx.Err() != nil {
		d.stop()
		d.ctx, d.cancel = context.WithDeadline(parent, deadline)
		d.deadline = deadline
	}
	return d.ctx
}

func (d *readDeadline) stop() {
	if d.cancel != nil {
		d.cancel()
	}
}

// dumpError classifies an error of the binlog dump.
func dumpError(err error, start gtidState) error {
	if serverCode(err) == erMasterFatalReadingBinlog {
		msg := err.Error()
		if strings.Contains(msg, "purged") || strings.Contains(msg, "too old") {
			return &PurgedError{Resume: start.String(), Detail: "the server said: " + msg}
		}
		return &ResumeError{Resume: start.String(), Detail: msg}
	}
	if code := serverCode(err); code == 1045 || code == 1227 || code == 1044 {
		return &PreconditionError{What: "the server refused the binlog dump: " + err.Error(),
			Fix: "check the dsn's user and password, and GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO it"}
	}
	return &connError{fmt.Errorf("mysql: binlog: %w", err)}
}

// maybeFlush hands the batch over when it is full or old enough (or
// force), then saves the checkpoint when its interval has passed.
//
// With an Emitter that pipelines (source.Pipeliner), a full or old batch
// is submitted without waiting for it to be durable, but for its last
// change, which stays in the batch: the stream reads on while the log
// appends and syncs, and the durable point stays where it was (a batch
// that is not empty freezes it, see add). The kept change is emitted,
// and everything submitted before it made durable (Emit syncs), when it
// is alone in the batch once the delay has passed again (the stream went
// quiet), when the checkpoint is due, or on force.
func (s *streamer) maybeFlush(ctx context.Context, force bool) error {
	return s.maybeFlushAt(ctx, force, time.Now())
}

// maybeFlushAt is maybeFlush with the clock read by the caller.
func (s *streamer) maybeFlushAt(ctx context.Context, force bool, now time.Time) error {
	due := !now.Before(s.nextCheckpoint)
	if len(s.batch) == 0 && (s.arena.i > 0 || s.arena.off > 0 || s.placed > 0) {
		s.releaseRows() // rows decoded and not emitted (watermarks, signals)
	}
	if n := len(s.batch); n > 0 && (force || due || n >= s.r.cfg.BatchMax || now.Sub(s.batchAt) >= s.r.cfg.BatchDelay) {
		p, ok := s.emit.(source.Pipeliner)
		var err error
		if ok && n > 1 && !force && !due {
			err = s.submitBatch(ctx, p, now)
		} else {
			err = s.flushBatch(ctx)
		}
		if err != nil {
			return err
		}
	}
	if due {
		return s.checkpoint(ctx)
	}
	return nil
}

// submitBatch submits the batch but its last change, which stays (now is
// its new age): nothing of it counts as durable until a flushBatch. The
// Submit runs on the hand-over's goroutine while the stream decodes on
// into the spare buffers (handover.go); the kept change takes copies of
// its rows and binlog place first.
func (s *streamer) submitBatch(ctx context.Context, p source.Pipeliner, now time.Time) error {
	if err := s.hand.wait(); err != nil {
		return err
	}
	n := len(s.batch)
	last := s.batch[n-1]
	keep(&last)
	out := s.streamBufs
	clear(out.batch[n-1:])
	out.batch = out.batch[:n-1]
	s.streamBufs = s.hand.takeSpare()
	s.batch = append(s.batch, last)
	s.batchAt = now
	s.hand.start(ctx, p, out, func(n int) { s.r.stats.Events.Add(int64(n)) })
	return nil
}

// releaseRows makes the rows, values and binlog places of the changes
// handed over free for the next ones (rowArena, the reusable slab), once
// the batch holds at most one change: that change's are copied out first.
// Called between events only (no decoded row is pending then).
func (s *streamer) releaseRows() {
	if len(s.batch) > 1 {
		return
	}
	if len(s.batch) == 1 {
		keep(&s.batch[0])
	}
	b := s.streamBufs
	b.arena.reset()
	b.vals.Reset()
	clear(b.places[:b.placed])
	b.places, b.placed = b.places[:0], 0
}

// keep copies c's rows, their values and its binlog place out of the
// stream's buffers.
func keep(c *source.Change) {
	c.Before, c.After = cloneRow(c.Before), cloneRow(c.After)
	if c.Binlog != nil {
		p := *c.Binlog
		c.Binlog = &p
	}
}

// cloneRow copies a row out of the arena and its values out of the
// reusable slab (nil stays nil): the copy stays as it is when both are
// written again.
func cloneRow(row []any) []any {
	return snapshot.OwnValues(row)
}

// flushBatch hands the batch to the Emitter; once it returns, every
// committed transaction is durable.
func (s *streamer) flushBatch(ctx context.Context) error {
	if err := s.hand.wait(); err != nil {
		return err
	}
	if err := s.emit.Emit(ctx, s.batch); err != nil {
		return err
	}
	// Durable in the log, the checkpoint behind it: a restart reads the
	// batch's transactions again and the log drops what it holds.
	failpoint.Hit("source.mysql.after-emit")
	s.flushedPos = append(s.flushedPos[:0], s.batch[len(s.batch)-1].Pos...)
	s.r.stats.Events.Add(int64(len(s.batch)))
	s.r.stats.LastCommitted.Store(s.batch[len(s.batch)-1].CommitTime.UnixMilli())
	clear(s.batch)
	s.batch = s.batch[:0]
	s.durable = checkpoint{Flavor: s.flavor, GTID: s.live.String(), Ordinal: s.live.ord, XA: s.xaTables()}
	s.durableLive = true
	s.releaseRows()
	return nil
}

// checkpoint saves the durable position when it moved.
func (s *streamer) checkpoint(ctx context.Context) error {
	s.nextCheckpoint = time.Now().Add(s.r.cfg.CheckpointInterval)
	cp := s.durable
	if s.durableLive {
		cp = checkpoint{Flavor: s.flavor, GTID: s.live.String(), Ordinal: s.live.ord, XA: s.xaTables()}
	}
	// The snapshots' progress first: saved, it never claims more than the
	// log holds; the GTID set saved after it may lag behind it.
	durable := Position(cp.Ordinal, math.MaxUint32-1)
	if s.flushedPos.Compare(durable) > 0 {
		durable = s.flushedPos // rows placed after a transaction (read-only watermarks)
	}
	if err := s.inc.checkpoint(ctx, durable); err != nil {
		return err
	}
	if cp.Ordinal <= s.saved {
		return nil
	}
	failpoint.Hit("source.mysql.before-checkpoint") // the snapshots' progress saved ahead of the GTID set
	if err := s.r.saveCheckpoint(ctx, cp); err != nil {
		return err
	}
	failpoint.Hit("source.mysql.after-checkpoint")
	s.saved = cp.Ordinal
	return nil
}

// chunk hands over the changes the snapshot engine emits at a watermark
// (a chunk's rows at its high watermark, a reset marker). With an Emitter
// that pipelines, a chunk's rows are submitted at once behind the batch so
// far, but for the last, which stays in the batch as submitBatch keeps its
// last change: nothing of them counts as durable until a flushBatch, and
// the durable point is frozen first as add freezes it (the watermark's
// transaction is not committed yet). The chunk's slices then go back to
// be read into again (Reader.chunkBufs), the kept row with a copy of its
// values. Snapshot rows pass the engine's Observe untouched, so they skip
// it. Before, each row was copied into the batch and observed, and the
// chunk's slices were left to the collector: a quarter of a load's
// allocations.
func (s *streamer) chunk(ctx context.Context, rows []source.Change) error {
	p, ok := s.emit.(source.Pipeliner)
	if !ok || len(rows) < 2 {
		for _, c := range rows {
			s.add(c)
		}
		return nil
	}
	now := time.Now()
	if len(s.batch) == 0 {
		s.freeze(now)
	}
	if err := s.hand.wait(); err != nil {
		return err
	}
	if len(s.batch) > 0 {
		if err := p.Submit(ctx, s.batch); err != nil {
			return err
		}
		s.r.stats.Events.Add(int64(len(s.batch)))
	}
	n := len(rows)
	if err := p.Submit(ctx, rows[:n-1]); err != nil {
		return err
	}
	s.r.stats.Events.Add(int64(n - 1))
	last := rows[n-1]
	last.After = snapshot.OwnValues(last.After) // the chunk's slabs are read into again
	s.r.chunkBufs.GiveBack(rows)
	clear(s.batch)
	s.batch = append(s.batch[:0], last)
	s.batchAt = now
	return nil
}

// freeze is add's first change of a batch: from here on committed
// transactions may have changes not yet emitted, so the durable point
// stays where it is until a flushBatch.
func (s *streamer) freeze(now time.Time) {
	if s.durableLive {
		s.durable = checkpoint{Flavor: s.flavor, GTID: s.live.String(), Ordinal: s.live.ord, XA: s.xaTables()}
		s.durableLive = false
	}
	s.batchAt = now
}

// add queues a change of the current transaction.
func (s *streamer) add(c source.Change) {
	if len(s.batch) == 0 {
		s.freeze(time.Now())
	}
	n := len(s.batch)
	s.batch = append(s.batch, c)
	s.batch = s.inc.observe(s.batch, n)
	if s.tx.xa != "" {
		s.xaKeep(c)
	}
}

func (s *streamer) event(ctx context.Context, ev *replication.BinlogEvent) error {
	if ev.Header.LogPos > 0 {
		s.r.stats.BinlogPos.Store(ev.Header.LogPos)
	}
	if g, ok, err := gtidOf(ev.Event); err != nil {
		return err
	} else if ok {
		return s.begin(ctx, g, ev)
	}
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		s.file = string(e.NextLogName)
		s.r.stats.setBinlogFile(s.file)
		s.r.stats.BinlogPos.Store(uint32(e.Position))
	case *replication.GenericEvent:
		if ev.Header.EventType == replication.XA_PREPARE_LOG_EVENT {
			return s.xaPrepare(ctx, e)
		}
	case *replication.TableMapEvent:
		return s.tableMap(ctx, e)
	case *replication.RowsEvent:
		return s.rows(ctx, ev.Header, e)
	case *replication.XIDEvent:
		return s.commit(ctx)
	case *replication.QueryEvent:
		return s.query(ctx, e)
	case *replication.TransactionPayloadEvent:
		for _, inner := range e.Events {
			if err := s.event(ctx, inner); err != nil {
				return err
			}
		}
	}
	return nil
}

// begin starts the transaction of a GTID event.
func (s *streamer) begin(ctx context.Context, g txGTID, ev *replication.BinlogEvent) error {
	if s.tx.active {
		// The server writes whole event groups; a group without its end
		// event is one this reader does not know how to end.
		s.r.logger.Warn("a transaction began before the last one ended; taking the last one as committed",
			"gtid", g.String(), "last", s.tx.gtid.String())
		if err := s.commit(ctx); err != nil {
			return err
		}
	}
	s.tx.active, s.tx.gtid, s.tx.ord, s.tx.idx, s.tx.text = true, g, s.live.ord+1, 0, g.String()
	s.tx.xa = ""
	if e, ok := ev.Event.(*replication.MariadbGTIDEvent); ok && e.Flags&mariadbPreparedXA != 0 {
		s.xaStart("") // xa.go
	}
	s.tx.ts = time.Unix(int64(ev.Header.Timestamp), 0)
	if e, ok := ev.Event.(*replication.GTIDEvent); ok && e.ImmediateCommitTimestamp > 0 {
		s.tx.ts = e.ImmediateCommitTime()
	}
	return nil
}

// commit ends the current transaction: its GTID joins the live set.
func (s *streamer) commit(ctx context.Context) error {
	if !s.tx.active {
		return nil
	}
	s.tx.active = false
	if err := s.live.apply(s.tx.gtid); err != nil {
		return err
	}
	if s.live.ord != s.tx.ord {
		return fmt.Errorf("mysql: internal: transaction %s numbered %d, the set says %d", s.tx.gtid, s.tx.ord, s.live.ord)
	}
	s.r.stats.Transactions.Add(1)
	if len(s.batch) == 0 {
		s.durableLive = true // nothing of it is pending
	}
	return s.inc.meetMarks(ctx, s)
}

// quietHandler passes go-mysql's warnings and errors on and drops its
// per-connection info lines.
type quietHandler struct{ slog.Handler }

func (h quietHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

func (h quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return quietHandler{h.Handler.WithAttrs(as)}
}

func (h quietHandler) WithGroup(name string) slog.Handler {
	return quietHandler{h.Handler.WithGroup(name)}
}
