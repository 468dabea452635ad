package lockmw

import (
	"context"
	"fmt"
	"time"
)

// This file turns a lock that Redis set for a token into a Lease held by
// the watchdog: the last step of every way a lease becomes live (doc.go,
// "Safety: how a lease becomes live"). Its validity counts from validFrom,
// a time no later than the moment Redis set the lock for the token; a lock
// whose validity is already over when the answer comes is given back,
// never returned; a lease handed over early is held pending until its
// hand-over is settled (see handover).

// newLease makes the lease for a lock Redis set for token no earlier than
// validFrom, and hands it to the watchdog. A lease whose validity is already
// over (Redis answered too late) is released instead.
func (l *Locker) newLease(opCtx, leaseParent context.Context, key string, keys lockKeys, ac *acquireConfig, token string, fence uint64, validFrom time.Time, fair bool) (*Lease, error) {
	validity := ac.ttl - l.cfg.drift(ac.ttl)
	if elapsed := time.Since(validFrom); elapsed >= validity {
		// The answer came too late for the lease to be worth anything.
		l.giveBack(opCtx, keys, token, ac.ttl, fair, nil)
		return nil, unavailable("acquire", key,
			fmt.Errorf("redis answered after %v, longer than the lease validity %v", elapsed, validity))
	}
	s := l.makeLease(leaseParent, key, keys, ac, token, fence, validFrom, fair)
	if !l.keeper.add(s, validFrom) {
		s.cancel(ErrClosed)
		l.giveBack(opCtx, keys, token, ac.ttl, fair, nil)
		return nil, ErrClosed
	}
	return s, nil
}

// newEarlyLease makes the lease for a lock handed over by h before Redis
// confirmed it (see handover).
func (l *Locker) newEarlyLease(opCtx, leaseParent context.Context, key string, keys lockKeys, ac *acquireConfig, token string, h *handover, fair bool) (*Lease, error) {
	s := l.makeLease(leaseParent, key, keys, ac, token, h.fence, time.Now(), fair)
	s.early = h
	if !l.keeper.addPending(s, h.deadline) {
		s.cancel(ErrClosed)
		l.giveBack(opCtx, keys, token, ac.ttl, fair, h)
		return nil, ErrClosed
	}
	h.attach(l, s)
	return s, nil
}

// makeLease returns a new outermost lease, its context made under
// leaseParent.
func (l *Locker) makeLease(leaseParent context.Context, key string, keys lockKeys, ac *acquireConfig, token string, fence uint64, acquiredAt time.Time, fair bool) *Lease {
	s := &Lease{
		locker:     l,
		key:        key,
		name:       ac.name,
		keys:       keys,
		token:      token,
		fence:      fence,
		ttl:        ac.ttl,
		watchdog:   ac.watchdog,
		fair:       fair,
		acquiredAt: acquiredAt,
	}
	s.keep.index = -1
	s.bindContext(leaseParent)
	return s
}
