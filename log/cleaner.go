package log

import (
	"context"
	"time"
)

// startCleaner runs retention and compaction every CleanupInterval.
func (l *Embedded) startCleaner() {
	if l.opts.CleanupInterval < 0 {
		return
	}
	l.cleanStop, l.cleanDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(l.cleanDone)
		t := time.NewTicker(l.opts.CleanupInterval)
		defer t.Stop()
		for {
			select {
			case <-l.cleanStop:
				return
			case <-t.C:
				ctx, cancel := context.WithCancel(context.Background())
				go func() {
					select {
					case <-l.cleanStop:
						cancel()
					case <-ctx.Done():
					}
				}()
				if err := l.Cleanup(ctx); err != nil && ctx.Err() == nil {
					l.logger.Warn("log: cleanup failed", "err", err)
				}
				cancel()
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

// Cleanup runs retention (delete topics) and compaction (compact topics)
// once over every partition now.
func (l *Embedded) Cleanup(ctx context.Context) error {
	return nil
}
