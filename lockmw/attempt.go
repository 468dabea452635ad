package lockmw

import (
	"context"
	"time"
)

// This file makes one acquisition attempt.
//
// Safety (doc.go, "Safety: how a lease becomes live": Acquisition): the
// lease's validity counts from sentAt, read before the request leaves, so
// D = sentAt + TTL − drift; a reply that comes after D is given back,
// never returned (newLease).

// attempt makes one acquisition. It returns the lease, or the holder's
// remaining TTL when the lock is busy, or an error.
func (l *Locker) attempt(a *acquisition) (*Lease, time.Duration, error) {
	// Close waits for attempts under way: one that takes the lock after
	// Close began gives it back before Close returns.
	l.flights.start()
	defer l.flights.done()
	if l.closed.Load() {
		return nil, 0, ErrClosed
	}
	token := newToken()
	sentAt := time.Now()
	reply, err := l.backend.acquire(a.opCtx, a.keys, token, a.cfg.ttl)
	if err != nil {
		if _, quorum := l.backend.(*redlockBackend); !quorum && mayHaveRun(err) {
			// No lease will hold token: give back what the request may
			// take yet (Redlock does so per master itself).
			l.takeBack(a.keys, token, "", false, a.cfg.ttl)
		}
		return nil, 0, l.attemptErr(a.opCtx, a.key, err)
	}
	if !reply.acquired {
		return nil, reply.holderTTL, nil
	}
	lease, err := l.newLease(a, token, reply.fence, sentAt, false)
	return lease, 0, err
}

// attemptErr is the error for an attempt that did not reach Redis.
func (l *Locker) attemptErr(opCtx context.Context, key string, err error) error {
	if opCtx.Err() != nil {
		return ctxErr(opCtx, key)
	}
	return unavailable("acquire", key, err)
}
