package daemon

import (
	"context"
	"sync"
)

// PauseIntake makes the source's next appends wait until resume is called
// (or Run's context ends), so a test can hold the slot back. held is
// closed once an append is waiting.
func (d *Daemon) PauseIntake() (resume func(), held <-chan struct{}) {
	ch := make(chan struct{})
	h := make(chan struct{})
	var once sync.Once
	gate := func(ctx context.Context) error {
		once.Do(func() { close(h) })
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	d.intake.gate.Store(&gate)
	return func() {
		d.intake.gate.Store(nil)
		close(ch)
	}, h
}
