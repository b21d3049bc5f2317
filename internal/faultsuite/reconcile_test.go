package faultsuite

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/reconcile"
)

// The reconcile's tests (issue 21): cdcd reconcile on pipelines of the
// real binary, with the mirror or the source changed behind the
// pipeline's back.

// reconcileTypesDDL has a column of every kind docs/types.md maps, with
// their edge values.
const reconcileTypesDDL = `
CREATE TYPE mood AS ENUM ('sad', 'ok');
CREATE TYPE pair AS (a int, b text);
CREATE TABLE typed (
  id bigint PRIMARY KEY, i2 smallint, i4 integer, b boolean, f4 real, f8 double precision,
  n numeric(12,3), nu numeric, m money, t text, vc varchar(10), ch char(5), qc "char", by bytea, u uuid,
  js json, jb jsonb, d date, tm time, ttz timetz, ts timestamp, tstz timestamptz, iv interval,
  ai int[], at text[], aa int[][], e mood, c pair, inet inet, rng int4range, o oid, x xml, bt bit(4));
INSERT INTO typed VALUES
 (1, 1, 2, true, 1.5, 0.1, 12.345, 'NaN', 1.23, 'héllo, "x"', 'a,b', 'ab', 'z', '\x00ff', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  '{"a": 1,  "b":[1,2]}', '{"b": 2, "a": 1}', '2024-02-29', '23:59:59.999999', '13:45:00.123+05:30', '2024-01-01 00:00:00.000001',
  '1999-12-31 23:59:59+00', '1 year 2 mons 3 days 04:05:06.789', '{1,NULL,3}', '{"a,b",NULL,"N"}', '{{1,2},{3,4}}', 'ok', '(1,"x,y")',
  '10.0.0.1', '[1,10)', 42, '<a>x</a>', B'1010'),
 (2, -32768, -2147483648, false, 'NaN', '-0', -0.5, '123.4500', -0.01, '', '', '', '', '', '00000000-0000-0000-0000-000000000000',
  '[]', '[]', 'infinity', '00:00:00', '00:00:00+00', '-infinity', 'infinity', '-1 day', '{}', '{}', '{}', 'sad', NULL,
  '::1', 'empty', 0, '', B'0000'),
 (3, NULL, NULL, NULL, 'Infinity', 1e300, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, '0044-03-15 BC', '24:00:00', NULL, '0001-01-01 00:00:00 BC', NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL);
CREATE TABLE plain (id int PRIMARY KEY, v text);
INSERT INTO plain SELECT g, 'v' || g FROM generate_series(1, 3000) g;
`

// reconcileReport runs cdcd reconcile --json on the pipeline's config and
// returns its report and exit status.
func (p *pipeline) reconcileReport(args ...string) (map[string]*reconcile.TableReport, int) {
	p.t.Helper()
	out, stderr, code := p.cdcd(append([]string{"reconcile", "-c", p.CfgPath, "--json"}, args...)...)
	var doc struct {
		Equal  bool                     `json:"equal"`
		Tables []*reconcile.TableReport `json:"tables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		p.t.Fatalf("cdcd reconcile (exit %d): %v\nstdout: %s\nstderr: %s", code, err, out, stderr)
	}
	reps := map[string]*reconcile.TableReport{}
	for _, r := range doc.Tables {
		reps[r.Table] = r
		p.t.Logf("reconcile %s: rows %d, ranges %d (+%d by key), missing %d, extra %d, differing %d, unchecked %d, %s, %.0f rows/s%s",
			r.Table, r.Rows, r.Ranges, r.Drilled, r.MissingCount, r.ExtraCount, r.DifferCount, r.Unchecked, r.Duration, r.RowsPerSecond, errSuffix(r.Error))
	}
	return reps, code
}

func errSuffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// TestReconcileEqualTypes: a mirror of every type, equal to its source, is
// reported equal (exit 0), every row compared, while the daemon runs and
// after it stopped.
func TestReconcileEqualTypes(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{DDL: reconcileTypesDDL, Tables: []string{"public.typed", "public.plain"}})
	p.start()
	p.waitCaughtUp()
	p.requireMirror("public.plain") // internal/mirror cannot read infinite dates
	check := func(when string) {
		reps, code := p.reconcileReport()
		if code != 0 {
			t.Fatalf("%s: exit %d, want 0", when, code)
		}
		for name, rows := range map[string]int64{"public.typed": 3, "public.plain": 3000} {
			r := reps[name]
			if r == nil || !r.Equal() || r.Rows != rows || r.Unchecked != 0 || len(r.Skipped) != 0 {
				t.Fatalf("%s: %s: %+v, want equal with %d rows, every column compared", when, name, r, rows)
			}
		}
	}
	check("daemon running")
	p.stop()
	check("daemon stopped")
	if !strings.Contains(p.logTail(1<<20), "cdcd stopped cleanly") {
		t.Log("note: the daemon's stop was not clean")
	}
}

// TestReconcileUnderWorkload: no false difference while two writers insert,
// update (large values too), delete and change keys, with the daemon
// running, killed with SIGKILL (the changes then wait in the slot) and
// started again; in the end, with the writers stopped, every row is
// compared and none is unchecked.
func TestReconcileUnderWorkload(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{DDL: fmt.Sprintf(accounts, "acct", 3000), Tables: []string{"public.acct"},
		Extra: "reconcile: {chunk_rows: 400, block_rows: 20}\n"})
	p.start()
	p.waitCaughtUp()
	w1 := startWriter(t, p.DSN, "acct", 3500, 1)
	w2 := startWriter(t, p.DSN, "acct", 3500, 2)
	requireNoDiff := func(when string) *reconcile.TableReport {
		t.Helper()
		reps, code := p.reconcileReport()
		r := reps["public.acct"]
		if code != 0 || r == nil || !r.Equal() {
			t.Fatalf("%s: exit %d, a difference reported while the mirror follows the source: %v", when, code, r.Differences())
		}
		return r
	}
	for i := range 2 {
		requireNoDiff(fmt.Sprintf("running, round %d", i))
	}
	p.kill()
	requireNoDiff("killed")
	p.start()
	requireNoDiff("started again")
	n1, err1 := w1.stop()
	n2, err2 := w2.stop()
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	t.Logf("%d writes", n1+n2)
	p.waitCaughtUp()
	r := requireNoDiff("writers stopped")
	var rows int64
	if err := p.Conn.QueryRow(p.ctx, "SELECT count(*) FROM acct").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if r.Rows != rows || r.Unchecked != 0 {
		t.Errorf("after the writers stopped: %d rows compared (%d unchecked), the source has %d", r.Rows, r.Unchecked, rows)
	}
	p.requireMirror()
}

// TestReconcileParallelRanges: the table is read in ranges by two source
// connections at once (reconcile.parallel 2, eight ranges of 750 rows),
// each read settled by its own positions and Gap. A difference in the
// second half (a row deleted from the mirror, a change behind the
// pipeline's back) is found with its key and column, while a writer
// changes the first half's rows through the pipeline: each of its changes
// races a read of one lane or the other and must be left out or compared
// again, never reported. Then, the writer stopped, every row is compared.
func TestReconcileParallelRanges(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{DDL: fmt.Sprintf(accounts, "acct", 6000), Tables: []string{"public.acct"},
		Extra: "reconcile: {chunk_rows: 200, block_rows: 20, parallel: 2}\n"})
	p.start()
	p.waitCaughtUp()
	p.stop()
	p.damageDV("public.acct", 5900)
	p.bypass("UPDATE acct SET v = 'unseen' WHERE id = 4500")
	p.start()
	p.waitCaughtUp()
	wantMissing, wantDiffer := []string{"5900"}, map[string][]string{"4500": {"v"}}
	check := func(when string) *reconcile.TableReport {
		t.Helper()
		reps, code := p.reconcileReport()
		r := reps["public.acct"]
		if code != 4 {
			t.Errorf("%s: exit %d, want 4", when, code)
		}
		requireFound(t, r, wantMissing, nil, wantDiffer)
		if r.Parallel != 2 {
			t.Errorf("%s: %d ranges read at once, want 2", when, r.Parallel)
		}
		return r
	}
	w := startWriter(t, p.DSN, "acct", 3000, 7)
	for i := range 3 {
		check(fmt.Sprintf("writer running, round %d", i))
	}
	n, err := w.stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d writes", n)
	p.waitCaughtUp()
	r := check("writer stopped")
	var rows int64
	if err := p.Conn.QueryRow(p.ctx, "SELECT count(*) FROM acct").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if r.Rows != rows || r.Unchecked != 0 {
		t.Errorf("after the writer stopped: %d rows compared (%d unchecked), the source has %d", r.Rows, r.Unchecked, rows)
	}
}
