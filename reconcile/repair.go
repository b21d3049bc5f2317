package reconcile

import (
	"context"
	"fmt"
)

// maxRepairKeys is how many differing keys a repair re-reads by a
// condition on their keys; a table with more is re-snapshotted whole.
const maxRepairKeys = 10000

// RepairPlan is how a table's differences are repaired through the
// incremental snapshot engine (cdcd snapshot): the rows of the keys that
// differ are read again (Where: a condition on exactly those keys), or the
// whole table replaces the mirror's rows (Replace, the fix of a mirror
// that cannot be trusted) when some key is in the mirror only or live more
// than once there — a snapshot reads rows that exist, so only a reset
// marker removes what the source does not hold — or too many keys differ.
type RepairPlan struct {
	// Table is the source's table.
	Table string `json:"table"`
	// Where selects the keys that differ; "" with Replace.
	Where   string `json:"where,omitempty"`
	Replace bool   `json:"replace,omitempty"`
	// Keys is how many keys were found different.
	Keys int `json:"keys"`
	// Why says why the whole table is re-snapshotted.
	Why string `json:"why,omitempty"`

	keys []retryKey
}

// Repair is the plan that repairs what r found; nil when nothing differs.
func (r *TableReport) Repair() *RepairPlan { return r.plan }

// differ notes a key found different for the repair; extra: the mirror
// holds it and the source does not, or holds it more than once.
func (tr *tableRun) differ(k, lit Key, extra bool) {
	tr.extra = tr.extra || extra
	if id := k.id(); !tr.differs[id] && len(tr.differs) <= maxRepairKeys {
		tr.differs[id] = true
		tr.diff = append(tr.diff, retryKey{key: k, lit: lit})
	}
}

// repairPlan is the plan for the keys found different; nil when none.
func (tr *tableRun) repairPlan() *RepairPlan {
	n := tr.rep.MissingCount + tr.rep.ExtraCount + tr.rep.DifferCount + tr.rep.DuplicateCount
	if n == 0 {
		return nil
	}
	p := &RepairPlan{Table: tr.t.Name, Keys: n}
	switch {
	case tr.extra:
		p.Replace, p.Why = true, "keys in Iceberg that the source does not hold (or live more than once) go only with the table's contents replaced"
	case len(tr.diff) > maxRepairKeys:
		p.Replace, p.Why = true, fmt.Sprintf("more than %d keys differ", maxRepairKeys)
	default:
		lits := make([]Key, len(tr.diff))
		for i, k := range tr.diff {
			lits[i] = k.lit
		}
		p.Where, p.keys = tr.r.src.KeyCondition(tr.t, lits), tr.diff
	}
	return p
}

// Recheck compares again what a repair re-read: the plan's keys, or the
// whole table after a Replace.
func (r *Reconciler) Recheck(ctx context.Context, spec Spec, plan *RepairPlan) (*TableReport, error) {
	if plan.Replace {
		return r.Table(ctx, spec)
	}
	return r.table(ctx, spec, func(tr *tableRun, ctx context.Context) error {
		tr.retry = plan.keys
		return tr.retries(ctx)
	})
}
