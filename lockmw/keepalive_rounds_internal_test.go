// This file tests that taking and releasing locks does not wake the
// renewal scheduler's loop (rearm).

package lockmw

import (
	"context"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// TestAcquisitionsDoNotWakeTheRenewalLoop: a Locker taking and releasing a
// free lock 100 times, each held far less than a third of its TTL, leaves
// the renewal loop asleep: each acquisition sets the loop's timer for the
// lease's first renewal (rearm), and the lease is gone before it fires.
// Waking the loop at each acquisition (as before rearm) ran it 18 times in
// the 100 locks here.
func TestAcquisitionsDoNotWakeTheRenewalLoop(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	l, err := New(srv.Client(t), WithTTL(time.Minute), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	// The loop's first round runs when it starts.
	for deadline := time.Now().Add(5 * time.Second); l.keeper.rounds.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the renewal loop did not start")
		}
	}
	// On one processor the loop runs only while this goroutine waits for
	// Redis: a wake-up sent by an acquisition runs during its release's
	// round trip, when the lease is gone, and the loop then sets its timer
	// an hour ahead, for the next acquisition to wake it again.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	before := l.keeper.rounds.Load()
	const locks = 100
	for range locks {
		lease, err := l.Acquire(ctx, "rounds")
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Give a wake-up sent by the last acquisitions time to run.
	time.Sleep(50 * time.Millisecond)
	if n := l.keeper.rounds.Load() - before; n > 2 {
		t.Fatalf("the renewal loop ran %d rounds during %d locks held for microseconds of a %v TTL, want at most 2", n, locks, time.Minute)
	}
}
