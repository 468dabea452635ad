package redisstore

import (
	"context"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is the policy of New's store, whose releases hand the lock over
// (grantPolicy, a store.Policy): what the Locker's generic parts call. How
// its waiters wait is in wait_default.go, wait_fair.go and lineup.go, in
// the rooms of rooms.go (where grantPolicy is declared); how its releases
// hand the lock on, in release.go and handover.go.

// Policy returns the grant policy for the Locker h, and sends the store's
// events (releases and grants) to it. The Locker calls it once, before its
// first request.
func (b *Store) Policy(h store.Host) store.Policy {
	if b.holderInfo != "" {
		h = describingHost{Host: h, c: b.client, lock: b.names.lockKey, info: b.holderInfo}
	}
	p := &grantPolicy{h: h, roomSet: newRoomSet(), waits: b}
	b.events = Events{Released: p.releaseHeard, Granted: p.granted}
	return p
}

// Acquire waits as waitGranter says.
func (l *grantPolicy) Acquire(a *store.Acquisition, wait bool) (store.Lease, error) {
	return l.waitGranter(a, wait)
}

// Release releases token's holding, handing the lock on (releaseTokenOf).
func (l *grantPolicy) Release(ctx context.Context, lock store.Key, token string, fair bool) (store.Ownership, error) {
	return l.releaseTokenOf(ctx, lock, token, fair, false)
}

// ReleaseLease releases s, early to a waiter of this Locker where it may
// (releaseGranted).
func (l *grantPolicy) ReleaseLease(ctx context.Context, s store.Held, deadline time.Time) (store.Ownership, error) {
	return l.releaseGranted(ctx, s, deadline)
}

// Released drops a fair lease, or a fair waiter's lock given back, from
// its room.
func (l *grantPolicy) Released(lock store.Key, token string, fair bool) {
	if fair {
		l.forgetFair(lock, token)
	}
}
