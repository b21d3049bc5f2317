package daemon

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The server's CPU by process kind, for a phase (CDCD_BENCH_PG_PROCS=1):
// which of PostgreSQL's processes spent a phase's CPU (backends by what
// their title says they were doing at the phase's end, the walsender, the
// autovacuum workers, the auxiliary processes, and backends that exited
// during the phase), and the minor page faults of the server's live
// processes and of this one. On this machine (a paravirtualized guest) a
// minor fault cost about 25 µs: a fresh backend whose index scans touch
// every page of shared_buffers pays for each page once (BENCHMARKS.md,
// "The incremental benchmark like for like (lead, session 21)").

// pgProcs is the CPU so far of each live process under a postmaster, by
// PID, with its title's kind.
type pgProcs struct {
	reaped time.Duration // the postmaster's reaped children's
	procs  map[int]pgProc
}

type pgProc struct {
	kind   string
	cpu    time.Duration
	minflt int64
}

// readPGProcs reads /proc for the postmaster's children.
func readPGProcs(postmaster int) pgProcs {
	out := pgProcs{procs: map[int]pgProc{}}
	if f := statFields(postmaster); len(f) > 14 {
		out.reaped = ticks(f[13]) + ticks(f[14])
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := statFields(pid)
		if len(f) < 13 || f[1] != strconv.Itoa(postmaster) {
			continue
		}
		title, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		mf, _ := strconv.ParseInt(f[7], 10, 64)
		out.procs[pid] = pgProc{kind: procKind(string(title)), cpu: ticks(f[11]) + ticks(f[12]), minflt: mf}
	}
	return out
}

// statFields is /proc/PID/stat's fields after the command name (state
// first).
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

func ticks(s string) time.Duration {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Duration(n) * 10 * time.Millisecond
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
	if os.Getenv("CDCD_BENCH_PG_PROCS") != "1" {
		return
	}
	by := map[string]time.Duration{}
	var flt int64
	for pid, p := range after.procs {
		by[p.kind] += p.cpu - before.procs[pid].cpu
		flt += p.minflt - before.procs[pid].minflt
	}
	var gone time.Duration
	for pid, p := range before.procs {
		if _, ok := after.procs[pid]; !ok {
			gone -= p.cpu
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
	self := statFields(os.Getpid())
	mf, _ := strconv.ParseInt(self[7], 10, 64)
	tb.Logf("%s: PostgreSQL CPU-µs/row by process: %s; live processes' minor faults %d; cdcd's so far %d", phase, strings.Join(parts, "; "), flt, mf)
}
