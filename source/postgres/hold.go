package postgres

import (
	"github.com/cdcd-dev/cdcd/source"

	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
)

// confirmable is the newest LSN the reader may confirm: what is durable
// downstream (flushed), but before the transaction of the oldest change
// an Emitter still delivers after Emit returned (source.Holder), so the
// server sends that transaction again after a restart.
func (s *streamer) confirmable() uint64 {
	h, ok := s.emit.(source.Holder)
	if !ok {
		return s.flushed
	}
	p, held := h.Held()
	if !held {
		return s.flushed
	}
	commit, _, err := pgpos.Parse(p)
	if err != nil || commit == 0 {
		return s.flushed
	}
	return min(s.flushed, commit-1)
}

// publishFlushed shows lsn as the confirmed position in Stats; it never
// goes back.
func (s *streamer) publishFlushed(lsn uint64) {
	if lsn > s.r.stats.Flushed.Load() {
		s.r.stats.Flushed.Store(lsn)
	}
}
