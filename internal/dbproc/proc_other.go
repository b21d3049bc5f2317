//go:build unix && !linux

package dbproc

import "syscall"

// sysProcAttr starts the child as acct in a process group of its own. Only
// Linux has a parent-death signal, so deathSig is unused here: a server
// outlives a test binary that was killed, and its directory is swept once
// it has stopped.
func sysProcAttr(acct Account, _ syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: acct.Cred}
}
