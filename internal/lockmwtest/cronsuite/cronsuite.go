// Package cronsuite holds cronlock's behaviour tests that hold on any
// store a *lockmw.Locker runs on: Singleton's protocol (one run per fire,
// long jobs, lost locks, panics, MinHold and MaxHold, bad input) and the
// Scheduler's claims, kept in the Locker's own store (NewScheduler with no
// Redis client). Each store's tests call Run with an Env of that store;
// faults only one store has (Redis down, stalls) stay in its own tests.
package cronsuite

import (
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
)

// Env is one store deployment under test.
type Env struct {
	// NewLocker returns a new Locker on its own client to the store, as
	// one instance of a service would have, closed at cleanup. opts are
	// lockmw's; the Locker keeps the default prefix.
	NewLocker func(t testing.TB, opts ...lockmw.Option) *lockmw.Locker
	// TTL is a short lease TTL the store accepts, for the tests of the
	// watchdog and of lost locks.
	TTL time.Duration
	// Lose deletes the lock key (default prefix) from the store behind its
	// holder's back, so that the holder's next renewal finds it lost.
	Lose func(t testing.TB, key string)
}

// Run runs every subtest against env. Lock and job names are unique to
// each subtest, so the store may be shared.
func Run(t *testing.T, env Env) {
	t.Helper()
	if env.NewLocker == nil || env.Lose == nil || env.TTL <= 0 {
		t.Fatalf("cronsuite: Env needs NewLocker, TTL and Lose")
	}
	t.Run("Singleton", func(t *testing.T) {
		t.Run("OneRunPerFire", func(t *testing.T) { testOneRunPerFire(t, env) })
		t.Run("LongJobKeepsLock", func(t *testing.T) { testLongJobKeepsLock(t, env) })
		t.Run("LostLockCancelsJob", func(t *testing.T) { testLostLockCancelsJob(t, env) })
		t.Run("PanicReleasesLock", func(t *testing.T) { testPanicReleasesLock(t, env) })
		t.Run("MinHold", func(t *testing.T) { testMinHold(t, env) })
		t.Run("DerivedMinHold", func(t *testing.T) { testDerivedMinHold(t, env) })
		t.Run("MaxHold", func(t *testing.T) { testMaxHold(t, env) })
		t.Run("RejectsBadInput", func(t *testing.T) { testRejectsBadInput(t, env) })
	})
	t.Run("Scheduler", func(t *testing.T) {
		t.Run("Claims", func(t *testing.T) { testClaims(t, env) })
		t.Run("OneRunPerFire", func(t *testing.T) { testSchedulerOneRunPerFire(t, env) })
		t.Run("RunStillGoing", func(t *testing.T) { testSchedulerRunStillGoing(t, env) })
	})
}
