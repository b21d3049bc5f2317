package dbproc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPU times from /proc (Linux), for benchmarks: a database server's, a
// daemon's.

// clockTick is the unit of /proc/PID/stat's CPU fields (USER_HZ, 100 on
// every Linux this runs on).
const clockTick = 10 * time.Millisecond

// procStat is what is read of a process from /proc/PID/stat.
type procStat struct {
	ppid        int
	cpu         time.Duration // utime + stime
	childrenCPU time.Duration // cutime + cstime: of its waited-for children
	minflt      int64         // minor page faults
}

// statFields returns the fields of /proc/PID/stat after the command name,
// which may hold spaces and parentheses: "pid (comm) state ...".
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("dbproc: /proc/%d/stat: no command name", pid)
	}
	return strings.Fields(s[i+1:]), nil
}

// readStat parses /proc/PID/stat (statFields).
func readStat(pid int) (procStat, error) {
	f, err := statFields(pid)
	if err != nil {
		return procStat{}, err
	}
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("dbproc: /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	num := func(n int) int64 { v, _ := strconv.ParseInt(f[n-3], 10, 64); return v }
	return procStat{
		ppid:        int(num(4)),
		cpu:         time.Duration(num(14)+num(15)) * clockTick,
		childrenCPU: time.Duration(num(16)+num(17)) * clockTick,
		minflt:      num(10),
	}, nil
}

// Usage is what a process has used so far, from /proc.
type Usage struct {
	CPU         time.Duration // user + system, all its threads
	ChildrenCPU time.Duration // its reaped children's
	MinorFaults int64
}

func (st procStat) usage() Usage {
	return Usage{CPU: st.cpu, ChildrenCPU: st.childrenCPU, MinorFaults: st.minflt}
}

// ProcessUsage is a process's Usage.
func ProcessUsage(pid int) (Usage, error) {
	st, err := readStat(pid)
	return st.usage(), err
}

// Children is the Usage of each live child of parent, by PID (a
// PostgreSQL server's processes: the postmaster's children).
func Children(parent int) (map[int]Usage, error) {
	all, err := allStats()
	if err != nil {
		return nil, err
	}
	out := map[int]Usage{}
	for pid, st := range all {
		if st.ppid == parent {
			out[pid] = st.usage()
		}
	}
	return out, nil
}

// allStats reads every live process's stat, by PID; a process that exits
// while /proc is read is left out.
func allStats() (map[int]procStat, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[int]procStat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil {
			out[pid] = st
		}
	}
	return out, nil
}

// ProcessCPU is a process's user+system CPU time so far (all its threads).
func ProcessCPU(pid int) (time.Duration, error) {
	st, err := readStat(pid)
	return st.cpu, err
}

// TreeCPU is the CPU time of a process tree: the root's own and its
// reaped children's, plus every live descendant's. PostgreSQL's backends
// are the postmaster's children, so this is the server's CPU time; a
// backend that exits moves its time into the postmaster's children's time
// when it is reaped, so the sum is read again if a child was reaped while
// /proc was being read.
func TreeCPU(root int) (time.Duration, error) {
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
	all, err := allStats()
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, st := range all {
		for p := st.ppid; p > 1; p = all[p].ppid {
			if p == root {
				total += st.cpu
				break
			}
		}
	}
	return total, nil
}

// ParentPID is a process's parent's PID (a PostgreSQL backend's: the
// postmaster).
func ParentPID(pid int) (int, error) {
	st, err := readStat(pid)
	return st.ppid, err
}
