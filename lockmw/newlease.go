package lockmw

import (
	"context"
	"fmt"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file turns a lock that the store set for a token into a Lease held by
// the watchdog, or gives it back: the last step of every way a lease
// becomes live (doc.go, "Safety: how a lease becomes live"). Its validity
// counts from validFrom, a time no later than the moment the store set the
// lock for the token; a lock whose validity is already over when the
// answer comes is given back, never returned (giveBack; a give-back that
// fails goes to the cleaner, takeBack). A lease handed over early is made
// in host.go (newEarlyLease).

// newLease makes the lease for a lock the store set for token no earlier than
// validFrom, and hands it to the watchdog; state is what the store's own
// policy keeps on it (store.Held.State), or nil. A lease whose validity is already
// over (the store answered too late) is released instead.
func (l *Locker) newLease(a *acquisition, token string, fence uint64, validFrom time.Time, fair bool, state any) (*Lease, error) {
	validity := a.cfg.ttl - l.cfg.drift(a.cfg.ttl)
	if elapsed := l.keeper.now().Sub(validFrom); elapsed >= validity {
		// The answer came too late for the lease to be worth anything.
		l.giveBack(a.Ctx, a.Key, token, a.cfg.ttl, fair, nil)
		return nil, unavailable("acquire", a.Key.Name,
			fmt.Errorf("%s answered after %v, longer than the lease validity %v", l.store, elapsed, validity))
	}
	s := l.makeLease(a, token, fence, validFrom, fair)
	s.state = state
	if !l.keeper.add(s, validFrom) {
		s.cancel(ErrClosed)
		l.giveBack(a.Ctx, a.Key, token, a.cfg.ttl, fair, nil)
		return nil, ErrClosed
	}
	return s, nil
}

// makeLease returns a new outermost lease, its context made under
// a.leaseParent.
func (l *Locker) makeLease(a *acquisition, token string, fence uint64, acquiredAt time.Time, fair bool) *Lease {
	s := &Lease{
		leaseRecord: leaseRecord{name: a.cfg.name, fence: fence, acquiredAt: acquiredAt},
		locker:      l,
		key:         a.Key.Name,
		lock:        a.Key,
		token:       token,
		ttl:         a.cfg.ttl,
		watchdog:    a.cfg.watchdog,
		fair:        fair,
	}
	s.keep.index = -1
	s.bindContext(a.leaseParent)
	return s
}

// giveBack releases a lock taken for token that will not become a lease;
// one handed over early (h), once the hand-over has reached the store.
func (l *Locker) giveBack(opCtx context.Context, lock store.Key, token string, ttl time.Duration, fair bool, h store.Settling) {
	l.flights.start()
	defer l.flights.done()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(opCtx), ttl)
	defer cancel()
	if h != nil {
		h.Wait(ctx)
	}
	if _, err := l.policy.release(ctx, lock, token, fair); err != nil {
		l.takeBack(lock, token, fair, ttl)
	}
	l.policy.released(lock, token, fair)
}

// takeBack hands the cleaner the lock that token may hold on lock, taken
// by a request that failed (or a lock given back whose release failed),
// with lease TTL ttl; fair whether the token was a fair waiter's. No lease
// may exist for token.
func (l *Locker) takeBack(lock store.Key, token string, fair bool, ttl time.Duration) {
	l.takeBackAfter(lock, token, fair, ttl, nil)
}

// takeBackAfter is takeBack for a token that may also have a place in the
// store's queue: leave, until it succeeds, takes it out first, and reports
// whether the lock had been handed to token meanwhile (else token holds
// nothing, and nothing is released).
func (l *Locker) takeBackAfter(lock store.Key, token string, fair bool, ttl time.Duration, leave func(context.Context) (granted bool, err error)) {
	l.cleaner.add(&cleanup{key: lock.Name, until: time.Now().Add(ttl), try: func(ctx context.Context) error {
		if leave != nil {
			granted, err := leave(ctx)
			if err != nil {
				return err
			}
			leave = nil // out of the queue: nothing can be handed to token any more
			if !granted {
				return nil // and the lock is not token's
			}
		}
		_, err := l.policy.release(ctx, lock, token, fair)
		return err
	}})
}
