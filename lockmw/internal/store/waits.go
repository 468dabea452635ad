package store

import (
	"context"
	"log/slog"
	"time"
)

// This file is the boundary's part for a store that waits and hands locks
// on its own way (Waits: both Redis stores), and what the Locker lends it
// for that (Host): the steps that make, confirm and end leases, the loop
// its waiters run, and the bookkeeping Close waits for, which stay in
// package lockmw, once, for every store.
//
// Safety. A Policy adds ways for a lease to become live only through
// Host.NewLease (validity dated from a time the policy proves is no later
// than the store step that made the holding live) and Host.NewEarlyLease
// (a hand-over the store has not confirmed yet: the lease lives no
// longer than the releasing holder's deadline, and is not renewed until
// the policy confirms it, Host.Confirm, or ends it, Host.Lose). Each
// policy argues, beside its code, why the holding its store made is the
// only live one of its lock and why its fence is higher
// (lockmw/internal/redisstore, safety.go and redlock_safety.go).

// Waits is a store whose waiters wait, and whose releases hand the lock
// on, its own way: the Locker asks it for its Policy once, before its first
// request, and sends it every Acquire's waits and every release.
type Waits interface {
	Policy(h Host) Policy
}

// Policy is how a Waits store's waiters wait and its locks are handed on.
// The Locker calls it from Acquire and TryAcquire, a lease's Release,
// Close and its cleaner.
type Policy interface {
	// Acquire runs the attempts and waits of one Acquire (wait) or
	// TryAcquire call; every lease it returns comes from h.
	Acquire(a *Acquisition, wait bool) (Lease, error)
	// Release ends token's holding of k (a lease's, acquired with Fair
	// when fair, or a lock given back), handing the lock on where the
	// store does; it reports what the store found.
	Release(ctx context.Context, k Key, token string, fair bool) (Ownership, error)
	// ReleaseLease releases s, valid until deadline: as Release does, or
	// by handing the lock to a waiter of the same Locker before the store
	// confirms it.
	ReleaseLease(ctx context.Context, s Held, deadline time.Time) (Ownership, error)
	// Released runs after the release of token's holding of k (a
	// lease's, or a give-back).
	Released(k Key, token string, fair bool)
	// HoldEnded runs once a lease of k that held it until its release no
	// longer counts as holding it (Host.Holds turns false).
	HoldEnded(k Key)
}

// Acquisition is one Acquire or TryAcquire call under way, as a Policy
// sees it.
type Acquisition struct {
	Ctx    context.Context // the call's; requests are made under it
	Key    Key
	TTL    time.Duration // the lease's
	Fair   bool
	GiveUp time.Time // when a bounded wait (WithWait) ends; zero: unbounded
	// Locker is the Locker's own record of the call, for Host: a Policy
	// passes the Acquisition back as it got it.
	Locker any
}

// Lease is a lease a Host made; a Policy returns it, or passes it back to
// the Host, and does not look inside.
type Lease any

// Held is a lease being released, as ReleaseLease sees it.
type Held struct {
	Key   Key
	Token string
	TTL   time.Duration
	Fair  bool
	// State is what the policy gave the Host when the lease was made
	// (NewLease, NewEarlyLease), or nil.
	State any
}

// Settling is a hand-over not yet confirmed by the store (an early
// hand-over): the lease made from it neither renews nor releases until it is
// settled.
type Settling interface {
	// Wait returns once the hand-over is settled, or can no longer be, or
	// ctx ends.
	Wait(ctx context.Context)
	// Settled is closed once the hand-over is settled.
	Settled() <-chan struct{}
}

// Way is how one waiter waits between its attempts; Host.WaitLoop runs it.
type Way interface {
	// Try makes one attempt, or asks for the waiter's turn: the lease, or
	// the store's busy reply, or an error that ends the wait.
	Try(a *Acquisition) (Lease, Reply, error)
	// Pause waits until the next attempt is due, at most until left runs
	// out (0: no bound); it returns early when the Locker closes or a.Ctx
	// ends (WaitLoop checks both), with the lease when the lock was handed
	// to the waiter meanwhile, or with an error that ends the wait.
	Pause(a *Acquisition, r Reply, left time.Duration) (Lease, error)
	// Done is called once when the wait ends, with its outcome (lease nil
	// unless it got one).
	Done(a *Acquisition, lease Lease, err error)
}

// Host is what the Locker lends its Waits store's Policy.
type Host interface {
	// ID names the Locker to its store (its waiters' entries and grants).
	ID() string
	// Name names the store in messages.
	Name() string
	Logger() *slog.Logger
	// TTL is the Locker's lease TTL (WithTTL): the bound of the policy's
	// own background requests.
	TTL() time.Duration
	// Drift is the clock drift allowance for a lease of ttl.
	Drift(ttl time.Duration) time.Duration
	// Backoff is the range of a waiter's backoff between attempts.
	Backoff() (lo, hi time.Duration)
	// NewToken returns a fresh random owner token.
	NewToken() string

	// Closed reports that Close began; Closing is closed then.
	Closed() bool
	Closing() <-chan struct{}
	// EndAtClose returns a context derived from ctx that also ends, with
	// cause ErrClosed, when Close begins.
	EndAtClose(ctx context.Context) (context.Context, context.CancelFunc)
	// Start and Done count work that must reach the store before Close
	// returns (a lock handed to a waiter until it becomes a lease or is
	// given back, a release, a waiter that may be queued).
	Start()
	Done()
	// Holds reports whether a lease of this Locker holds k, or its release
	// is under way.
	Holds(k Key) bool
	// Cleanup hands the cleaner a request to retry until it succeeds or
	// until passes (a queue entry to take out).
	Cleanup(name string, until time.Time, try func(context.Context) error)
	// TakeBack hands the cleaner the lock token may hold on k (a failed
	// request's, or a lock whose release failed), released with
	// Policy.Release; leave, if not nil, first takes token out of the
	// store's queue, until it succeeds, and reports whether the lock had
	// been handed to token meanwhile (else nothing is released).
	TakeBack(k Key, token string, fair bool, ttl time.Duration, leave func(context.Context) (granted bool, err error))

	// Attempt makes one acquisition with Store.Acquire: the lease, or the
	// store's busy reply, or an error.
	Attempt(a *Acquisition) (Lease, Reply, error)
	// NewLease makes the lease for a lock the store set for token no
	// earlier than validFrom; state is the policy's, given back in Held.
	// A lock whose validity is already over is given back, never
	// returned.
	NewLease(a *Acquisition, token string, fence uint64, validFrom time.Time, fair bool, state any) (Lease, error)
	// NewEarlyLease makes the lease for a lock handed to token by a release
	// of this Locker that the store has not confirmed (h): valid until
	// deadline, not renewed until Confirm or Lose, its release held back
	// until h is settled.
	NewEarlyLease(a *Acquisition, token string, fence uint64, deadline time.Time, fair bool, state any, h Settling) (Lease, error)
	// Confirm renews an early lease from sentAt, the send time of the
	// store step that confirmed its hand-over.
	Confirm(s Lease, sentAt time.Time)
	// Lose ends an early lease whose hand-over the store refused, having
	// found o.
	Lose(s Lease, o Ownership)
	// WaitLoop runs w's attempts until one gets the lease or fails, or the
	// wait ends: a single attempt (!wait), WithWait running out, the
	// caller's context, Close.
	WaitLoop(a *Acquisition, wait bool, w Way) (Lease, error)

	// NotAcquired is the error of an attempt that found the lock held,
	// free again after about retryAfter (0: unknown).
	NotAcquired(a *Acquisition, retryAfter time.Duration) error
	// CtxErr is the error of a wait that a.Ctx ended.
	CtxErr(a *Acquisition) error
	// StoreErr is the error of a failed store request in a's wait.
	StoreErr(a *Acquisition, err error) error
}
