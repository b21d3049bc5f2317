package daemon

import "time"

// caughtUpWait bounds how long a catch-up notice waits for the batches
// before it to become durable; past it (a log that cannot sync), no
// notice is passed on and the sink's commit interval applies.
const caughtUpWait = time.Minute

// CaughtUp passes a source's catch-up (source.CatchUpNotifier) to the
// sink once every batch handed over before it is durable, so the tables'
// loops take the log's ends when those batches are in them. It does not
// wait; a batch that fails stops the source, and no notice is passed on.
func (e *emitter) CaughtUp() {
	notify := e.onCaughtUp
	if notify == nil {
		return
	}
	e.mu.Lock()
	n := e.pipe.Queued()
	e.unlock()
	go func() {
		deadline := time.Now().Add(caughtUpWait)
		for time.Now().Before(deadline) {
			done, err := e.pipe.Done()
			if err != nil {
				return
			}
			if done >= n {
				notify()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
}
