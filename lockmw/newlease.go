package lockmw

import (
	"context"
	"fmt"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file turns a lock that the store set for a token into a Lease held by
// the watchdog: the last step of every way a lease becomes live (doc.go,
// "Safety: how a lease becomes live"). Its validity counts from validFrom,
// a time no later than the moment the store set the lock for the token; a lock
// whose validity is already over when the answer comes is given back,
// never returned; a lease handed over early is held pending until its
// hand-over is settled (see handover).

// newLease makes the lease for a lock the store set for token no earlier than
// validFrom, and hands it to the watchdog. A lease whose validity is already
// over (the store answered too late) is released instead.
func (l *Locker) newLease(a *acquisition, token string, fence uint64, validFrom time.Time, fair bool) (*Lease, error) {
	validity := a.cfg.ttl - l.cfg.drift(a.cfg.ttl)
	if elapsed := l.keeper.now().Sub(validFrom); elapsed >= validity {
		// The answer came too late for the lease to be worth anything.
		l.giveBack(a.opCtx, a.lock, token, a.cfg.ttl, fair, nil)
		return nil, unavailable("acquire", a.key,
			fmt.Errorf("%s answered after %v, longer than the lease validity %v", l.store, elapsed, validity))
	}
	s := l.makeLease(a, token, fence, validFrom, fair)
	if !l.keeper.add(s, validFrom) {
		s.cancel(ErrClosed)
		l.giveBack(a.opCtx, a.lock, token, a.cfg.ttl, fair, nil)
		return nil, ErrClosed
	}
	return s, nil
}

// newEarlyLease makes the lease for a lock handed over by h before the store
// confirmed it (see handover). A hand-over whose deadline has passed when
// the waiter gets to it (a late goroutine) is given back, never returned.
func (l *Locker) newEarlyLease(a *acquisition, token string, h *handover, fair bool) (*Lease, error) {
	if late := l.keeper.now().Sub(h.deadline); late >= 0 {
		// The transfer may still be on the wire: give the lock back once
		// its answer is in (h.wait no longer waits, its deadline passed),
		// or after the TTL at most.
		settled := time.NewTimer(a.cfg.ttl)
		select {
		case <-h.done:
		case <-settled.C:
		}
		settled.Stop()
		l.giveBack(a.opCtx, a.lock, token, a.cfg.ttl, fair, h)
		return nil, unavailable("acquire", a.key,
			fmt.Errorf("the lock was handed over, but its validity had ended %v before the waiter took it", late))
	}
	s := l.makeLease(a, token, h.fence, time.Now(), fair)
	s.early = h
	if !l.keeper.addPending(s, h.deadline) {
		s.cancel(ErrClosed)
		l.giveBack(a.opCtx, a.lock, token, a.cfg.ttl, fair, h)
		return nil, ErrClosed
	}
	h.attach(l, s)
	return s, nil
}

// makeLease returns a new outermost lease, its context made under
// a.leaseParent.
func (l *Locker) makeLease(a *acquisition, token string, fence uint64, acquiredAt time.Time, fair bool) *Lease {
	s := &Lease{
		locker:     l,
		key:        a.key,
		name:       a.cfg.name,
		lock:       a.lock,
		token:      token,
		fence:      fence,
		ttl:        a.cfg.ttl,
		watchdog:   a.cfg.watchdog,
		fair:       fair,
		acquiredAt: acquiredAt,
	}
	s.keep.index = -1
	s.bindContext(a.leaseParent)
	return s
}

// giveBack releases a lock taken for token that will not become a lease;
// one handed over early (h), once the hand-over has reached the store.
func (l *Locker) giveBack(opCtx context.Context, lock store.Key, token string, ttl time.Duration, fair bool, h *handover) {
	l.flights.start()
	defer l.flights.done()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(opCtx), ttl)
	defer cancel()
	if h != nil {
		h.wait(ctx)
	}
	if _, err := l.policy.release(ctx, lock, token, fair); err != nil {
		l.takeBack(lock, token, fair, ttl)
	}
	l.policy.released(lock, token, fair)
}
