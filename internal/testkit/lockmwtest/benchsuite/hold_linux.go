//go:build linux

package benchsuite

import (
	"syscall"
	"time"
)

// This file holds a lock for its time by the kernel's clock (see Hold).

// Hold blocks the calling goroutine for d, timed by the kernel
// (nanosleep), not by the Go runtime's timers: a time.Sleep(2ms) woken
// late by the runtime's timer handling, by 0.1 to 0.9 ms depending on
// what the process did just before it, made each kind hold the lock for
// a different time (2.89 ms against 2.50 ms, lockmw on ZooKeeper against
// zk.Lock in one process), which util, acq/s and wait p99 then counted
// as the lock's. Hold(2ms) lasts 2.05–2.1 ms whatever the kind.
func Hold(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
