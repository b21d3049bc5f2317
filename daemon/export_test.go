package daemon

import "context"

// PauseIntake makes the source's next appends wait until resume is called
// (or Run's context ends), so a test can hold the slot back.
func (d *Daemon) PauseIntake() (resume func()) {
	ch := make(chan struct{})
	gate := func(ctx context.Context) error {
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
	}
}
