package postgres

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/cdcd-dev/cdcd/source"
)

// A stream that reads a backlog (a restart behind, the changes made
// during an initial load, a burst the reader is slower than) is far behind
// the server's WAL end. pgoutput's messages do not say how far (a
// logical walsender's XLogData and keepalives carry the position it has
// sent, not the server's end), so the stream asks the server every
// lagCheckInterval (`pg_current_wal_lsn()`, on its catalog connection);
// at CatchUpLag or more behind it notes that end. Once the walsender has
// sent everything up to it, it waits for more WAL and sends a keepalive
// first: the stream has caught up. maybeCaughtUp then hands the batch
// over and tells an Emitter that listens (source.CatchUpNotifier), once a
// backlog: while the stream keeps up with a steady workload it is never
// that far behind, nothing is said, and the sink's commits keep their
// interval.
//
// Unrelated WAL (other databases on the server, tables not captured)
// counts in that distance too, but the walsender skips it and sends
// nothing for it. So the catch-up is announced only when the stream
// received its own changes worth at least 1/catchUpOwnShare of the
// distance it noted: on a shared server a burst elsewhere is no backlog
// of ours, and the sink keeps holding what its interval holds. (A row's
// pgoutput message is about half to two thirds of its WAL; a backlog of
// our own clears the bar many times over.)

// lagCheckInterval is how often the stream compares its position with
// the server's WAL end.
const lagCheckInterval = time.Second

// catchUpOwnShare: the stream's own changes received after the note must
// be at least 1/catchUpOwnShare of the distance noted.
const catchUpOwnShare = 8

// maybeCheckLag notes the server's WAL end when the stream is CatchUpLag
// or more behind it.
func (s *streamer) maybeCheckLag(ctx context.Context, now time.Time) error {
	if s.catchUpAt != 0 || now.Before(s.nextLagCheck) {
		return nil
	}
	s.nextLagCheck = now.Add(lagCheckInterval)
	if _, ok := s.emit.(source.CatchUpNotifier); !ok {
		s.nextLagCheck = now.Add(time.Hour)
		return nil
	}
	var end int64
	if err := s.conn.QueryRow(ctx, "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").Scan(&end); err != nil {
		if retryable(err) {
			return &connError{err}
		}
		// Not a reason to stop: without it the sink commits at its interval.
		s.r.logger.Debug("cannot read the server's WAL end; catch-ups are not announced", "err", err)
		s.nextLagCheck = now.Add(time.Hour)
		return nil
	}
	// Before anything is received in this process, the stream stands at
	// its start (the slot's confirmed position, where the walsender
	// begins): counted from 0, the distance was the server's whole WAL, a
	// note whose own share could never be met.
	at := max(s.r.stats.Received.Load(), s.committed)
	if uint64(end) >= at+uint64(s.r.cfg.CatchUpLag) {
		s.catchUpAt, s.catchUpBehind, s.catchUpData = uint64(end), uint64(end)-at, 0
	}
	return nil
}

// maybeCaughtUp, at a keepalive whose position (sent, the walsender's) has
// reached the end noted by maybeCheckLag, hands the batch over and
// announces the catch-up, between transactions, when the stream's own
// changes made the distance.
func (s *streamer) maybeCaughtUp(ctx context.Context, sent uint64) error {
	if s.catchUpAt == 0 || sent < s.catchUpAt || s.inTx || s.inStream {
		return nil
	}
	n, ok := s.emit.(source.CatchUpNotifier)
	if !ok || s.catchUpData*catchUpOwnShare < s.catchUpBehind {
		if ok {
			s.r.logger.Debug("stream reached the server's end it was behind; mostly WAL it does not capture, no catch-up announced",
				"behind_bytes", s.catchUpBehind, "own_bytes", s.catchUpData)
		}
		s.catchUpAt = 0
		return nil
	}
	if len(s.batch) > 0 {
		if err := s.flushBatch(ctx); err != nil {
			return err
		}
	}
	s.r.logger.Debug("stream caught up with the server", "behind_end", pglogrepl.LSN(s.catchUpAt).String(), "sent", pglogrepl.LSN(sent).String())
	s.catchUpAt = 0
	n.CaughtUp()
	return nil
}
