//go:build unix && !linux

package zktest

import "syscall"

// sysProcAttr puts the server in its own process group, so that signals
// reach it and any child it forks. Pdeathsig is Linux-only: elsewhere a test
// binary that crashes can leave servers behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// canObserveStop is false where there is no /proc to watch a stop take
// effect in: there Pause returns once SIGSTOP is sent.
const canObserveStop = false

// processStopped cannot tell here; it reports true.
func processStopped(int) (bool, error) { return true, nil }
