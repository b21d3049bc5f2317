package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of /proc/PID/stat's CPU fields (USER_HZ, 100 on
// every Linux this runs on).
const clockTick = 10 * time.Millisecond

// procStat is what the benchmark reads of a process from /proc/PID/stat.
type procStat struct {
	ppid        int
	cpu         time.Duration // utime + stime
	childrenCPU time.Duration // cutime + cstime: of its waited-for children
}

// readStat parses /proc/PID/stat; the command name may hold spaces and
// parentheses, so the fields are counted from its closing parenthesis.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("bench: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("bench: /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	num := func(n int) int64 { v, _ := strconv.ParseInt(f[n-3], 10, 64); return v }
	return procStat{
		ppid:        int(num(4)),
		cpu:         time.Duration(num(14)+num(15)) * clockTick,
		childrenCPU: time.Duration(num(16)+num(17)) * clockTick,
	}, nil
}

// processCPU is a process's user+system CPU time so far (all its threads).
func processCPU(pid int) (time.Duration, error) {
	st, err := readStat(pid)
	return st.cpu, err
}

// treeCPU is the CPU time of a process tree: the root's own and its
// reaped children's, plus every live descendant's. PostgreSQL's backends
// are the postmaster's children, so this is the server's CPU time; a
// backend that exits moves its time into the postmaster's children's time
// when it is reaped, so the sum is read again if a child was reaped while
// /proc was being read.
func treeCPU(root int) (time.Duration, error) {
	for try := 0; ; try++ {
		before, err := readStat(root)
		if err != nil {
			return 0, err
		}
		live, err := descendantsCPU(root)
		if err != nil {
			return 0, err
		}
		after, err := readStat(root)
		if err != nil {
			return 0, err
		}
		if after.childrenCPU == before.childrenCPU || try == 10 {
			return after.cpu + after.childrenCPU + live, nil
		}
	}
}

// descendantsCPU sums the CPU time of root's live descendants.
func descendantsCPU(root int) (time.Duration, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	parent := map[int]int{}
	cpu := map[int]time.Duration{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil {
			continue // exited meanwhile
		}
		parent[pid], cpu[pid] = st.ppid, st.cpu
	}
	var total time.Duration
	for pid, c := range cpu {
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == root {
				total += c
				break
			}
		}
	}
	return total, nil
}

// peakRSS is a process's VmHWM in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			f := strings.Fields(l)
			if len(f) < 2 {
				break
			}
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("bench: no VmHWM for process %d", pid)
}

// resetPeakRSS starts a new VmHWM for a process (its peak so far is forgotten).
func resetPeakRSS(pid int) {
	_ = os.WriteFile(filepath.Join("/proc", strconv.Itoa(pid), "clear_refs"), []byte("5"), 0)
}

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
