package faultsuite

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/reconcile"
)

// reconcileFromDaemon starts a reconcile in the daemon (POST
// /cdcd/reconcile) and waits for its report of the table.
func (p *pipeline) reconcileFromDaemon(body, iceberg string) *reconcile.TableReport {
	p.t.Helper()
	if code, out := p.adminRequest("POST", "/cdcd/reconcile", nil, body); code != 202 {
		p.t.Fatalf("POST /cdcd/reconcile %s: %d %s", body, code, out)
	}
	var rep *reconcile.TableReport
	p.child.WaitUntil(p.t, "the daemon's reconcile", 3*time.Minute, func() bool {
		code, out := p.adminRequest("GET", "/cdcd/reconcile", nil, "")
		var st daemon.ReconcileState
		if code != 200 || json.Unmarshal([]byte(out), &st) != nil || st.Running {
			return false
		}
		if st.Error != "" {
			p.t.Fatalf("the daemon's reconcile failed: %s", st.Error)
		}
		for _, r := range st.Tables {
			if r.Iceberg == iceberg {
				rep = r
			}
		}
		return rep != nil
	})
	return rep
}

// requireMetric requires a line of the daemon's /metrics.
func (p *pipeline) requireMetric(line string) {
	p.t.Helper()
	if _, out := p.adminRequest("GET", "/metrics", nil, ""); !strings.Contains(out, line+"\n") {
		p.t.Errorf("/metrics has no line %q", line)
	}
}

// TestReconcileFromDaemon: POST /cdcd/reconcile runs a reconcile in the
// daemon; a difference shows in GET /cdcd/reconcile, in the metrics and as
// the CdcdReconcileDiffers alert; a second POST with repair mends it, and
// the alert resolves.
func TestReconcileFromDaemon(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{DDL: fmt.Sprintf(ledgerDDL, "ledger", 2000), Tables: []string{"public.ledger"}})
	p.start()
	p.waitCaughtUp()
	p.stop()
	p.damageDV("public.ledger", 7)
	p.bypass("UPDATE ledger SET owner = 'changed' WHERE id = 42")
	p.start()
	p.waitCaughtUp()

	rep := p.reconcileFromDaemon(`{"tables": ["public.ledger"]}`, "cdc.ledger")
	requireFound(t, rep, []string{"7"}, nil, map[string][]string{"42": {"owner"}})
	p.requireAlert(daemon.AlertReconcileDiffers, "cdc.ledger", "2 keys", "--repair public.ledger")
	p.requireMetric(`cdcd_reconcile_equal{table="cdc.ledger"} 0`)
	p.requireMetric(`cdcd_reconcile_keys{kind="missing",table="cdc.ledger"} 1`)
	p.requireMetric(`cdcd_reconcile_keys{kind="differing",table="cdc.ledger"} 1`)
	p.requireMetric(`cdcd_reconcile_runs_total{result="differs"} 1`)

	rep = p.reconcileFromDaemon(`{"repair": true}`, "cdc.ledger")
	if rep.Repaired == nil || rep.Repaired.After == nil || !rep.EqualNow() || rep.Repaired.Replace {
		t.Fatalf("the daemon's repair: %+v", rep.Repaired)
	}
	p.waitFor("the alert resolved", time.Minute, func(st daemon.Status) bool {
		for _, a := range st.Alerts {
			if a.Name == daemon.AlertReconcileDiffers {
				return false
			}
		}
		return true
	})
	p.requireMetric(`cdcd_reconcile_equal{table="cdc.ledger"} 1`)
	p.requireMetric(`cdcd_reconcile_rows{table="cdc.ledger"} 2000`)
	p.waitCaughtUp()
	p.requireMirror()
}

// TestReconcileSchedule: with reconcile.interval set, the daemon compares
// its tables on its own, every interval: the first scheduled round finds
// the damage (GET /cdcd/reconcile, the metrics, the CdcdReconcileDiffers
// alert); after a repair the next scheduled round finds the table equal and
// the alert stays resolved.
func TestReconcileSchedule(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{DDL: fmt.Sprintf(ledgerDDL, "ledger", 2000), Tables: []string{"public.ledger"},
		Extra: "reconcile: {interval: 1m}\n"})
	p.start()
	p.waitCaughtUp()
	p.stop()
	p.damageDV("public.ledger", 11)
	p.start()
	p.waitCaughtUp()
	began := time.Now()
	// No POST: the schedule's round.
	var rep *reconcile.TableReport
	p.child.WaitUntil(t, "the scheduled reconcile", 3*time.Minute, func() bool {
		code, out := p.adminRequest("GET", "/cdcd/reconcile", nil, "")
		var st daemon.ReconcileState
		if code != 200 || json.Unmarshal([]byte(out), &st) != nil || st.Running || len(st.Tables) == 0 {
			return false
		}
		rep = st.Tables[0]
		return true
	})
	if took := time.Since(began); took < 30*time.Second {
		t.Errorf("the first scheduled reconcile came %s after the start; want about the interval (1m)", took)
	}
	requireFound(t, rep, []string{"11"}, nil, nil)
	p.requireAlert(daemon.AlertReconcileDiffers, "cdc.ledger", "1 keys", "--repair public.ledger")
	p.requireMetric(`cdcd_reconcile_equal{table="cdc.ledger"} 0`)
	p.requireMetric(`cdcd_reconcile_runs_total{result="differs"} 1`)

	if rep = p.reconcileFromDaemon(`{"repair": true}`, "cdc.ledger"); !rep.EqualNow() {
		t.Fatalf("the daemon's repair: %+v", rep.Repaired)
	}
	p.requireMetric(`cdcd_reconcile_runs_total{result="equal"} 1`)
	p.child.WaitUntil(t, "the next scheduled reconcile", 3*time.Minute, func() bool {
		_, out := p.adminRequest("GET", "/metrics", nil, "")
		return strings.Contains(out, `cdcd_reconcile_runs_total{result="equal"} 2`+"\n")
	})
	p.requireMetric(`cdcd_reconcile_equal{table="cdc.ledger"} 1`)
	p.requireMetric(`cdcd_reconcile_keys{kind="missing",table="cdc.ledger"} 0`)
	for _, a := range p.status().Alerts {
		if a.Name == daemon.AlertReconcileDiffers {
			t.Errorf("alert %s still fires after a scheduled round found the table equal: %s", a.Name, a.Summary)
		}
	}
}
