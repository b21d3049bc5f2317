package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cdcd-dev/cdcd/reconcile"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// A reconcile's repair (cdcd reconcile --repair, reconcile.repair): the
// keys found different are read again through the running daemon's
// incremental snapshot engine — by a condition on exactly those keys, or
// the whole table replacing the mirror's rows (reconcile.RepairPlan says
// when) — and, once the snapshot is done, compared again.

// RepairSnapshots runs a repair's snapshots: the daemon's own engine, or
// a running daemon's admin API (the CLI's).
type RepairSnapshots interface {
	// Snapshot queues an incremental snapshot (POST /cdcd/snapshot).
	Snapshot(ctx context.Context, req SnapshotRequest) error
	// Progress lists the snapshots queued, running and finished (GET
	// /cdcd/snapshots).
	Progress(ctx context.Context) ([]snapshot.Progress, error)
}

// defaultRepairTimeout bounds the wait for a repair's snapshot.
const defaultRepairTimeout = time.Hour

// repairTable repairs what rep found in spec's table and compares again.
func repairTable(ctx context.Context, rc *reconcile.Reconciler, spec reconcile.Spec, rep *reconcile.TableReport, opts ReconcileOptions, logger *slog.Logger) {
	plan := rep.Repair()
	if plan == nil || opts.Repair == nil {
		return
	}
	out := &reconcile.Repaired{RepairPlan: *plan}
	rep.Repaired = out
	logger.Warn("reconcile: repairing a table through an incremental snapshot", "table", spec.Iceberg,
		"keys", plan.Keys, "replace", plan.Replace, "why", plan.Why)
	if err := runRepairSnapshot(ctx, opts.Repair, plan, opts.RepairTimeout); err != nil {
		out.Error = err.Error()
		logger.Error("reconcile: repair failed", "table", spec.Iceberg, "err", err)
		return
	}
	after, err := rc.Recheck(ctx, spec, plan)
	if err != nil {
		out.Error = fmt.Sprintf("the repaired keys could not be compared again: %v", err)
		return
	}
	out.After = after
	logger.Info("reconcile: repaired keys compared again", "table", spec.Iceberg, "equal", after.Equal(), "rows", after.Rows,
		"missing", after.MissingCount, "extra", after.ExtraCount, "differing", after.DifferCount, "unchecked", after.Unchecked)
}

// runRepairSnapshot queues the plan's snapshot and waits until it is done
// (its rows are in the log).
func runRepairSnapshot(ctx context.Context, snaps RepairSnapshots, plan *reconcile.RepairPlan, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = defaultRepairTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	queued := time.Now().Add(-time.Second)
	req := SnapshotRequest{Tables: []string{plan.Table}, Where: plan.Where, Replace: plan.Replace}
	if err := snaps.Snapshot(ctx, req); err != nil {
		return fmt.Errorf("queue the snapshot of %s: %w", plan.Table, err)
	}
	id := ""
	for {
		list, err := snaps.Progress(ctx)
		if err != nil {
			return err
		}
		p, ok := repairRun(list, plan, id, queued)
		switch {
		case ok && p.Finished.IsZero():
			id = p.ID
		case ok && p.Error != "":
			return fmt.Errorf("the snapshot of %s failed: %s", plan.Table, p.Error)
		case ok:
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("the snapshot of %s did not finish within %s (cdcd snapshot status shows it; is it paused?)", plan.Table, timeout)
			}
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// repairRun finds the repair's snapshot run in a progress list: by id once
// known, else the table's run that is not finished, else its newest run
// queued since the repair began with the plan's condition.
func repairRun(list []snapshot.Progress, plan *reconcile.RepairPlan, id string, since time.Time) (snapshot.Progress, bool) {
	var found snapshot.Progress
	ok := false
	for _, p := range list {
		switch {
		case id != "":
			if p.ID == id {
				found, ok = p, true
			}
		case p.Table != plan.Table:
		case p.Finished.IsZero():
			return p, true
		case p.Where == plan.Where && p.Replace == plan.Replace && !p.Started.Before(since):
			found, ok = p, true
		}
	}
	return found, ok
}

// engineSnapshots runs a repair's snapshots on the daemon's own engine.
type engineSnapshots struct{ d *Daemon }

func (s engineSnapshots) Snapshot(ctx context.Context, req SnapshotRequest) error {
	eng := s.d.snapshots()
	if eng == nil {
		return errors.New("this source has no incremental snapshots")
	}
	reqs, err := s.d.snapshotRequests(req)
	if err != nil {
		return err
	}
	for i := range reqs {
		reqs[i].Origin = "reconcile"
	}
	return eng.Submit(ctx, reqs...)
}

func (s engineSnapshots) Progress(context.Context) ([]snapshot.Progress, error) {
	eng := s.d.snapshots()
	if eng == nil {
		return nil, errors.New("this source has no incremental snapshots")
	}
	return eng.Progress(), nil
}
