package lockmw

import (
	"context"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is the policy of a store whose releases hand the lock over
// (store.Granter: New's store): how its waiters wait (wait_default.go,
// wait_fair.go, lineup.go, in the rooms of rooms.go), and how its releases
// hand the lock on (release.go, handover.go).

// grantPolicy is the policy of a Granter: the Locker's generic parts, and
// the rooms where its waiters wait.
type grantPolicy struct {
	*Locker
	*roomSet
	waits store.Granter // the Locker's store
}

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
