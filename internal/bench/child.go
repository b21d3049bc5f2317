package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/dbproc"
)

// child is a cdcd daemon process the benchmark started.
type child struct {
	proc    *dbproc.Proc
	logPath string
	started time.Time
}

// startChild starts the daemon with cfgPath; its output goes to logPath
// (appended). env adds environment variables (profiles, GOMEMLIMIT).
func (b *run) startChild(name string, env ...string) (*child, error) {
	cmd := b.opts.Command(b.cfgPath)
	logPath := filepath.Join(b.dir, "cdcd.log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fmt.Fprintf(f, "\n==== bench phase %s ====\n", name)
	cmd.Stdout, cmd.Stderr = f, f
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(append(cmd.Env, env...), b.opts.ChildEnv...)
	if b.opts.ProfileDir != "" {
		cmd.Env = append(cmd.Env,
			EnvCPUProfile+"="+filepath.Join(b.opts.ProfileDir, name+".cpu.pprof"),
			EnvHeapProfile+"="+filepath.Join(b.opts.ProfileDir, name+".heap.pprof"))
	}
	p, err := dbproc.Start(cmd, dbproc.Account{}, syscall.SIGKILL)
	if err != nil {
		return nil, err
	}
	return &child{proc: p, logPath: logPath, started: time.Now()}, nil
}

// stop stops the daemon gracefully (SIGTERM), killing it after a minute.
func (c *child) stop() error {
	if err := c.proc.Stop(syscall.SIGTERM, time.Minute); err != nil {
		return err
	}
	var ee *exec.ExitError
	if err := c.proc.Err(); err != nil && !errors.As(err, &ee) {
		return err
	} else if ee != nil && ee.ExitCode() != 0 {
		return fmt.Errorf("bench: cdcd exited with %d after SIGTERM; see %s", ee.ExitCode(), c.logPath)
	}
	return nil
}

// usage is the daemon's CPU time and peak RSS so far.
func (c *child) usage() (time.Duration, int64, error) {
	cpu, err := dbproc.ProcessCPU(c.proc.PID())
	if err != nil {
		return 0, 0, err
	}
	rss, err := peakRSS(c.proc.PID())
	return cpu, rss, err
}

// Environment variables of the daemon child that `cdcd run` honours for
// profiling (cmd/cdcd/profile.go).
const (
	EnvCPUProfile  = "CDCD_CPUPROFILE"  // write a CPU profile of the whole run here
	EnvHeapProfile = "CDCD_HEAPPROFILE" // write a heap profile here at each new peak of the heap
)

// RunDaemon is `cdcd run -c cfgPath` for a benchmark child that is not the
// cdcd binary (tests re-execute themselves): it runs the pipeline until
// ctx ends, then stops it gracefully.
func RunDaemon(ctx context.Context, cfgPath string, logger *slog.Logger) error {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	d, err := daemon.New(ctx, cfg, logger)
	if err != nil {
		return err
	}
	err = d.Run(ctx)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
