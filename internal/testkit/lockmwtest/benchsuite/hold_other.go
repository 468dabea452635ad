//go:build !linux

package benchsuite

import "time"

// This file holds a lock for its time where nanosleep is not at hand.

// Hold blocks the calling goroutine for d (time.Sleep: the Go runtime's
// timers, which may wake it late; see hold_linux.go).
func Hold(d time.Duration) { time.Sleep(d) }
