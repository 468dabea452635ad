package lockmw

import (
	"context"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is the policy of a store whose releases hand the lock over
// (store.Granter: New's store): what the Locker's generic parts call. How
// its waiters wait is in wait_default.go, wait_fair.go and lineup.go, in
// the rooms of rooms.go (where grantPolicy is declared); how its releases
// hand the lock on, in release.go and handover.go.

func (l *grantPolicy) acquire(a *acquisition, wait bool) (*Lease, error) {
	return l.waitGranter(a, wait)
}

func (l *grantPolicy) release(ctx context.Context, lock store.Key, token string, fair bool) (ownership, error) {
	return l.releaseTokenOf(ctx, lock, token, fair)
}

func (l *grantPolicy) releaseLease(ctx context.Context, s *Lease, deadline time.Time) (ownership, error) {
	return l.releaseGranted(ctx, s, deadline)
}

// released drops a fair lease, or a fair waiter's lock given back, from
// its room.
func (l *grantPolicy) released(lock store.Key, token string, fair bool) {
	if fair {
		l.forgetFair(lock, token)
	}
}
