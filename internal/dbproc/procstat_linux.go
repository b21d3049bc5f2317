package dbproc

import (
	"os"
	"strconv"
)

// startTime returns a process's start time in clock ticks since boot (field
// 22 of /proc/PID/stat), or 0 when it cannot be read.
func startTime(pid int) uint64 {
	if pid <= 0 {
		return 0
	}
	rest, err := statFields(pid)
	// rest[0] is field 3 (state); field 22 is rest[19].
	if err != nil || len(rest) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(rest[19], 10, 64)
	return v
}

// deadOrZombie reports whether /proc shows pid gone, or a zombie.
func deadOrZombie(pid int) bool {
	rest, err := statFields(pid)
	if err != nil {
		return os.IsNotExist(err)
	}
	return len(rest) > 0 && rest[0] == "Z"
}
