package dbproc

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// Proc is a child process that leads its own process group and, on Linux,
// is sent a signal by the kernel when this process dies, so a server can't
// outlive a test binary that crashed or was killed (elsewhere an orphaned
// server runs on; Sweep removes its directory once it is gone).
type Proc struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{}
	err  error // cmd.Wait's result; read only after done is closed
}

// killWait bounds the wait after SIGKILL.
const killWait = 10 * time.Second

// Start starts cmd as acct, as the leader of a new process group (so a
// terminal's ^C goes to us, not to it, and Stop can reach its children), with
// deathSig delivered to it if this process dies first (Linux only). It
// overwrites cmd.SysProcAttr.
func Start(cmd *exec.Cmd, acct Account, deathSig syscall.Signal) (*Proc, error) {
	cmd.SysProcAttr = sysProcAttr(acct, deathSig)
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The kernel sends Pdeathsig when the OS thread that forked the
		// child exits, not the process (go.dev/issue/27505). Keep this
		// goroutine on its thread until the child has exited: the runtime
		// ends a locked thread only when its goroutine returns, which is
		// after Wait.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("dbproc: start %s: %w", cmd.Path, err)
	}
	p.pid = cmd.Process.Pid
	return p, nil
}

// PID is the child's process id (also its process group id).
func (p *Proc) PID() int { return p.pid }

// Done is closed once the child has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the child's exit status as exec.Cmd.Wait reports it.
// REQUIRES: Done is closed.
func (p *Proc) Err() error { return p.err }

// Exited reports whether the child has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends sig to the child and waits up to grace for it to exit. If it is
// still running then, its process group (the child, and those of its
// children that stayed in the group, all started by us) gets SIGKILL, and
// Stop waits up to 10 s more. Children that left the group (PostgreSQL's
// backends call setsid) exit on their own when they see the postmaster die.
// Stop on an exited child returns nil at once.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) error {
	if p.Exited() {
		return nil
	}
	if err := syscall.Kill(p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("dbproc: signal %v to pid %d: %w", sig, p.pid, err)
	}
	if p.wait(grace) {
		return nil
	}
	// Still alive, so the group id is still ours.
	if err := syscall.Kill(-p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("dbproc: SIGKILL to process group %d: %w", p.pid, err)
	}
	if p.wait(killWait) {
		return fmt.Errorf("dbproc: pid %d did not exit within %v of %v; killed", p.pid, grace, sig)
	}
	return fmt.Errorf("dbproc: pid %d still running %v after SIGKILL", p.pid, killWait)
}

func (p *Proc) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// Run starts cmd as acct (see Start) and waits for it to exit. When ctx ends
// first, the child's process group is killed and Run returns ctx's error.
func Run(ctx context.Context, cmd *exec.Cmd, acct Account) error {
	p, err := Start(cmd, acct, syscall.SIGKILL)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		syscall.Kill(-p.pid, syscall.SIGKILL)
		p.wait(killWait)
		return fmt.Errorf("dbproc: %s: %w", cmd.Path, ctx.Err())
	}
}
