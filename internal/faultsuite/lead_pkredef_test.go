package faultsuite

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
)

// TestPrimaryKeyRedefined: the source's primary key redefined to more
// columns (DROP CONSTRAINT … ADD PRIMARY KEY (id, r)) lets rows the old
// key merged coexist at the source. The registry refuses the new key (and
// then the value) schema; once both are accepted, an upsert mirror still
// keyed by id alone would merge those rows: the table must pause naming
// the re-snapshot, and after `cdcd snapshot --replace` mirror the source
// under its new key.
func TestPrimaryKeyRedefined(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE t (id int PRIMARY KEY, r int NOT NULL DEFAULT 1, v text);
			INSERT INTO t SELECT g, 1, 'v' || g FROM generate_series(1, 300) g;`,
		Tables: []string{"public.t"},
	})
	p.start()
	p.waitCaughtUp()
	p.exec(`ALTER TABLE t DROP CONSTRAINT t_pkey, ADD PRIMARY KEY (id, r)`)
	p.exec(`INSERT INTO t VALUES (1, 2, 'second'), (2, 2, 'second')`)
	p.exec(`UPDATE t SET v = 'after' WHERE id = 3`)
	accepted := map[string]bool{}
	deadline := time.Now().Add(4 * time.Minute)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("the table did not end in a pause naming the re-snapshot; log:\n%s", p.logTail(6000))
		}
		ts := p.waitPaused("public.t")
		t.Logf("paused: %s / %s", ts.PausedReason, ts.PausedFix)
		if strings.Contains(ts.PausedFix, "snapshot") && strings.Contains(ts.PausedFix, "--replace") {
			break
		}
		subj := ""
		for _, f := range strings.Fields(ts.PausedFix) {
			if strings.HasSuffix(f, "-key") || strings.HasSuffix(f, "-value") {
				subj = f
				break
			}
		}
		if subj == "" {
			t.Fatalf("a pause names neither a subject to accept nor the re-snapshot: %s / %s", ts.PausedReason, ts.PausedFix)
		}
		if accepted[subj] {
			t.Fatalf("the pause names %s again after it was accepted: %s / %s", subj, ts.PausedReason, ts.PausedFix)
		}
		out, errOut, code := p.cdcd("schema", "accept", "-c", p.CfgPath, subj)
		if code != 0 {
			t.Fatalf("cdcd schema accept %s: exit %d: %s %s", subj, code, out, errOut)
		}
		accepted[subj] = true
		p.waitFor("table resumed or paused anew", 2*time.Minute, func(st daemon.Status) bool {
			for _, tb := range st.Tables {
				if tb.Source == "public.t" || tb.Table == "cdc.t" {
					return !tb.Paused || tb.PausedFix != ts.PausedFix
				}
			}
			return false
		})
	}
	out, errOut, code := p.cdcd("snapshot", "-c", p.CfgPath, "--replace", "public.t")
	if code != 0 {
		t.Fatalf("cdcd snapshot --replace: exit %d: %s %s", code, out, errOut)
	}
	p.waitFor("table unpaused", 3*time.Minute, func(st daemon.Status) bool {
		for _, tb := range st.Tables {
			if tb.Source == "public.t" || tb.Table == "cdc.t" {
				return !tb.Paused
			}
		}
		return false
	})
	p.exec(`UPDATE t SET v = 'later' WHERE id = 1 AND r = 2`)
	p.waitCaughtUp()
	p.waitMirror("public.t", 3*time.Minute)
	cat := p.openCatalog()
	defer closeCatalog(cat)
	sc := p.icebergTable(cat, "public.t").Schema()
	var ids []string
	for _, id := range sc.IdentifierFieldIDs {
		f, _ := sc.FindFieldByID(id)
		ids = append(ids, f.Name)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"id", "r"}) {
		t.Errorf("the mirror's identifier fields are %v, want the new primary key [id r]", ids)
	}
}
