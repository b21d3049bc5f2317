package daemon

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/dbproc"
)

// The server's CPU by process kind, for a phase (CDCD_BENCH_PG_PROCS=1):
// which of PostgreSQL's processes spent a phase's CPU (backends by what
// their title says they were doing at the phase's end, the walsender, the
// autovacuum workers, the auxiliary processes, and backends that exited
// during the phase), and the minor page faults of the server's live
// processes and of this one. On this machine (a paravirtualized guest) a
// minor fault cost about 13 CPU-µs: a fresh backend whose index scans touch
// every page of shared_buffers pays for each page once (BENCHMARKS.md,
// "The incremental benchmark like for like (lead, session 21)").

// pgProcsOn says whether CDCD_BENCH_PG_PROCS=1 asks for the breakdown
// (otherwise nothing is read).
func pgProcsOn() bool { return os.Getenv("CDCD_BENCH_PG_PROCS") == "1" }

// pgProcs is what each live process under a postmaster has used so far,
// by PID, with its title's kind, and what its reaped children used.
type pgProcs struct {
	reaped time.Duration
	procs  map[int]pgProc
}

type pgProc struct {
	kind string
	dbproc.Usage
}

// readPGProcs reads the postmaster's children (nothing unless pgProcsOn).
func readPGProcs(postmaster int) pgProcs {
	out := pgProcs{procs: map[int]pgProc{}}
	if !pgProcsOn() {
		return out
	}
	if u, err := dbproc.ProcessUsage(postmaster); err == nil {
		out.reaped = u.ChildrenCPU
	}
	children, _ := dbproc.Children(postmaster)
	for pid, u := range children {
		title, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out.procs[pid] = pgProc{kind: procKind(string(title)), Usage: u}
	}
	return out
}

// procKind is a PostgreSQL process title without its addresses and
// numbers: "walsender postgres START_REPLICATION", "postgres postgres COPY",
// "checkpointer", "autovacuum worker".
func procKind(title string) string {
	title = strings.TrimRight(strings.ReplaceAll(title, "\x00", " "), " ")
	title = strings.TrimPrefix(title, "postgres: ")
	var keep []string
	for _, w := range strings.Fields(title) {
		if strings.ContainsAny(w, "(0123456789[") {
			continue
		}
		keep = append(keep, w)
	}
	return strings.Join(keep, " ")
}

// logPGProcs logs, on one line, where the server's CPU went between two
// readings, a CPU-µs a row by kind (processes that exited meanwhile, by
// the kind last seen, or "reaped").
func logPGProcs(tb testing.TB, phase string, rows int, before, after pgProcs) {
	if !pgProcsOn() {
		return
	}
	by := map[string]time.Duration{}
	var flt int64
	for pid, p := range after.procs {
		by[p.kind] += p.CPU - before.procs[pid].CPU
		flt += p.MinorFaults - before.procs[pid].MinorFaults
	}
	var gone time.Duration
	for pid, p := range before.procs {
		if _, ok := after.procs[pid]; !ok {
			gone -= p.CPU
		}
	}
	by["reaped (exited during the phase)"] += after.reaped - before.reaped + gone
	kinds := make([]string, 0, len(by))
	for k := range by {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Compare(by[b], by[a]) })
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		if by[k] == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.3f", k, by[k].Seconds()*1e6/float64(rows)))
	}
	self, _ := dbproc.ProcessUsage(os.Getpid())
	tb.Logf("%s: PostgreSQL CPU-µs/row by process: %s; live processes' minor faults %d; cdcd's so far %d", phase, strings.Join(parts, "; "), flt, self.MinorFaults)
}
