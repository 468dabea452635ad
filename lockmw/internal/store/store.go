// Package store is the boundary between lockmw's lock logic and a store
// that holds locks. It is internal to this repository: a store package
// (such as lockmw/etcd) implements Store, and makes its Locker with
// lockmw.NewWithStore (see Inside). Leases, the watchdog's schedule,
// validity deadlines and telemetry stay in package lockmw, and so does
// waiting, except on a store that waits its own way (Waits: the Redis
// stores, whose policy makes leases only through the Locker's Host); a
// Store method does one step on the store's objects per call.
//
// A store names its own objects from the Locker's prefix and the user's
// key (Key). Beyond the required Store, a store offers what it has, found
// by type assertion:
//
//   - Notifier: a way to wait until a lock may have become free, for
//     default-mode waiters (they retry then). Without it, waiters back off.
//   - Backoff: the range of that backoff, tuned to the store's round trip
//     (without it, the Redis-tuned range of package lockmw).
//   - Queue: an acquisition that queues (the lock is a queue, as in etcd or
//     ZooKeeper): it returns the fence when the caller is first, or the
//     predecessor to wait for. Fair waiting needs it.
//   - FairOnly: a Queue whose queue is for Fair waiters only; default-mode
//     waiters poll with Acquire (a store without notifications, where a
//     turn in the queue costs several requests and an attempt one).
//   - FireClaimer: a place for the fire claims of cronlock's Scheduler
//     (package internal/fireclaim), so that a Scheduler needs no Redis.
//   - LossNotifier: a way to end leases as soon as the store knows their
//     holdings ended (a ZooKeeper session expiry).
//   - Named: the store's name, for the Locker's messages about it.
//   - LeftNothing: a way to tell that a failed acquisition took nothing
//     the Locker must give back.
//   - Diagnoser: the last error the store's client saw reaching the store,
//     for the Locker's error when a request was not answered in time.
//   - Logging: the Locker's logger, for the store's own warnings.
//   - Inspector: a read-only report of a lock's state, and a listing of
//     a prefix's locks (Locker.Inspect, Locker.Locks), with the holder
//     description the store keeps beside a holding (inspect.go). Every
//     store offers it.
//   - Waits: a store whose waiters wait, and whose releases hand the lock
//     on, its own way (the Redis stores): the Locker runs the store's
//     Policy, and lends it a Host for the lease steps (waits.go).
//
// The safety contract every store must keep, on which lockmw's argument
// rests (see package lockmw's documentation, "Safety"): when Acquire (or
// Queue.Enqueue) reports Acquired with ValidFrom v, the lock is held for
// the token, and nothing but a Release or Leave for that same token can
// end that holding before v + ttl on the store's clock; and the fence is
// strictly above the fence of every earlier holding of the same lock. A
// Renew reporting Owned, sent at time s, extends that to s + ttl.
package store

import (
	"context"
	"log/slog"
	"time"

	"github.com/lockmw/lockmw/internal/fireclaim"
)

// Key names one lock: the Locker's prefix and the user's key. A store
// derives the names of its objects from both; two Keys name the same lock
// exactly when both fields are equal.
type Key struct {
	Prefix string
	Name   string
}

// Store is what every store implements. Implementations must be safe for
// concurrent use. Errors are returned as they are; package lockmw wraps
// them (ErrUnavailable) unless they already match one of its sentinels.
type Store interface {
	// CheckTTL reports whether the store can keep a lock for ttl, with an
	// error matching lockmw.ErrInvalidOption that says what to use instead
	// when it cannot. Nothing is sent to the store.
	CheckTTL(ttl time.Duration) error
	// Acquire makes one attempt to take the lock for token, held for ttl
	// unless renewed. It never waits for the lock. renewed false means the
	// holding will never be renewed and must end by itself after ttl: a
	// store that keeps several holdings alive together (one etcd lease per
	// Locker and TTL) keeps this one apart. The store bounds the request
	// by ttl itself (a context deadline, or shorter client timeouts): the
	// Locker sets no bound of its own on an acquisition, and names the
	// error of one that ran out ttl (lockmw's unanswered.go).
	Acquire(ctx context.Context, k Key, token string, ttl time.Duration, renewed bool) (Reply, error)
	// Release ends token's holding of the lock, or takes token out of the
	// lock's queue, if it is there; another token's holding or entry is
	// never touched. It reports what it found.
	Release(ctx context.Context, k Key, token string) (Ownership, error)
	// Renew extends each request's holding if its token still holds the
	// lock, in as few round trips as the store can. It returns one result
	// per request, in order.
	Renew(ctx context.Context, reqs []RenewRequest) []RenewResult
	// Close stops whatever the store runs on its own. Locks still held
	// end by their TTL. It does not close the store's client.
	Close() error
}

// Reply is the outcome of an acquisition attempt that reached the store.
type Reply struct {
	// Acquired is true when token now holds the lock.
	Acquired bool
	// Fence is, when acquired, the holding's fencing token: above the fence
	// of every earlier holding of the lock.
	Fence uint64
	// ValidFrom is, when acquired, a time on the caller's monotonic clock
	// no later than the moment from which the store keeps the lock for
	// ttl: the lease's validity counts from there (usually when the
	// request, or the last confirmed renewal of what keeps the lock alive,
	// was sent).
	ValidFrom time.Time
	// HolderTTL is, when busy, the holder's remaining TTL; 0 if unknown.
	HolderTTL time.Duration
	// Seen is, when busy, a store-defined mark of the state the attempt
	// saw (etcd: the revision). Notifier.WaitFree and Queue.WaitTurn take
	// it back, so that no change after the attempt goes unnoticed.
	Seen int64
	// Predecessor is, for Queue.Enqueue when not first, the store's name
	// of the entry queued just before the caller's: Queue.WaitTurn waits
	// for it to end.
	Predecessor string
	// Counter is, for Queue.Enqueue when not first, the lock's fence
	// counter as the request saw it (or the entry's place, drawn from that
	// counter): a hand-over that Queue.WaitTurn reports later with a fence
	// not above it was made before the request ran, to an earlier queueing
	// of the token, and is stale. (A fence above it proves less where the
	// request draws its place before it waits on the lock's row, as
	// PostgreSQL's does: such a store also refuses, in WaitTurn, a
	// hand-over to another queueing than the one it last confirmed.) 0:
	// the store draws no such counter.
	Counter uint64
}

// Stale reports whether a hand-over with fence, reported to a waiter whose
// last busy step saw the lock's fence counter at seen (Reply.Counter, or a
// Waits store's own count), was made before that step ran: to an earlier
// queueing of the waiter's token, whose holding the Locker cannot date,
// and which had ended by then. Every policy ignores a stale hand-over.
func Stale(fence, seen uint64) bool { return fence <= seen }

// Ownership is what a compare-and-act step found.
type Ownership int

// What Release and Renew find.
const (
	// Owned: the caller's token held the lock; the step was done.
	Owned Ownership = iota + 1
	// Missing: the token holds nothing (it expired, or was released).
	Missing
	// Taken: another token holds what the caller's held.
	Taken
)

// RenewRequest asks to extend token's holding of a lock for ttl.
type RenewRequest struct {
	Key   Key
	Token string
	TTL   time.Duration
}

// RenewResult is one renewal's outcome: Ownership is valid when Err is nil.
type RenewResult struct {
	Ownership Ownership
	Err       error
}

// Notifier is a store that can tell when a lock may have become free.
type Notifier interface {
	// WaitFree returns nil when the lock of k may have become free since
	// the busy attempt that saw seen (Reply.Seen): a waiter retries then.
	// A spurious return is allowed; a missed one is not. It returns ctx's
	// error when ctx ends first, and a store error when it cannot watch.
	WaitFree(ctx context.Context, k Key, seen int64) error
}

// Backoff is a store without notifications that chooses how its waiters
// back off: between attempts, a default-mode waiter sleeps a jittered time
// in [d/2, d], d doubling from min up to max, and never past the holder's
// remaining TTL (Reply.HolderTTL) or the waiter's WithWait. A store whose
// attempt costs a database round trip and a write wants a longer range than
// Redis' 0.5–8 ms, the default. A Notifier's waiters use it only when the
// store could not watch.
type Backoff interface {
	// Backoff returns the range; 0 < min <= max.
	Backoff() (min, max time.Duration)
}

// Queue is a store whose lock is a queue of entries: the first entry holds
// the lock, and each other waits for the one before it to end. An entry is
// named by the token that queued it.
type Queue interface {
	// Enqueue puts token's entry at the end of the queue, unless it is
	// queued already (then it keeps its place; an entry that expired is
	// queued anew). When the entry is first, the reply is Acquired with
	// Fence and ValidFrom as for Store.Acquire; else it names the
	// Predecessor and Seen. renewed is as for Store.Acquire.
	Enqueue(ctx context.Context, k Key, token string, ttl time.Duration, renewed bool) (Reply, error)
	// WaitTurn returns once the predecessor named by r ended, or token's
	// own entry ended (expired, or handed the lock): the caller calls
	// Enqueue again. A store may wait on, until the caller is first and
	// the lock free. The store keeps token's entry alive while WaitTurn
	// waits. It returns ctx's error when ctx ends first.
	//
	// A store that learns that the lock was handed to token (a release
	// made token's entry the holder in its own step) reports it: Acquired,
	// with Fence and ValidFrom as for Enqueue, ValidFrom no later than the
	// moment from which the store keeps the handed holding for ttl. The
	// Locker makes the lease from it, without an Enqueue of its own, unless
	// the fence is not above the Counter of the waiter's last busy Enqueue
	// (a stale hand-over: it asks Enqueue then). Without such a report the
	// reply is zero. Enqueue, asked after a hand-over that WaitTurn did not
	// report, reports it too.
	WaitTurn(ctx context.Context, k Key, token string, ttl time.Duration, r Reply) (Reply, error)
	// Leave takes token's entry out of the queue; if the entry had become
	// first, that ends the holding. Store.Release does the same.
	Leave(ctx context.Context, k Key, token string) error
}

// FairOnly is a Queue whose queue is for Fair waiters only: a default-mode
// waiter of its Locker does not queue but retries Store.Acquire, as on a
// store without a queue (waiting for its Notifier, or backing off in its
// Backoff range), while Fair waiters go through Enqueue and WaitTurn. A
// store whose waiters poll wants it: there a turn in the queue costs
// several requests per poll, a plain attempt one. Order is kept as on
// every Queue: Store.Acquire takes the lock only when nobody holds it and
// no unexpired entry is queued, so a Fair waiter is never overtaken by a
// waiter that arrived after its entry was queued (default waiters wait
// while Fair waiters are queued).
type FairOnly interface {
	Queue
	// QueueIsFairOnly does nothing: it marks the store.
	QueueIsFairOnly()
}

// FireClaimer is a store that keeps the fire claims of cronlock's
// Scheduler: one record per job, named from the Locker's prefix, apart
// from every lock's objects, and kept without expiry.
type FireClaimer interface {
	// FireClaims returns the claims of the jobs of a Locker with prefix,
	// whose requests are bounded by ttl (the Locker's lease TTL: a claim
	// answered later than that may find its fire over). keep is how long
	// a claim record stays after a claim where the store expires records:
	// the Locker's retention, at least fireclaim.MinKeep.
	FireClaims(prefix string, ttl, keep time.Duration) fireclaim.Claims
}

// LossNotifier is a store that learns on its own that holdings ended
// before their TTL (a ZooKeeper session expired, and every node of it
// went): it tells the Locker at once, so that those leases end then rather
// than at their next renewal.
type LossNotifier interface {
	// NotifyLoss registers lost, called once per such event with the
	// tokens whose holdings ended and why. The Locker registers it before
	// its first acquisition; lost does not block on the store.
	NotifyLoss(lost func(tokens []string, why error))
}

// Named is a store that names itself ("etcd", "ZooKeeper") in the Locker's
// messages about it, such as a renewal it has not answered.
type Named interface {
	Name() string
}

// LeftNothing is a store that can tell, from the error of a failed Acquire
// or Enqueue, that the request left nothing behind for the Locker to give
// back: it never reached the store (no connection, a refused dial), the
// store refused it, or the store gave back what it took on its own (a
// quorum store rolls back each member). Without it, the Locker gives back
// whatever every failed request may have taken (newlease.go and cleanup.go of package
// lockmw), which is always safe: a give-back touches only the request's
// own token.
type LeftNothing interface {
	LeftNothing(err error) bool
}

// Diagnoser is a store whose client can say why the store did not answer:
// the Locker asks it when one of its requests ran out its bound (the lease
// TTL), and names the answer in the error it returns.
type Diagnoser interface {
	// Diagnose returns the last error the store's client saw reaching the
	// store (a refused or timed-out dial, a failed DNS lookup, a failed
	// handshake), naming the address it tried, or nil when it saw none (a
	// server that accepts connections but does not answer: a paused one).
	// It changes nothing in the store, and returns by the time ctx ends.
	Diagnose(ctx context.Context) error
}

// Logging is a store that logs through the Locker's logger
// (lockmw.WithLogger), such as New's one warning that the store could not
// be reached.
type Logging interface {
	// UseLogger gives the store the Locker's logger, before the Locker
	// returns from NewWithStore.
	UseLogger(logger *slog.Logger)
}
