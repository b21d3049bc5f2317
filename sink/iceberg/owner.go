package iceberg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// PropOwnerEpoch is the owner epoch of a shared table (Config.Shared) on
// every commit of its owner (frozen: doc.go, "Formats").
const PropOwnerEpoch = "cdcd.owner-epoch"

// Owners of shared tables.
//
// Sink processes share tables through the log's consumer group (daemon/
// kafka_owners.go): the group gives each table to one process at a time.
// The group alone cannot stop a stale owner, a process that stalled past
// its session and still believes it owns a table, from committing after
// the next owner started. The table itself fences it:
//
//   - a process that gets a table claims it before reading it: one commit
//     that changes no rows and carries an epoch one above the newest in
//     the table's history, made only if the table did not move meanwhile
//     (the catalog's check of the parent snapshot);
//   - every later commit of that process carries its epoch and is made only
//     while no greater epoch is in the table (checked against the table the
//     commit builds on, which the catalog again requires to be current).
//
// So once the next owner's claim lands, a stale owner's commit either
// conflicts with it or finds it on reload, and is refused with ErrFenced.
// The epoch comes from the table, not from the group's generation: a
// group that empties may be removed and count its generations from 1
// again, while the table's epochs only grow.

// claim makes this process the owner of t's table: it commits a snapshot
// carrying a new epoch and returns that epoch. A table that does not exist
// yet takes epoch 1 without a commit (its first commit creates it); one
// whose offsets belong to another pipeline is not claimed (its load
// pauses it). A claim that loses to another claim returns ErrFenced.
func (s *Sink) claim(ctx context.Context, t TableConfig, logger *slog.Logger) (int64, error) {
	b := newBackoff(s.cfg.CommitBudget)
	for {
		epoch, err := s.claimOnce(ctx, t, logger)
		if err == nil || classify(err) == ErrPaused {
			return epoch, err
		}
		if ctx.Err() != nil || b.spent() {
			return 0, fmt.Errorf("iceberg: claim %s: %w", identString(t.Ident), err)
		}
		logger.Warn("claiming the table failed; retrying", "err", err)
		if err := b.wait(ctx); err != nil {
			return 0, err
		}
	}
}

// claimOnce makes one claim; a conflict or an unknown outcome is settled
// by reloading the table.
func (s *Sink) claimOnce(ctx context.Context, t TableConfig, logger *slog.Logger) (int64, error) {
	tbl, err := s.cat.LoadTable(ctx, t.Ident)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	if owner := offsetsPipeline(tbl); owner != "" && owner != s.cfg.Pipeline {
		return 1, nil
	}
	seen := ownerEpoch(tbl)
	epoch := seen + 1
	id := newCommitID()
	props := map[string]string{PropPipeline: s.cfg.Pipeline, PropCommitID: id, PropRows: "0",
		PropOwnerEpoch: strconv.FormatInt(epoch, 10)}
	if err = checkCatalog(s.cat); err == nil {
		tx := tbl.NewTransaction()
		if err = tx.AddFiles(ctx, nil, props, false); err == nil {
			_, err = tx.Commit(ctx)
		}
	}
	if err != nil {
		fresh, lerr := s.cat.LoadTable(ctx, t.Ident)
		if lerr != nil {
			return 0, fmt.Errorf("%w (and reloading the table: %v)", err, lerr)
		}
		switch {
		case hasCommit(fresh, id):
		case ownerEpoch(fresh) > seen:
			return 0, fencedError(t.Ident, 0, ownerEpoch(fresh))
		default:
			return 0, err
		}
	}
	logger.Info("claimed the table: this process owns it now", "owner_epoch", epoch, "previous_epoch", seen)
	return epoch, nil
}

// fence refuses a commit that would build on tbl when tbl holds a newer
// owner's epoch than this writer's, and adds the writer's epoch to props
// (nil: check only). A writer of a table that is not shared passes.
func (w *tableWriter) fence(tbl *table.Table, props map[string]string) error {
	if w.epoch == 0 || tbl == nil {
		return nil
	}
	if theirs := ownerEpoch(tbl); theirs > w.epoch {
		return fencedError(w.cfg.Ident, w.epoch, theirs)
	}
	if props != nil {
		props[PropOwnerEpoch] = strconv.FormatInt(w.epoch, 10)
	}
	return nil
}

func fencedError(ident table.Identifier, mine, theirs int64) error {
	what := fmt.Sprintf("another sink process owns the table now: its owner epoch %d is in the table", theirs)
	if mine > 0 {
		what = fmt.Sprintf("commit refused: this process owned the table with owner epoch %d, but epoch %d is in the table (the sink group gave the table to another process, e.g. after this one stalled past its session)", mine, theirs)
	}
	return &PauseError{Table: identString(ident), What: what, Err: ErrFenced,
		Fix: "nothing, if another sink process runs the table (its /status lists it); this process takes a table again only when the group gives it one. If processes keep losing tables, raise log.kafka.session_timeout"}
}

// ownerEpoch is the newest owner epoch in tbl's current ancestry (0 if
// none). Epochs only grow along it, so the first one found is the
// greatest.
func ownerEpoch(tbl *table.Table) int64 {
	meta := tbl.Metadata()
	for snap := tbl.CurrentSnapshot(); snap != nil; {
		if snap.Summary != nil {
			if v, ok := snap.Summary.Properties[PropOwnerEpoch]; ok {
				e, _ := strconv.ParseInt(v, 10, 64)
				return e
			}
		}
		if snap.ParentSnapshotID == nil {
			break
		}
		snap = meta.SnapshotByID(*snap.ParentSnapshotID)
	}
	return 0
}

// offsetsPipeline is the pipeline of the newest snapshot carrying offsets
// in tbl's ancestry ("" if none).
func offsetsPipeline(tbl *table.Table) string {
	if snap, _ := newestOffsets(tbl); snap != nil {
		return snap.Summary.Properties[PropPipeline]
	}
	return ""
}
