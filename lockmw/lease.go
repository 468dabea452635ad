package lockmw

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A Lease is one holding of a lock. It is kept alive by the Locker's
// watchdog until Release, and its Context ends as soon as the lock is
// released or lost. A Lease is safe for concurrent use.
type Lease struct {
	locker     *Locker
	key        string
	name       string // telemetry name
	keys       lockKeys
	token      string // random 128-bit owner id, hex
	fence      uint64
	ttl        time.Duration
	watchdog   bool
	fair       bool // acquired with Fair: its Locker tracks it until release
	acquiredAt time.Time
	// reserved is a fence the counter already passed, set when the lock
	// came by a transfer that saw nobody else waiting: a waiter of this
	// Locker may get it, and start before Redis confirms its hand-over.
	reserved atomic.Uint64
	// next is, for a fair lease handed over by a release, the queue entry
	// of the waiter first in line then (that waiter is next unless it gives
	// up); "" or nil when none was known.
	next atomic.Pointer[string]
	// early is the hand-over this lease came by before Redis confirmed it,
	// or nil: the lease's release waits until it is settled, so that the
	// release never reaches Redis before the transfer it depends on.
	early *handover

	ctx    context.Context
	cancel context.CancelCauseFunc

	// outer is the lease this one is nested in (reentrant acquisition
	// through the context), nil for an outermost lease. A nested lease
	// shares its outermost lease's lock, token and fence.
	outer *Lease
	// enclosing is the innermost lease on the context chain this lease's
	// context was made from, of any key or Locker: the chain heldIn walks.
	enclosing *Lease

	keep keepState                 // owned by the Locker's renewScheduler
	lost atomic.Pointer[LostError] // set once the lock is known lost

	releaseOnce sync.Once
	releaseErr  error
}

// Key returns the lock key, as passed to Acquire.
func (s *Lease) Key() string { return s.key }

// Fence returns the fencing token of this holding: it is strictly greater
// than the token of every earlier holder of the same key (for the same key
// prefix), so a store can reject writes from a holder that lost the lock
// (UPDATE ... WHERE fence < $token). Nested leases share their outermost
// lease's token.
func (s *Lease) Fence() uint64 { return s.fence }

// Context returns a context that carries the values of the context passed
// to Acquire and is done when that context is, when the lease is released,
// or when the lock is lost. After a loss, context.Cause returns an error
// matching ErrLost (a *LostError); after Locker.Close, ErrClosed.
//
// Acquiring the same key from the same Locker with this context (or one
// derived from it) returns a nested lease instead of deadlocking.
func (s *Lease) Context() context.Context { return s.ctx }

// Release gives up the lease. For an outermost lease it deletes the lock in
// Redis if, and only if, this lease still owns it, and ends the lease
// context. A nested lease only ends its own context: the lock stays held
// until the outermost lease is released.
//
// Release still reaches Redis when ctx has already ended (a finished
// request's context, say), bounded by the lease TTL.
//
// Release is idempotent: later calls return the first call's result. It
// returns an error matching ErrLost if the lock had been lost (a new owner's
// lock is never touched), ErrClosed if the Locker was closed first, and
// ErrUnavailable if Redis could not be told (the lock then expires after its
// TTL).
func (s *Lease) Release(ctx context.Context) error {
	s.releaseOnce.Do(func() { s.releaseErr = s.release(ctx) })
	return s.releaseErr
}

func (s *Lease) release(ctx context.Context) error {
	if s.outer != nil {
		s.cancel(nil)
		return s.outer.lostCause()
	}
	l := s.locker
	l.flights.start()
	defer l.flights.done()
	if s.early != nil {
		// Bounded by the hand-over's deadline, whatever ctx says: a
		// release sent before the transfer would find the releaser's
		// token, and the transfer landing after it would leave the lock
		// held by this lease's token.
		s.early.wait(context.Background())
	}
	prev, lost, deadline := l.keeper.remove(s)
	if prev == stateClosed {
		return ErrClosed
	}

	// Work under the lease stops before anyone else can take the lock.
	s.cancel(nil)

	if ctx.Err() != nil {
		// A request context that ended is the usual reason to release:
		// still free the lock now rather than make others wait out its TTL.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.ttl)
		defer cancel()
	}
	ctx, span := l.tel.startSpan(ctx, spanRelease, s.name)
	found, err := l.releaseLease(ctx, s, deadline)
	if s.fair {
		l.forgetFair(s.keys, s.token)
	}

	switch {
	case lost != nil:
		// Already reported lost; the delete above only cleared our own key if
		// it was still there (say, the deadline passed while Redis was away).
		l.tel.releaseSpanDone(span, s, outcomeLost, lost)
		return lost
	case err != nil:
		err = unavailable("release", s.key, err)
		l.tel.releaseSpanDone(span, s, outcomeError, err)
		l.tel.leaseEnded(ctx, s, outcomeError)
		return err
	case found != owned:
		// Lost between two renewals, unnoticed until now.
		lost = &LostError{Key: s.key, Reason: found.lostReason()}
		s.lost.Store(lost)
		l.tel.releaseSpanDone(span, s, outcomeLost, lost)
		l.tel.leaseLost(ctx, s, lost)
		return lost
	}
	l.tel.releaseSpanDone(span, s, outcomeOK, nil)
	l.tel.leaseEnded(ctx, s, outcomeOK)
	return nil
}

// lostCause returns the LostError of an outermost lease that was lost, or
// nil.
func (s *Lease) lostCause() error {
	if lost := s.lost.Load(); lost != nil {
		return lost
	}
	return nil
}
