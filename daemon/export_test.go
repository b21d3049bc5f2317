package daemon

import (
	"context"
	"sync"
	"time"
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

// SlowIntake makes each of the source's appends wait delay first, until
// stop is called: the sink then keeps up with the log however fast the
// source could read.
func (d *Daemon) SlowIntake(delay time.Duration) (stop func()) {
	gate := func(ctx context.Context) error {
		select {
		case <-time.After(delay):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	d.intake.gate.Store(&gate)
	return func() { d.intake.gate.Store(nil) }
}
