//go:build !linux

package lockmw_test

import "time"

// monoNanos reads the wall clock, in nanoseconds: like CLOCK_MONOTONIC on
// Linux it is one clock for every process of the machine, but a step of the
// system clock during a run would show in the figures of
// BenchmarkContendedProcesses.
func monoNanos() int64 { return time.Now().UnixNano() }
