//go:build unix && !linux

package dbproc

// startTime is 0 (unknown) without /proc: a live process with a recorded
// PID then counts as its owner, even if the PID was reused.
func startTime(int) uint64 { return 0 }

// deadOrZombie is false without /proc: Alive relies on kill(pid, 0) alone.
func deadOrZombie(int) bool { return false }
