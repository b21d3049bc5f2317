package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres"
)

// ErrHardStop: the graceful stop did not finish, because the shutdown
// deadline passed or a second signal came; the wrapping error says which
// and what was still running. Everything acknowledged upstream is durable,
// so a restart is safe: the database re-sends what the log lacks, and a
// table commit whose outcome was cut off is settled by its commit id.
var ErrHardStop = errors.New("daemon: hard stop")

// hardGrace is how long a hard stop waits for components to notice their
// cancelled contexts before Run returns anyway.
const hardGrace = time.Second

// RunOption configures Run.
type RunOption func(*runOptions)

type runOptions struct{ hard <-chan struct{} }

// WithHardStop makes the end of hard (cmd/cdcd: the second signal) turn a
// graceful stop into a hard one.
func WithHardStop(hard context.Context) RunOption {
	return func(o *runOptions) { o.hard = hard.Done() }
}

// Lifecycle states, as /status and /readyz report them.
const (
	StateStarting  = "starting"  // connecting, preparing the slot
	StateLoading   = "loading"   // the initial load runs
	StateStreaming = "streaming" // the slot streams
	StateStopping  = "stopping"  // a graceful stop runs
	StateStopped   = "stopped"
)

// Run runs the pipeline until ctx ends or a component fails.
//
// When ctx ends, Run stops gracefully, in this order, each step bounded by
// what is left of the shutdown deadline (shutdown.deadline, from the
// moment ctx ended):
//
//  1. /readyz turns 503 ("stopping").
//  2. Stop intake: the source's context is cancelled, so it stops reading.
//     A batch being appended to the log finishes (appends run under Run's
//     own context, not the source's).
//  3. Acknowledge: the source sends PostgreSQL a final standby status with
//     the flushed position (everything durable in the log) and closes its
//     connections; Run waits for it to return.
//  4. Drain: the sink's context is cancelled; each table commits what it
//     consumed (its final commit) and returns; Run waits for it.
//  5. The monitor (slot poller, alerts, webhook), the stats sampler and
//     the admin listener stop, the listener last so scrapes and /status
//     work during the drain.
//
// Run then returns nil; the caller closes the log and the catalog (Close).
//
// When the deadline passes, or WithHardStop's context ends, Run cancels
// everything, waits hardGrace, and returns an error wrapping ErrHardStop;
// the caller should exit without waiting for more. When a component fails,
// Run cancels the others (the sink still commits what it consumed, within
// the deadline) and returns that component's error.
func (d *Daemon) Run(ctx context.Context, opts ...RunOption) error {
	var o runOptions
	for _, opt := range opts {
		opt(&o)
	}
	d.logger.Info("cdcd starting", "pipeline", d.cfg.Pipeline, "role", d.cfg.Role, "tables", len(d.topics), "data_dir", d.cfg.DataDir,
		"shutdown_deadline", d.cfg.Shutdown.Deadline)
	runCtx, cancelRun := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelRun(nil)
	d.intake.ctx.Store(&runCtx)
	srcCtx, stopSource := context.WithCancel(runCtx)
	sinkCtx, stopSink := context.WithCancel(runCtx)
	auxCtx, stopAux := context.WithCancel(runCtx)
	defer stopSource()
	defer stopSink()
	defer stopAux()

	r := &runner{failed: make(chan error, 8), logger: d.logger}
	src := r.start("source", srcCtx, func(ctx context.Context) error {
		if !d.runsSource() {
			<-ctx.Done()
			return nil
		}
		if err := d.runSource(ctx); err != nil {
			var se *postgres.SlotError
			if errors.As(err, &se) {
				// The slot or the cluster can't be trusted to deliver every
				// change: an operator must decide.
				d.logger.Error("capture stopped: replication slot can't be trusted", "alert", true,
					"kind", string(se.Kind), "slot", se.Slot, "detail", se.Detail)
			}
			return fmt.Errorf("source: %w", err)
		}
		return nil
	})
	sink := r.start("sink", sinkCtx, d.runSink)
	aux := []*stage{
		r.start("monitor", auxCtx, d.monitor.run),
		r.start("stats", auxCtx, d.sampler.run),
		r.start("progress", auxCtx, d.runProgress),
		r.start("reconcile", auxCtx, d.reconcileLoop),
	}
	if d.runsSource() {
		aux = append(aux, r.start("resume", auxCtx, func(ctx context.Context) error { return d.emitter.resumeLoop(ctx, d.resumeEvery) }))
	}
	if d.cfg.Admin.Enabled() {
		srv, err := d.adminServer(d.cfg.Admin.Listen)
		if err != nil {
			cancelRun(err)
			r.waitAll(hardGrace, append(aux, src, sink)...)
			return err
		}
		aux = append(aux, r.start("admin", auxCtx, srv.serve))
	}
	d.life.Store(StateStarting)

	var err error
	select {
	case <-ctx.Done():
		err = d.stopGracefully(r, o, src, sink, aux, stopSource, stopSink, stopAux)
	case err = <-r.failed:
		d.logger.Error("stopping after a failure", "err", err)
		stopSource()
		stopSink()
		deadline := time.NewTimer(d.cfg.Shutdown.Deadline)
		defer deadline.Stop()
		if pending := r.waitUntil(deadline.C, o.hard, src, sink); len(pending) > 0 {
			d.logger.Error("components did not stop in time after the failure", "pending", strings.Join(pending, ","))
		}
	case <-o.hard:
		err = fmt.Errorf("%w: signalled before a graceful stop began", ErrHardStop)
	}
	d.life.Store(StateStopped)
	if errors.Is(err, ErrHardStop) || err != nil {
		cancelRun(err)
		if pending := r.waitAll(hardGrace, append(aux, src, sink)...); len(pending) > 0 && errors.Is(err, ErrHardStop) {
			err = fmt.Errorf("%w (still running: %s)", err, strings.Join(pending, ", "))
		}
	}
	return err
}

// stopGracefully runs steps 1-5 of Run's stop order.
func (d *Daemon) stopGracefully(r *runner, o runOptions, src, sink *stage, aux []*stage, stopSource, stopSink, stopAux func()) error {
	began := time.Now()
	deadline := time.NewTimer(d.cfg.Shutdown.Deadline)
	defer deadline.Stop()
	d.life.Store(StateStopping)
	d.logger.Info("stopping: graceful", "deadline", d.cfg.Shutdown.Deadline)

	step := func(what string, stop func(), stages ...*stage) error {
		t := time.Now()
		stop()
		pending := r.waitUntil(deadline.C, o.hard, stages...)
		select {
		case err := <-r.failed: // a stage still running failed meanwhile
			return fmt.Errorf("during the graceful stop (%s): %w", what, err)
		default:
		}
		if len(pending) == 0 {
			d.logger.Info("stop step done", "step", what, "took", time.Since(t).Round(time.Millisecond))
			return nil
		}
		reason := "the shutdown deadline passed"
		if isClosed(o.hard) {
			reason = "a second signal came"
		}
		return fmt.Errorf("%w: %s during %q after %s", ErrHardStop, reason, what, time.Since(began).Round(time.Millisecond))
	}
	if err := step("stop intake, acknowledge flushed position", stopSource, src); err != nil {
		return err
	}
	d.logger.Info("source stopped", "flushed_lsn", formatLSN(d.reader.Stats().Flushed.Load()))
	if err := step("drain: commit consumed changes", stopSink, sink); err != nil {
		return err
	}
	if err := step("stop monitor and admin listener", stopAux, aux...); err != nil {
		return err
	}
	d.logger.Info("cdcd stopped cleanly", "took", time.Since(began).Round(time.Millisecond))
	return nil
}

func isClosed(c <-chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// runner runs the daemon's stages and collects their failures.
type runner struct {
	failed chan error // failures of stages whose context was live
	logger *slog.Logger
}

// stage is one running component.
type stage struct {
	name string
	done chan struct{}
}

// start runs fn(ctx) in a goroutine. A return while ctx is live (an error,
// or nil from a component that should run until cancelled) is a failure,
// sent to r.failed; a return after ctx was cancelled is the stage stopping.
func (r *runner) start(name string, ctx context.Context, fn func(context.Context) error) *stage {
	s := &stage{name: name, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		err := fn(ctx)
		if ctx.Err() != nil {
			if err != nil && !errors.Is(err, context.Canceled) {
				// Stopping cut something short (e.g. a final commit): what
				// was acknowledged is durable, and a restart resumes.
				r.logger.Warn("stopped with an error", "stage", name, "err", err,
					"what_to_do", "nothing: the next start resumes from what is durable")
			}
			return
		}
		if err == nil {
			err = fmt.Errorf("%s: stopped unexpectedly", name)
		}
		select {
		case r.failed <- err:
		default:
		}
	}()
	return s
}

// waitUntil waits for stages until a timer or hard fires; it returns the
// names of those still running.
func (r *runner) waitUntil(timer <-chan time.Time, hard <-chan struct{}, stages ...*stage) []string {
	for _, s := range stages {
		select {
		case <-s.done:
		case <-timer:
			return pendingNames(stages)
		case <-hard:
			return pendingNames(stages)
		}
	}
	return nil
}

// waitAll waits at most d for stages; it returns the names still running.
func (r *runner) waitAll(d time.Duration, stages ...*stage) []string {
	t := time.NewTimer(d)
	defer t.Stop()
	return r.waitUntil(t.C, nil, stages...)
}

func pendingNames(stages []*stage) []string {
	var out []string
	for _, s := range stages {
		select {
		case <-s.done:
		default:
			out = append(out, s.name)
		}
	}
	return out
}

// intake is the Emitter the source writes to: it appends through the
// emitter under Run's context (so a soft stop lets an append in flight
// finish) and counts each table's changes.
type intake struct {
	next source.Emitter
	ctx  atomic.Pointer[context.Context] // Run's context; nil before Run
	// tables counts per "schema.table"; the map is fixed at New.
	tables map[string]*intakeCounts
	// gate, when set (tests), is called before each batch and may block.
	gate atomic.Pointer[func(context.Context) error]
	// loading is set once a snapshot row arrives.
	loading atomic.Bool
	// emitted numbers the batches SubmitTracked emitted whole, when the
	// next Emitter does not track its pipeline (source.Tracker).
	emitted atomic.Uint64
}

// intakeCounts are one table's counters.
type intakeCounts struct {
	Events       atomic.Int64 // changes appended (streaming and snapshot)
	SnapshotRows atomic.Int64 // of which rows of the initial load
}

var (
	_ source.Emitter   = (*intake)(nil)
	_ source.Pipeliner = (*intake)(nil)
	_ source.Tracker   = (*intake)(nil)
	_ source.Preparer  = (*intake)(nil)

	_ source.CatchUpNotifier = (*intake)(nil)
)

func newIntake(next source.Emitter, tables []string) *intake {
	in := &intake{next: next, tables: make(map[string]*intakeCounts, len(tables))}
	for _, t := range tables {
		in.tables[t] = &intakeCounts{}
	}
	return in
}

// Emit appends batch; it returns once all of it is durable.
func (in *intake) Emit(ctx context.Context, batch []source.Change) error {
	if p := in.ctx.Load(); p != nil {
		ctx = *p
	}
	if g := in.gate.Load(); g != nil {
		if err := (*g)(ctx); err != nil {
			return err
		}
	}
	if err := in.next.Emit(ctx, batch); err != nil {
		return err
	}
	in.count(batch)
	return nil
}

// Submit hands batch to the emitter's pipeline (an initial load keeps
// reading while the log syncs); Sync waits for it. Without a pipelining
// emitter it is Emit.
func (in *intake) Submit(ctx context.Context, batch []source.Change) error {
	p, ok := in.next.(source.Pipeliner)
	if !ok {
		return in.Emit(ctx, batch)
	}
	if c := in.ctx.Load(); c != nil {
		ctx = *c
	}
	if g := in.gate.Load(); g != nil {
		if err := (*g)(ctx); err != nil {
			return err
		}
	}
	if err := p.Submit(ctx, batch); err != nil {
		return err
	}
	in.count(batch) // counted when queued: the counters show progress, not durability
	return nil
}

// SubmitTracked is Submit returning the batch's number (source.Tracker).
// Without an emitter that tracks its pipeline it is Emit: the batch is
// durable when it returns, and Durable says so.
func (in *intake) SubmitTracked(ctx context.Context, batch []source.Change) (uint64, error) {
	t, ok := in.next.(source.Tracker)
	if !ok {
		if err := in.Emit(ctx, batch); err != nil {
			return 0, err
		}
		return in.emitted.Add(1), nil
	}
	if c := in.ctx.Load(); c != nil {
		ctx = *c
	}
	if g := in.gate.Load(); g != nil {
		if err := (*g)(ctx); err != nil {
			return 0, err
		}
	}
	n, err := t.SubmitTracked(ctx, batch)
	if err != nil {
		return 0, err
	}
	in.count(batch)
	return n, nil
}

// Durable returns the number of the newest batch durable with all before
// it, and the first error of any (source.Tracker).
func (in *intake) Durable() (uint64, error) {
	if t, ok := in.next.(source.Tracker); ok {
		return t.Durable()
	}
	return in.emitted.Load(), nil
}

// CaughtUp passes the source's catch-up on (source.CatchUpNotifier).
func (in *intake) CaughtUp() {
	if n, ok := in.next.(source.CatchUpNotifier); ok {
		n.CaughtUp()
	}
}

// Prepare hands batch to the emitter to encode ahead (source.Preparer).
func (in *intake) Prepare(batch []source.Change) {
	if p, ok := in.next.(source.Preparer); ok {
		p.Prepare(batch)
	}
}

// Sync returns once every submitted batch is durable.
func (in *intake) Sync(ctx context.Context) error {
	p, ok := in.next.(source.Pipeliner)
	if !ok {
		return nil
	}
	if c := in.ctx.Load(); c != nil {
		ctx = *c
	}
	return p.Sync(ctx)
}

// count adds batch to its tables' counters. A run of changes of one table
// version is looked up once and added at once: a load's batch is one run,
// and a name a change (a string built each time) and two atomic adds a
// change were a load's cost for a gauge.
func (in *intake) count(batch []source.Change) {
	var (
		cur          *intakeCounts
		curTbl       *schema.Table
		events, rows int64
	)
	flush := func() {
		if cur != nil {
			cur.Events.Add(events)
			if rows > 0 {
				cur.SnapshotRows.Add(rows)
				in.loading.Store(true)
			}
		}
		events, rows = 0, 0
	}
	for i := range batch {
		c := &batch[i]
		if c.Fault != nil && c.Before == nil && c.After == nil {
			continue // stops a table; no change of it
		}
		if c.Table != curTbl {
			flush()
			cur, curTbl = in.tables[c.Table.QualifiedName()], c.Table
		}
		events++
		if c.Snapshot {
			rows++
		}
	}
	flush()
}
