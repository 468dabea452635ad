package lockmw_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// With the watchdog held up, as on a host where timers fire late, a lease's
// deadline passes while its context is live: Valid reads the clock, reports
// false, and ends the lease as lost at once.
func TestLeaseValidWhenItsTimerIsLate(t *testing.T) {
	srv := redistest.Start(t)
	stall := lockmwtest.NewWatchdogStall()
	l := lockmwtest.NewLocker(t, srv, lockmw.WithTTL(time.Second), lockmw.WithLogger(stall.Logger()))
	lease, err := l.TryAcquire(context.Background(), "late-timer")
	if err != nil {
		t.Fatal(err)
	}
	if !lease.Valid() {
		t.Fatal("a fresh lease is not Valid")
	}
	stall.Stall(t, l)
	lockmwtest.Eventually(t, 5*time.Second, "the lease deadline passing", func() bool {
		return time.Now().After(lease.Deadline())
	})
	if err := lease.Context().Err(); err != nil {
		t.Fatalf("the lease context ended though the watchdog stalled: %v", context.Cause(lease.Context()))
	}
	if lease.Valid() {
		t.Fatal("Valid past the lease deadline")
	}
	if r := lostReason(t, lease.Context()); r != lockmw.LostDeadline {
		t.Fatalf("lost with reason %s, want %s", r, lockmw.LostDeadline)
	}
}
