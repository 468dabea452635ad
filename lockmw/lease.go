package lockmw

import (
	"context"
	"errors"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

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
// derived from it) returns a nested lease instead of deadlocking, but only
// while the outermost lease is held: once it has been released, lost or
// closed, its context (even one detached with context.WithoutCancel, which
// keeps the values) no longer nests, and Acquire and TryAcquire make an
// ordinary acquisition that waits or finds the lock busy. A nested lease
// ends when its outermost lease does, with the same cause, also when it was
// acquired through a context detached from the outer one.
func (s *Lease) Context() context.Context { return s.ctx }

// Deadline returns the lease's validity deadline: the time until which the
// lock is known to be held, counted from the send time of its acquisition
// or last confirmed renewal (+ TTL − drift). Each confirmed renewal moves it
// later. It carries the monotonic clock reading, so time.Until(Deadline())
// is not affected by changes of the wall clock. A nested lease returns its
// outermost lease's deadline. Once the lease has ended, Deadline returns the
// last deadline it had.
func (s *Lease) Deadline() time.Time {
	return monoEpoch.Add(time.Duration(s.outermost().validUntil.Load()))
}

// Valid reports whether the lease is live (not released, lost or closed)
// and before its deadline now, by the monotonic clock. The lease context
// ends at the deadline when the watchdog's timer fires, which can be late
// on a loaded host; Valid does not wait for that timer. A lease that Valid
// finds past its deadline is lost from then on: its context ends at once
// with cause ErrLost (reason LostDeadline, or LostExpired for a lease
// without watchdog), as when the timer fires. lockmw makes the same check
// itself wherever it acts on a lease (renewal, nesting, Release).
//
// Check Valid right before an action that must run under the lock, and
// still fence the action (Fence): the deadline may pass right after Valid
// returns true, and a paused process can act later than it checked.
func (s *Lease) Valid() bool {
	if !s.live() {
		return false
	}
	o := s.outermost()
	keeper := o.locker.keeper
	if keeper.now().Sub(monoEpoch) < time.Duration(o.validUntil.Load()) {
		return true // deadlines only move later while a lease is held
	}
	return keeper.expire(o) && s.live()
}

// outermost returns the outermost lease of s: s itself unless nested.
func (s *Lease) outermost() *Lease {
	if s.outer != nil {
		return s.outer
	}
	return s
}

// Release gives up the lease. For an outermost lease it deletes the lock in
// the store if, and only if, this lease still owns it, and ends the lease
// context and those of the leases nested in it. A nested lease only ends its
// own context: the lock stays held until the outermost lease is released.
//
// A nested lease's Release returns nil while its outermost lease is held.
// After the outermost lease ended, it returns what tells the nested holder
// that the lock was no longer its own: the outermost lease's *LostError if
// it was lost, ErrClosed if the Locker was closed, and, if the outermost
// lease was released first, a *LostError with reason LostReleased (matching
// ErrLost).
//
// Release still reaches the store when ctx has already ended (a finished
// request's context, say), bounded by the lease TTL.
//
// Release is idempotent: later calls return the first call's result. It
// returns an error matching ErrLost if the lock had been lost (a new owner's
// lock is never touched), ErrClosed if the Locker was closed first, and
// ErrUnavailable if the store could not be told (the lock then expires after
// its TTL).
func (s *Lease) Release(ctx context.Context) error {
	s.releaseOnce.Do(func() { s.releaseErr = s.release(ctx) })
	return s.releaseErr
}

func (s *Lease) release(ctx context.Context) error {
	if s.outer != nil {
		s.outer.locker.keeper.expire(s.outer) // past its deadline: lost, whatever the timer
		s.cancel(nil)
		s.outer.disown(s)
		return s.outer.nestedEndErr()
	}
	l := s.locker
	l.flights.start()
	defer l.flights.done()
	l.keeper.expire(s) // past its deadline: lost, whatever the timer
	prev, lost, deadline := l.keeper.remove(s)
	if prev == stateClosed {
		// Close took the lease and gives the lock back; the lease ends
		// here too, so that when Release returns no work runs under it
		// and nothing nests in it, even before Close gets to it.
		s.cancel(ErrClosed)
		return ErrClosed
	}
	if prev == stateHeld {
		defer func() {
			if testHookReleaseEnding != nil {
				testHookReleaseEnding(s.lock)
			}
			l.keeper.released(s)
			l.policy.holdEnded(s.lock)
		}()
	}

	// Work under the lease stops before anyone else can take the lock.
	s.cancel(nil)

	if s.early != nil {
		// Handed over early: the release waits for the transfer's answer,
		// bounded by the hand-over's deadline whatever ctx says. A release
		// sent before the transfer would find the releaser's token, and the
		// transfer landing after it would leave the lock held by this
		// lease's token.
		s.early.Wait(context.Background())
	}

	if ctx.Err() != nil {
		// A request context that ended is the usual reason to release:
		// still free the lock now rather than make others wait out its TTL.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.ttl)
		defer cancel()
	}
	ctx, span := l.tel.startSpan(ctx, spanRelease, s.name)
	rctx, cancel := bound(ctx, s.ttl)
	// The store's retries (a lock moving between its members) end by s's
	// deadline.
	found, err := l.policy.releaseLease(store.WithValidity(rctx, deadline), s, deadline)
	err = unanswered(boundEnded(rctx), l.store, l.caps.diagnoser, "the release", s.ttl, err)
	cancel()
	l.policy.released(s.lock, s.token, s.fair)

	switch {
	case lost != nil:
		// Already reported lost; the delete above only cleared our own key if
		// it was still there (say, the deadline passed while the store was away).
		l.tel.releaseSpanDone(span, &s.leaseRecord, outcomeLost, lost)
		return lost
	case err != nil:
		err = unavailable("release", s.key, err)
		l.tel.releaseSpanDone(span, &s.leaseRecord, outcomeError, err)
		l.tel.leaseEnded(ctx, &s.leaseRecord, outcomeError)
		return err
	case found != owned:
		// Lost between two renewals, unnoticed until now.
		lost = &LostError{Key: s.key, Reason: lostReason(found)}
		s.lost.Store(lost)
		l.tel.releaseSpanDone(span, &s.leaseRecord, outcomeLost, lost)
		l.tel.leaseLost(ctx, &s.leaseRecord, lost)
		return lost
	}
	l.tel.releaseSpanDone(span, &s.leaseRecord, outcomeOK, nil)
	l.tel.leaseEnded(ctx, &s.leaseRecord, outcomeOK)
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

// live reports whether s has not ended: not released, lost or closed (a
// nested lease: nor its outermost lease).
func (s *Lease) live() bool {
	s.endMu.Lock()
	defer s.endMu.Unlock()
	return !s.ended
}

// adopt records n as nested in the outermost lease s, so that n ends when s
// does. It reports false, recording nothing, when s has ended.
func (s *Lease) adopt(n *Lease) bool {
	s.endMu.Lock()
	defer s.endMu.Unlock()
	if s.ended {
		return false
	}
	if s.nested == nil {
		s.nested = make(map[*Lease]struct{})
	}
	s.nested[n] = struct{}{}
	return true
}

// disown forgets n, a nested lease of s that was released.
func (s *Lease) disown(n *Lease) {
	s.endMu.Lock()
	delete(s.nested, n)
	s.endMu.Unlock()
}

// nestedEndErr is what Release of a lease nested in the outermost lease s
// returns: nil while s is held, else why the lock was no longer the nested
// holder's.
func (s *Lease) nestedEndErr() error {
	if lost := s.lostCause(); lost != nil {
		return lost
	}
	s.endMu.Lock()
	ended, cause := s.ended, s.endCause
	s.endMu.Unlock()
	switch {
	case !ended:
		return nil
	case errors.Is(cause, ErrClosed), errors.Is(cause, ErrLost):
		return cause
	}
	return &LostError{Key: s.key, Reason: LostReleased}
}

// testHookReleaseEnding, when set by a test, runs at the end of a lease's
// release, while the lease still counts as holding its lock.
var testHookReleaseEnding func(store.Key)
