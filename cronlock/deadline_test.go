package cronlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockmw/lockmw/cronlock"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/cronsuite"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// A run that outlasted its lease's deadline is recorded lost, not ok, also
// while the watchdog's timer that ends the lease context has not fired:
// cronlock checks the deadline itself.
func TestRunPastTheLeaseDeadlineIsLost(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 2 * time.Second
	stall := lockmwtest.NewWatchdogStall()
	locker := newLocker(t, srv, lockmw.WithTTL(ttl), lockmw.WithLogger(stall.Logger()))
	logs := &cronsuite.RecordLogger{}
	wrap := cronlock.Singleton(locker, "report", cronlock.WithLogger(logs))

	wrap(cronlock.Func(func(ctx context.Context) error {
		// The watchdog stalls, so the lease's deadline passes (every
		// renewal left before the stall) while its timer does not fire.
		stall.Stall(t, locker)
		stalled := time.Now()
		eventually(t, 2*ttl, "the lease deadline passing", func() bool { return time.Since(stalled) > ttl })
		if ctx.Err() != nil {
			t.Fatalf("the job context ended though the watchdog stalled: %v", context.Cause(ctx))
		}
		return nil
	})).Run()

	if n := logs.Count(true, "lock lost while the job ran"); n != 1 {
		t.Fatalf("%d error logs of a lost run, want 1; logs: %v", n, logs.Find(false, ""))
	}
}
