//go:build unix && !linux

package etcdtest

import "syscall"

// sysProcAttr puts etcd in its own process group, so that signals
// reach it and any child it forks. Pdeathsig is Linux-only: elsewhere a test
// binary that crashes can leave servers behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
