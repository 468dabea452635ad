package etcdtest

import "syscall"

// sysProcAttr puts etcd in its own process group, so that signals
// reach it and any child it forks, and has the kernel SIGKILL it if the
// thread that started it (and so, in practice, the test binary) dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
