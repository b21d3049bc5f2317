package log

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"
)

// startCleaner runs Cleanup every CleanupInterval until Close.
func (l *Embedded) startCleaner() {
	if l.opts.CleanupInterval < 0 {
		return
	}
	l.cleanStop, l.cleanDone = make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-l.cleanStop
		cancel()
	}()
	go func() {
		defer close(l.cleanDone)
		t := time.NewTicker(l.opts.CleanupInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				l.spare.trim()
				if err := l.Cleanup(ctx); err != nil && ctx.Err() == nil {
					l.logger.Warn("log: cleanup failed", "err", err)
				}
			}
		}
	}()
}

func (l *Embedded) stopCleaner() {
	if l.cleanStop == nil {
		return
	}
	close(l.cleanStop)
	<-l.cleanDone
}

// Cleanup runs retention (CleanupDelete topics: whole closed segments past
// Retention or beyond RetentionBytes) and compaction (CleanupCompact
// topics) once over every partition. The background cleaner calls it every
// Options.CleanupInterval; it is exported for tools and tests. Neither
// blocks appends or fetches: they only swap segment lists under the
// partition's lock.
func (l *Embedded) Cleanup(ctx context.Context) error {
	if l.opts.ReadOnly {
		return ErrReadOnly
	}
	l.cleanMu.Lock()
	defer l.cleanMu.Unlock()
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return ErrClosed
	}
	topics := make([]*topic, 0, len(l.topics))
	for _, t := range l.topics {
		topics = append(topics, t)
	}
	l.mu.RUnlock()
	var errs []error
	for _, t := range topics {
		for _, p := range t.parts {
			if err := ctx.Err(); err != nil {
				return err
			}
			var err error
			if t.cfg.Cleanup == CleanupCompact {
				err = p.compact(ctx, t.cfg.DeleteRetention)
				var ce *CorruptionError
				if errors.As(err, &ce) {
					if ok, rerr := p.repair(ce.Path); ok || rerr != nil {
						err = rerr // repaired: the next round compacts it
					}
				}
			} else {
				err = p.retain(t.cfg.Retention, t.cfg.RetentionBytes)
			}
			if err != nil && !errors.Is(err, ErrClosed) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// retain deletes the oldest closed segments while they are older than
// retention (their newest record is) or while the partition stays at or
// above retentionBytes without them. The active segment is never deleted.
func (p *partition) retain(retention time.Duration, retentionBytes int64) error {
	if retention <= 0 && retentionBytes <= 0 {
		return nil
	}
	horizon := p.opts.now().Add(-retention).UnixMilli()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	var total int64
	for _, s := range p.segs {
		total += s.size
	}
	drop := 0
	for _, s := range p.segs[:len(p.segs)-1] {
		byAge := retention > 0 && s.maxTs < horizon
		bySize := retentionBytes > 0 && total-s.size >= retentionBytes
		if !byAge && !bySize {
			break
		}
		total -= s.size
		drop++
	}
	if drop == 0 {
		p.mu.Unlock()
		return nil
	}
	removed := p.segs[:drop]
	p.segs = append([]*segment(nil), p.segs[drop:]...)
	start := p.segs[0].base
	p.mu.Unlock()
	p.logger.Info("log: retention deleted segments", "segments", drop, "new_start", start)
	return p.removeSegments(removed)
}

// removeSegments deletes the files of segments no longer in the list; open
// readers keep reading them through their descriptors.
func (p *partition) removeSegments(segs []*segment) error {
	var errs []error
	for _, s := range segs {
		for _, suffix := range []string{segmentSuffix, offsetIndexSuffix, timeIndexSuffix} {
			err := p.opts.FS.Remove(filepath.Join(p.dir, segmentName(s.base, suffix)))
			if err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
		s.retire()
	}
	if err := syncDir(p.opts.FS, p.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
