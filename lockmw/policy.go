package lockmw

import (
	"context"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is the seam between the Locker and the way its store's waiters
// wait and its locks are handed on: a policy, chosen once per Locker from
// what the store offers (newLocker). Acquire, a lease's release, Close and
// the cleaner call the policy; only the policy's own files know how a store
// waits:
//
//   - storePolicy (wait.go): attempts, with backoff, the store's release
//     notifications (store.Notifier) or its queue (store.Queue), whose
//     hand-overs it reports; every store but Redis's;
//   - wakePolicy (wait_wake.go): a queue of waiters woken one at a time
//     (store.WakeQueue: NewRedlock's store);
//   - grantPolicy (granter.go): rooms of this Locker's waiters, releases
//     that hand the lock over in their own step, a fair queue and early
//     hand-overs (store.Granter: New's store).
//
// Whatever the policy, a lease becomes live only in one of the ways of
// doc.go ("Safety: how a lease becomes live"), and every one ends in
// newLease (newlease.go).
type policy interface {
	// acquire runs the attempts and waits of one Acquire (wait) or
	// TryAcquire call.
	acquire(a *acquisition, wait bool) (*Lease, error)
	// release ends token's holding of lock (a lease's, acquired with Fair
	// when fair, or a lock given back), handing the lock on where the
	// store does; it reports what the store found.
	release(ctx context.Context, lock store.Key, token string, fair bool) (ownership, error)
	// releaseLease releases s, valid until deadline: as release does, or
	// by handing the lock to a waiter of this Locker before the store
	// confirms it.
	releaseLease(ctx context.Context, s *Lease, deadline time.Time) (ownership, error)
	// released runs after the release of token's holding of lock (a
	// lease's, or a give-back), fair as for release.
	released(lock store.Key, token string, fair bool)
	// holdEnded runs once a lease of lock that held it until its release
	// no longer counts as holding it (renewScheduler.holds).
	holdEnded(lock store.Key)
}

// acquisition is one Acquire or TryAcquire call under way: what each step
// of its wait needs, made once by Locker.wait.
type acquisition struct {
	opCtx       context.Context // carries the acquire span; requests are made under it
	leaseParent context.Context // the caller's context: the lease context derives from it
	key         string
	lock        store.Key
	cfg         *acquireConfig
	giveUp      time.Time // when a bounded wait (WithWait) ends; zero: unbounded
}

// newPolicy returns the policy for the Locker's store, found by type
// assertion.
func newPolicy(l *Locker) policy {
	switch s := l.st.(type) {
	case store.Granter:
		return &grantPolicy{Locker: l, roomSet: newRoomSet(), waits: s}
	case store.WakeQueue:
		return &wakePolicy{Locker: l, roomSet: newRoomSet(), wakes: s}
	}
	return storePolicy{l}
}
