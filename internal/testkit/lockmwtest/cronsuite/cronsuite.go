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
// each subtest, so the store is shared and the subtests run in parallel
// (most of their time is spent waiting for fires).
func Run(t *testing.T, env Env) {
	t.Helper()
	if env.NewLocker == nil || env.Lose == nil || env.TTL <= 0 {
		t.Fatalf("cronsuite: Env needs NewLocker, TTL and Lose")
	}
	t.Run("Singleton", func(t *testing.T) {
		runParallel(t, env,
			subtest{"OneRunPerFire", testOneRunPerFire},
			subtest{"LongJobKeepsLock", testLongJobKeepsLock},
			subtest{"LostLockCancelsJob", testLostLockCancelsJob},
			subtest{"PanicReleasesLock", testPanicReleasesLock},
			subtest{"MinHold", testMinHold},
			subtest{"DerivedMinHold", testDerivedMinHold},
			subtest{"MaxHold", testMaxHold},
			subtest{"RejectsBadInput", testRejectsBadInput})
	})
	t.Run("Scheduler", func(t *testing.T) {
		runParallel(t, env,
			subtest{"Claims", testClaims},
			subtest{"OneRunPerFire", testSchedulerOneRunPerFire},
			subtest{"Prefixes", testSchedulerPrefixes},
			subtest{"RunStillGoing", testSchedulerRunStillGoing})
	})
}

// subtest is one of Run's subtests.
type subtest struct {
	name string
	run  func(*testing.T, Env)
}

// runParallel runs each subtest of tests as a parallel subtest of t.
func runParallel(t *testing.T, env Env, tests ...subtest) {
	for _, st := range tests {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			st.run(t, env)
		})
	}
}
