package lockmw

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is what a Locker lends a store that waits its own way
// (store.Waits: the Redis stores): host, the store.Host its policy makes
// and ends leases through, and ownPolicy, which runs that policy as the
// Locker's. What stays here, once for every store: making a lease from a
// holding the store made (newLease, and newEarlyLease for a hand-over the
// store has not confirmed: dated no later than the step that made it live,
// given back when it comes too late), the watchdog's confirm and loss, the
// wait loop, the flights Close waits for, and the errors users see.

// ownPolicy is the policy of a store that waits its own way.
type ownPolicy struct {
	l *Locker
	p store.Policy
}

// newOwnPolicy asks w for its policy, lending it l.
func newOwnPolicy(l *Locker, w store.Waits) ownPolicy {
	return ownPolicy{l: l, p: w.Policy(host{l})}
}

func (o ownPolicy) acquire(a *acquisition, wait bool) (*Lease, error) {
	s, err := o.p.Acquire(&a.Acquisition, wait)
	return leaseOf(s), err
}

func (o ownPolicy) release(ctx context.Context, lock store.Key, token string, fair bool) (ownership, error) {
	return o.p.Release(ctx, lock, token, fair)
}

func (o ownPolicy) releaseLease(ctx context.Context, s *Lease, deadline time.Time) (ownership, error) {
	return o.p.ReleaseLease(ctx, store.Held{Key: s.lock, Token: s.token, TTL: s.ttl, Fair: s.fair, State: s.state}, deadline)
}

func (o ownPolicy) released(lock store.Key, token string, fair bool) { o.p.Released(lock, token, fair) }
func (o ownPolicy) holdEnded(lock store.Key)                         { o.p.HoldEnded(lock) }

// leaseOf is the Lease a policy returned (nil for none).
func leaseOf(s store.Lease) *Lease {
	if s == nil {
		return nil
	}
	return s.(*Lease)
}

// acquisitionOf is the Locker's record of a.
func acquisitionOf(a *store.Acquisition) *acquisition { return a.Locker.(*acquisition) }

// host is the store.Host a Locker lends its store's policy.
type host struct{ l *Locker }

func (h host) ID() string                            { return h.l.id }
func (h host) Name() string                          { return h.l.store }
func (h host) Logger() *slog.Logger                  { return h.l.logger }
func (h host) TTL() time.Duration                    { return h.l.cfg.ttl }
func (h host) Drift(ttl time.Duration) time.Duration { return h.l.cfg.drift(ttl) }
func (h host) Backoff() (lo, hi time.Duration)       { return h.l.caps.backoffMin, h.l.caps.backoffMax }
func (h host) NewToken() string                      { return newToken() }
func (h host) Closed() bool                          { return h.l.closed.Load() }
func (h host) Closing() <-chan struct{}              { return h.l.closing }
func (h host) Start()                                { h.l.flights.start() }
func (h host) Done()                                 { h.l.flights.done() }
func (h host) Holds(k store.Key) bool                { return h.l.keeper.holds(k) }

func (h host) EndAtClose(ctx context.Context) (context.Context, context.CancelFunc) {
	return h.l.endAtClose(ctx)
}

func (h host) Cleanup(name string, until time.Time, try func(context.Context) error) {
	h.l.cleaner.add(&cleanup{key: name, until: until, try: try})
}

func (h host) TakeBack(k store.Key, token string, fair bool, ttl time.Duration, leave func(context.Context) (bool, error)) {
	h.l.takeBackAfter(k, token, fair, ttl, leave)
}

func (h host) Attempt(a *store.Acquisition) (store.Lease, store.Reply, error) {
	s, r, err := h.l.attempt(acquisitionOf(a))
	return nilIfNone(s), r, err
}

func (h host) NewLease(a *store.Acquisition, token string, fence uint64, validFrom time.Time, fair bool, state any) (store.Lease, error) {
	s, err := h.l.newLease(acquisitionOf(a), token, fence, validFrom, fair, state)
	return nilIfNone(s), err
}

func (h host) NewEarlyLease(a *store.Acquisition, token string, fence uint64, deadline time.Time, fair bool, state any, e store.Settling) (store.Lease, error) {
	s, err := h.l.newEarlyLease(acquisitionOf(a), token, fence, deadline, fair, state, e)
	return nilIfNone(s), err
}

func (h host) Confirm(s store.Lease, sentAt time.Time) { h.l.keeper.confirm(leaseOf(s), sentAt) }

func (h host) Lose(s store.Lease, o store.Ownership) {
	lease := leaseOf(s)
	h.l.keeper.lose(lease, &LostError{Key: lease.key, Reason: lostReason(o)})
}

func (h host) WaitLoop(a *store.Acquisition, wait bool, w store.Way) (store.Lease, error) {
	s, err := h.l.waitLoop(acquisitionOf(a), wait, ownWay{w})
	return nilIfNone(s), err
}

func (h host) NotAcquired(a *store.Acquisition, retryAfter time.Duration) error {
	return &NotAcquiredError{Key: a.Key.Name, RetryAfter: retryAfter}
}

func (h host) CtxErr(a *store.Acquisition) error { return ctxErr(a.Ctx, a.Key.Name) }

func (h host) StoreErr(a *store.Acquisition, err error) error {
	return storeErr(a.Ctx, a.Key.Name, err)
}

// nilIfNone is s as a store.Lease: a nil *Lease is none, not a non-nil
// interface holding nil.
func nilIfNone(s *Lease) store.Lease {
	if s == nil {
		return nil
	}
	return s
}

// ownWay runs a store policy's Way in the Locker's wait loop.
type ownWay struct{ w store.Way }

func (o ownWay) try(a *acquisition) (*Lease, store.Reply, error) {
	s, r, err := o.w.Try(&a.Acquisition)
	return leaseOf(s), r, err
}

func (o ownWay) pause(a *acquisition, r store.Reply, left time.Duration) (*Lease, error) {
	s, err := o.w.Pause(&a.Acquisition, r, left)
	return leaseOf(s), err
}

func (o ownWay) done(a *acquisition, lease *Lease, err error) {
	o.w.Done(&a.Acquisition, nilIfNone(lease), err)
}

// newEarlyLease makes the lease for a lock handed to token before the store
// confirmed it (e): valid until deadline, fixed by the policy before the
// hand-over was sent, not renewed until the policy confirms or ends it, its
// release held back until e is settled. A hand-over whose deadline has
// passed when the waiter gets to it (a late goroutine) is given back, never
// returned.
func (l *Locker) newEarlyLease(a *acquisition, token string, fence uint64, deadline time.Time, fair bool, state any, e store.Settling) (*Lease, error) {
	if late := l.keeper.now().Sub(deadline); late >= 0 {
		// The hand-over may still be on the wire: give the lock back once
		// its answer is in (e.Wait no longer waits, its deadline passed),
		// or after the TTL at most.
		settled := time.NewTimer(a.cfg.ttl)
		select {
		case <-e.Settled():
		case <-settled.C:
		}
		settled.Stop()
		l.giveBack(a.Ctx, a.Key, token, a.cfg.ttl, fair, e)
		return nil, unavailable("acquire", a.Key.Name,
			fmt.Errorf("the lock was handed over, but its validity had ended %v before the waiter took it", late))
	}
	s := l.makeLease(a, token, fence, time.Now(), fair)
	s.state, s.early = state, e
	if !l.keeper.addPending(s, deadline) {
		s.cancel(ErrClosed)
		l.giveBack(a.Ctx, a.Key, token, a.cfg.ttl, fair, e)
		return nil, ErrClosed
	}
	return s, nil
}
