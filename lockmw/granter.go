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

// grantPolicy is the policy of a Granter.
type grantPolicy struct{ l *Locker }

func (p grantPolicy) acquire(a *acquisition, wait bool) (*Lease, error) {
	return p.l.waitGranter(a, wait)
}

func (p grantPolicy) release(ctx context.Context, lock store.Key, token string, fair bool) (ownership, error) {
	return p.l.releaseTokenOf(ctx, lock, token, fair)
}

func (p grantPolicy) releaseLease(ctx context.Context, s *Lease, deadline time.Time) (ownership, error) {
	return p.l.releaseGranted(ctx, s, deadline)
}

// released drops a fair lease, or a fair waiter's lock given back, from
// its room.
func (p grantPolicy) released(lock store.Key, token string, fair bool) {
	if fair {
		p.l.forgetFair(lock, token)
	}
}

func (p grantPolicy) holdEnded(lock store.Key) { p.l.holdEnded(lock) }
