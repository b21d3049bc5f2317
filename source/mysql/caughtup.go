package mysql

import (
	"context"
	"time"

	"github.com/cdcd-dev/cdcd/source"
)

// A stream that reads a backlog (a restart behind, a burst the reader is
// slower than) is far behind the end of the server's binlog. Every
// lagCheckInterval, while an Emitter listens (source.CatchUpNotifier), the
// stream compares its position with the binlog's end (SHOW BINARY LOGS,
// as the lag metric does; REPLICATION CLIENT / BINLOG MONITOR is a
// precondition already) and, CatchUpLag or more behind, notes that end.
// Once it has read past it, between transactions, it hands its batch
// over and says it caught up: the sink commits what it holds at once
// instead of at its interval (docs/internals.md, "A stream's catch-up
// commits at once"). A stream that keeps up with a steady workload is
// never that far behind and says nothing. The binlog holds every
// table's transactions, not only the captured ones, so the stream's
// position does reach the end it noted; but a distance made of other
// tables' (or databases') events is no backlog of ours: the catch-up is
// announced only when the captured tables' row events read after the
// note are at least 1/catchUpOwnShare of it.

// lagCheckInterval is how often the stream compares its position with
// the end of the server's binlog.
const lagCheckInterval = time.Second

// catchUpOwnShare: the captured tables' row events read after the note
// must be at least 1/catchUpOwnShare of the distance noted.
const catchUpOwnShare = 8

// maybeCheckLag notes the binlog's end when the stream is CatchUpLag or
// more behind it.
func (s *streamer) maybeCheckLag(ctx context.Context, now time.Time) error {
	if s.catchUpFile != "" || now.Before(s.nextLagCheck) {
		return nil
	}
	s.nextLagCheck = now.Add(lagCheckInterval)
	if _, ok := s.emit.(source.CatchUpNotifier); !ok || s.db == nil {
		s.nextLagCheck = now.Add(time.Hour)
		return nil
	}
	files, err := binaryLogs(ctx, s.db)
	if err != nil || len(files) == 0 {
		// Not a reason to stop: without it the sink commits at its interval.
		s.r.logger.Debug("cannot read the binlog's end; catch-ups are not announced for a minute", "err", err)
		s.nextLagCheck = now.Add(time.Minute)
		return nil
	}
	if behind := lagBytes(files, s.r.stats.BinlogFile(), s.r.stats.BinlogPos.Load()); behind >= s.r.cfg.CatchUpLag {
		last := files[len(files)-1]
		s.catchUpFile, s.catchUpPos = last.name, last.size
		s.catchUpBehind, s.catchUpData = behind, 0
	}
	return nil
}

// maybeCaughtUp, once the stream has read up to the end maybeCheckLag
// noted, between transactions, hands the batch over and announces the
// catch-up.
func (s *streamer) maybeCaughtUp(ctx context.Context) error {
	if s.catchUpFile == "" || s.tx.active {
		return nil
	}
	file, pos := s.r.stats.BinlogFile(), int64(s.r.stats.BinlogPos.Load())
	if file < s.catchUpFile || (file == s.catchUpFile && pos < s.catchUpPos) {
		return nil
	}
	s.catchUpFile = ""
	n, ok := s.emit.(source.CatchUpNotifier)
	if !ok {
		return nil
	}
	if s.catchUpData*catchUpOwnShare < s.catchUpBehind {
		s.r.logger.Debug("stream reached the binlog end it was behind; mostly events it does not capture, no catch-up announced",
			"behind_bytes", s.catchUpBehind, "own_bytes", s.catchUpData)
		return nil
	}
	if err := s.maybeFlush(ctx, true); err != nil {
		return err
	}
	s.r.logger.Debug("stream caught up with the server", "file", file, "pos", pos)
	n.CaughtUp()
	return nil
}
