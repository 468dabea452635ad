package redisstore

import (
	"context"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is the steps the Redis stores' policies take on their store,
// one compare-and-act step per method on the lock's objects: a release
// that hands the lock to a waiter in the same step, a fair queue, and
// release notices and grants (granter: Store, for grantPolicy), and waiters
// woken one at a time from a queue kept on one master (wakeQueue: Redlock,
// for wakePolicy). Why no two leases of a lock are live at once when a
// policy takes them is in safety.go ("How a lease becomes live") and
// redlock_safety.go.

// granter is a store whose release can hand the lock to a waiter in the
// same step, and that keeps a fair queue whose releases grant the lock to
// its first live waiter. Every method is one compare-and-act step on the
// store, on the lock's objects only.
//
// Safety (lockmw/internal/redisstore, safety.go, "How a lease becomes
// live": Transfer, Fair grant, Early hand-over). A step that hands the lock over replaces the
// releasing token's holding with the waiter's only while the releasing
// token holds it, and draws the waiter's fence from the lock's counter in
// that step: the two holdings never overlap in the store, and the fence
// rises. The Locker dates the waiter's lease from the moment before the
// step was sent (Transfer, a release that reports a Local grant), or from a
// renewal of the waiter's own holding (a grant heard later); an early
// hand-over lends the waiter the releasing lease's remaining validity, no
// further.
type granter interface {
	store.Store
	store.LeftNothing
	watcher
	// ReleaseHandoff ends token's holding: it hands the lock to the first
	// live fair waiter (the one whose entry is early, with fence
	// earlyFence, when the Locker handed it the lock early; "" for none),
	// or deletes it and tells the waiting Lockers. queued says that
	// waiters were known to be queued behind token.
	ReleaseHandoff(ctx context.Context, k store.Key, token, early string, earlyFence uint64, queued bool) (Handoff, error)
	// Unlock ends a holding acquired without Fair, without handing over;
	// fair reports that fair waiters have queued behind it, and the lock
	// was left for ReleaseHandoff.
	Unlock(ctx context.Context, k store.Key, token string) (o store.Ownership, fair bool, err error)
	// Transfer hands token's holding to the waiter to of the same Locker,
	// held for ttl; unless force, only when nobody else waits.
	Transfer(ctx context.Context, k store.Key, token, to string, ttl time.Duration, force bool) (TransferReply, error)
	// FairAcquire is one fair attempt for the waiter whose queue entry is
	// entry (see FairMode).
	FairAcquire(ctx context.Context, k store.Key, token string, ttl time.Duration, entry string, mode FairMode) (FairReply, error)
	// Enqueue appends entry to the lock's fair queue if the queue exists;
	// false: there is none, and FairAcquire is needed.
	Enqueue(ctx context.Context, k store.Key, entry string) (bool, error)
	// Leave takes entry out of the fair queue; granted reports that the
	// lock had been granted to token meanwhile (the caller releases it).
	Leave(ctx context.Context, k store.Key, entry, token string) (granted bool, err error)
	// FairQueued reports whether fair waiters may be queued for the lock.
	FairQueued(ctx context.Context, k store.Key) (bool, error)
	// FairEntry is the fair queue entry of the waiter token of the Locker
	// locker, to hold the lock for ttl once granted. Grant.Next and
	// Handoff.Next are such entries; EntryOwner reads one.
	FairEntry(locker, token string, ttl time.Duration) string
	// EntryOwner returns the Locker and the waiter token of a fair queue
	// entry.
	EntryOwner(entry string) (locker, token string)
	// Moving reports that err refused a request while the lock's objects
	// move between the store's members (a Redis Cluster slot migrating):
	// the request did not run, and the fair queue cannot be used until the
	// move ends.
	Moving(err error) bool
}

// watcher is a store that tells its Locker's policy about a lock: its
// releases (grants false), or the grants and wakes for that Locker's
// waiters (grants true). What it hears goes to the policy's Events, set
// by Policy before the Locker's first request.
type watcher interface {
	// Watch listens for k's events until Unwatch; it returns once it
	// listens, or with ctx's error. Every successful Watch needs one
	// Unwatch.
	Watch(ctx context.Context, k store.Key, grants bool) error
	Unwatch(k store.Key, grants bool)
}

// Events is where a watcher sends what it hears.
type Events struct {
	// Released: k was released; a default-mode waiter may try.
	Released func(k store.Key)
	// Granted: k was handed to a fair waiter of the Locker (g), or the
	// store's message could not be read (ok false).
	Granted func(k store.Key, g Grant, ok bool)
	// Woken: the waiter whose entry names token is woken for k
	// (wakeQueue).
	Woken func(k store.Key, token string)
}

// Grant is a hand-over to a fair waiter that a store announced.
type Grant struct {
	Token    string // the waiter's
	Fence    uint64 // its fence
	Reserved uint64 // the fence reserved for the next local hand-over, or 0
	Next     string // the entry of the waiter now first in line, or ""
}

// Handoff is what a release did with the lock.
type Handoff struct {
	Ownership store.Ownership // Owned: the lock was released or handed over
	To        string          // the token of the fair waiter it was handed to, if any
	Fence     uint64          // that waiter's fence
	Local     bool            // the waiter is the releasing Locker's: the Locker wakes it
	Reserved  uint64          // when Local: the fence reserved for that waiter's next hand-over
	Next      string          // when Local: the entry of the fair waiter now first in line, or ""
	More      bool            // when handed over: others are still queued for the lock
}

// TransferReply is what a transfer did.
type TransferReply struct {
	Done bool // the lock now belongs to the waiter
	// Fence is, when Done, the fence the transfer drew for the waiter: its
	// fence, unless the transfer was forced (the waiter started early,
	// with a fence reserved for it by an earlier step).
	Fence uint64
	// Reserved is, when Done, a fence above Fence that the transfer
	// reserved for the waiter's own hand-over to another waiter of its
	// Locker, or 0: none was reserved, or others wait too (other Lockers'
	// or fair waiters), and the next hand-over is not the Locker's own.
	Reserved  uint64
	FairQueue bool            // not Done: fair waiters are queued; release with ReleaseHandoff
	Ownership store.Ownership // not Done: what the transfer found
}

// FairMode is what a fair attempt may do.
type FairMode string

// The fair attempts.
const (
	FairTry  FairMode = "try"  // never queues
	FairWait FairMode = "wait" // joins the queue when the lock is busy
	FairPoll FairMode = "poll" // checks a queued waiter: granted? still queued?
)

// FairReply is the outcome of one fair attempt.
type FairReply struct {
	Acquired bool
	Granted  bool          // handed over earlier: Pttl is what is left of it
	Fence    uint64        // when Acquired or Granted
	Pttl     time.Duration // when Granted: the lock's remaining TTL; when busy: the holder's
	Counter  uint64        // when busy: the fence counter when the attempt ran
}

// wakeQueue is a quorum store's wait queue, kept on its first member:
// attempts that queue the waiter's entry when they find the lock held
// there, and releases that wake one waiter at a time.
//
// Safety: a wake grants nothing. A woken waiter makes an ordinary
// attempt, decided by the store as every other (AcquireQueued's Reply is a
// Store.Acquire reply), so a wakeQueue adds no way for a lease to become
// live. A lost wake costs latency, never liveness: a queued waiter also
// retries when the holder's TTL would have run out.
type wakeQueue interface {
	store.Store
	watcher
	// AcquireQueued is one attempt; entry, if not empty, is queued on the
	// first member when it finds the lock held there.
	AcquireQueued(ctx context.Context, k store.Key, token string, ttl time.Duration, entry string) (QueuedReply, error)
	// EnqueueWake queues entry behind a lock known to be contended (into
	// an existing queue only). maybe says the request failed but may have
	// queued it.
	EnqueueWake(ctx context.Context, k store.Key, entry string) (queued, maybe bool)
	// PassWake wakes the next waiter of the lock.
	PassWake(ctx context.Context, k store.Key) error
	// LeaveWake takes entry out of the queue, after every attempt of its
	// waiter that is still on its way there.
	LeaveWake(ctx context.Context, k store.Key, entry string) error
	// HolderTTL is the holder's remaining TTL, 0 when unknown.
	HolderTTL(ctx context.Context, k store.Key) time.Duration
	// WakeEntry is the wait queue entry of the waiter token of the Locker
	// locker.
	WakeEntry(locker, token string) string
}

// QueuedReply is an AcquireQueued reply, and what the attempt did with
// the caller's wait entry.
type QueuedReply struct {
	store.Reply
	// Queued: the attempt queued the entry (or may yet: the first member
	// has not answered).
	Queued bool
	// Unsure: the first member failed without answering (its reply lost,
	// say), so the attempt may have queued the entry there all the same.
	// It is not counted queued (no wake is awaited on it), but the waiter
	// must leave the queue.
	Unsure bool
}
