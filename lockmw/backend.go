package lockmw

import (
	"context"
	"time"
)

// backend is the boundary between the lock logic (leases, waiting, renewal
// scheduling, telemetry) and the store that holds the locks. Every method is
// one compare-and-act step on the store; timing, validity and retries are the
// caller's. Implementations must be safe for concurrent use.
type backend interface {
	// acquire makes one attempt to take the lock for token with the given TTL.
	acquire(ctx context.Context, k lockRef, token string, ttl time.Duration) (acquireReply, error)
	// release deletes the lock if token still owns it.
	release(ctx context.Context, k lockRef, token string) (ownership, error)
	// renew extends each request's lock if its token still owns it, sending
	// all requests for one node in one round trip. It returns one result per
	// request, in order.
	renew(ctx context.Context, reqs []renewRequest) []renewResult
}

// acquireReply is the outcome of one acquire attempt that reached the store.
type acquireReply struct {
	acquired  bool
	fence     uint64        // when acquired: the new fencing token
	holderTTL time.Duration // when busy: the holder's remaining TTL, 0 if unknown
	queued    bool          // Redlock: the attempt queued the caller's wait entry (or may yet: no answer)
	// unsure (Redlock) is set when the first master failed without
	// answering (its reply lost, say): the attempt may have queued the
	// entry there all the same. It is not counted queued (no wake is
	// awaited on it), but the waiter must leave the queue.
	unsure bool
}

// ownership is what a compare-and-act script found under the lock key.
type ownership int

const (
	owned   ownership = iota + 1 // the caller's token: the action was done
	missing                      // no lock: expired or deleted
	taken                        // another owner's token: left untouched
)

// lostReason maps a failed compare-and-act to the reason the lease is lost.
func (o ownership) lostReason() LostReason {
	if o == taken {
		return LostTaken
	}
	return LostExpired
}

type renewRequest struct {
	keys  lockRef
	token string
	ttl   time.Duration
}

type renewResult struct {
	ownership ownership // valid when err is nil
	err       error
}

// waitBackend is what a backend offers for waiting without polling:
// release notifications and fair queues. The Redis backend has it.
type waitBackend interface {
	releaseHandoff(ctx context.Context, k lockRef, token, early string, earlyFence uint64) (handoff, error)
	unlock(ctx context.Context, k lockRef, token string) (o ownership, fair bool, err error)
	transfer(ctx context.Context, k lockRef, token, to string, ttl time.Duration, force bool) (transferReply, error)
	fairAcquire(ctx context.Context, k lockRef, token string, ttl time.Duration, entry string, mode fairMode) (fairReply, error)
	enqueue(ctx context.Context, k lockRef, entry string) (bool, error)
	leave(ctx context.Context, k lockRef, entry, token string) (bool, error)
	fairQueued(ctx context.Context, k lockRef) (bool, error)
	subscriber() *subscriber
	close()
}
