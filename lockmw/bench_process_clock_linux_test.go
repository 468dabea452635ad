//go:build linux

package lockmw_test

import (
	"syscall"
	"unsafe"
)

// monoNanos reads CLOCK_MONOTONIC, in nanoseconds. Unlike the monotonic
// reading of time.Now, which counts from the start of the process, it is one
// clock for every process of the machine, so readings from different
// processes compare as they are (see BenchmarkContendedProcesses).
func monoNanos() int64 {
	var ts syscall.Timespec
	const clockMonotonic = 1 // CLOCK_MONOTONIC in <linux/time.h>
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic("clock_gettime(CLOCK_MONOTONIC): " + errno.Error())
	}
	return ts.Nano()
}
