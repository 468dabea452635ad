//go:build unix && !linux

package servertest

import "syscall"

// sysProcAttr puts a run in its own process group, so that signals reach
// it and any child it forks. Pdeathsig is Linux-only: elsewhere a test
// binary that crashes can leave servers behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// canObserveStop is false where there is no /proc to watch a stop take
// effect in: there Pause returns once SIGSTOP is sent.
const canObserveStop = false

// groupStopped cannot tell here; it reports true.
func groupStopped(int) (bool, error) { return true, nil }
