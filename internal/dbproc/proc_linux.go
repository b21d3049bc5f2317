package dbproc

import "syscall"

// sysProcAttr starts the child as acct in a process group of its own, with
// deathSig sent to it by the kernel when the thread that started it exits
// (Start keeps that thread locked until the child is gone).
func sysProcAttr(acct Account, deathSig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: deathSig, Credential: acct.Cred}
}
