package lockmw

import (
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file makes one acquisition attempt, on every store.
//
// Safety (doc.go, "Safety: how a lease becomes live": Acquisition): the
// lease's validity counts from the store's ValidFrom, no later than the
// moment the request left (or the last confirmed renewal of what keeps the
// lock alive), so D = ValidFrom + TTL − drift; a reply that comes after D
// is given back, never returned (newLease).

// attempt makes one acquisition. It returns the lease, or the store's busy
// reply (HolderTTL, Seen), or an error.
func (l *Locker) attempt(a *acquisition) (*Lease, store.Reply, error) {
	// Close waits for attempts under way: one that takes the lock after
	// Close began gives it back before Close returns.
	l.flights.start()
	defer l.flights.done()
	if l.closed.Load() {
		return nil, store.Reply{}, ErrClosed
	}
	token := newToken()
	// Every store bounds its Acquire by the TTL itself (some by their
	// client's shorter timeouts), so the attempt adds no bound of its
	// own, and no timer, on the hot path: the error is named when it is
	// that bound's (ranOut).
	sent := time.Now()
	reply, err := l.st.Acquire(a.Ctx, a.Key, token, a.cfg.ttl, a.cfg.watchdog)
	if err != nil {
		if !l.leftNothing(err) {
			// The request may have taken the lock all the same: give back
			// whatever token holds (no lease will hold it).
			l.takeBack(a.Key, token, false, a.cfg.ttl)
		}
		err = unanswered(ranOut(a.Ctx, sent, a.cfg.ttl, err), l.store, l.caps.diagnoser, "the acquisition", a.cfg.ttl, err)
		return nil, store.Reply{}, storeErr(a.Ctx, a.Key.Name, err)
	}
	if !reply.Acquired {
		return nil, reply, nil
	}
	lease, err := l.newLease(a, token, reply.Fence, reply.ValidFrom, false, nil)
	return lease, store.Reply{}, err
}

// leftNothing reports that a failed acquisition request, which returned
// err, left nothing for the Locker to give back (store.LeftNothing).
func (l *Locker) leftNothing(err error) bool {
	return l.caps.leftNothing != nil && l.caps.leftNothing.LeftNothing(err)
}
