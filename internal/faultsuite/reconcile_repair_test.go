package faultsuite

import (
	"fmt"
	"testing"

	"github.com/cdcd-dev/cdcd/reconcile"
)

// requireRepaired requires a --repair report of a table: a difference was
// found and repaired by plan kind replace (else by a condition on the
// keys), and the comparison after the repair found it equal.
func requireRepaired(t *testing.T, r *reconcile.TableReport, code int, keys int, replace bool) {
	t.Helper()
	if r == nil || r.Repaired == nil {
		t.Fatalf("no repair in the report: %+v", r)
	}
	rp := r.Repaired
	t.Logf("repair: %d keys, replace %v (%s), where %.200q, error %q", rp.Keys, rp.Replace, rp.Why, rp.Where, rp.Error)
	if r.Equal() || rp.Keys != keys || rp.Replace != replace || rp.Replace == (rp.Where != "") {
		t.Errorf("repair plan: %d keys, replace %v, where %q; want %d keys, replace %v", rp.Keys, rp.Replace, rp.Where, keys, replace)
	}
	if rp.Error != "" || rp.After == nil {
		t.Fatalf("the repair failed: %s", rp.Error)
	}
	a := rp.After
	t.Logf("after the repair: rows %d, missing %d, extra %d, differing %d, unchecked %d", a.Rows, a.MissingCount, a.ExtraCount, a.DifferCount, a.Unchecked)
	if !a.Equal() || a.Unchecked != 0 {
		t.Errorf("after the repair: %v (unchecked %d)", a.Differences(), a.Unchecked)
	}
	if !replace && a.Rows != int64(keys)-int64(r.ExtraCount) {
		t.Errorf("after the repair %d keys compared, want the %d repaired", a.Rows, keys)
	}
	if code != 0 {
		t.Errorf("exit %d after a repair that left the table equal, want 0", code)
	}
}

// TestReconcileRepair: cdcd reconcile --repair makes a damaged mirror equal
// to its source again through the running daemon's incremental snapshot:
// rows missing in the mirror (a deletion vector; an insert the slot never
// saw) and values differing (a rewritten file; an unseen update) by a
// snapshot of exactly those keys; a row the mirror holds and the source
// does not (an extra row; an unseen delete) by a replacing snapshot. After
// each, the whole table equals the source (internal/mirror) and a plain
// reconcile says so.
func TestReconcileRepair(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{DDL: fmt.Sprintf(ledgerDDL, "ledger", 3000), Tables: []string{"public.ledger"}})
	p.start()
	p.waitCaughtUp()
	p.stop()
	p.damageRewrite("public.ledger", 700, "owner", "it's \\ tampered")
	p.damageDV("public.ledger", 5, 2999)
	p.bypass("UPDATE ledger SET balance = balance + 1 WHERE id = 1200", "INSERT INTO ledger VALUES (50000, 'unseen', 1, now())")
	p.start()
	p.waitCaughtUp()

	reps, code := p.reconcileReport("--repair")
	requireRepaired(t, reps["public.ledger"], code, 5, false)
	p.waitCaughtUp()
	p.requireMirror()

	p.stop()
	p.damageAppend("public.ledger", 100001, "ghost")
	p.bypass("DELETE FROM ledger WHERE id = 1300", "UPDATE ledger SET owner = 'x' WHERE id = 10")
	p.start()
	p.waitCaughtUp()
	reps, code = p.reconcileReport("--repair")
	requireRepaired(t, reps["public.ledger"], code, 3, true)
	p.waitCaughtUp()
	p.requireMirror()

	reps, code = p.reconcileReport()
	if r := reps["public.ledger"]; code != 0 || r == nil || !r.Equal() || r.Rows != 3000 {
		t.Errorf("a reconcile after the repairs: exit %d, %+v; want equal, 3000 rows", code, r)
	}
}
