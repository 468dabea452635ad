package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is an early hand-over: a lock handed to a waiter of this Locker
// before the store confirmed it (handover, made by release.go's handEarly
// and handEarlyFair), the lease made from it (newEarlyLease, through the
// Host), and what the grant policy keeps on a lease (leaseState).
//
// Safety (package lockmw's doc.go, "Safety: how a lease becomes live":
// Early hand-over; argued for this store in safety.go, "How a lease becomes
// live"). An
// early hand-over's lease is valid until the earlier of the releaser's
// deadline and the transfer's send time plus the waiter's TTL less drift,
// fixed before the transfer is sent (earlyDeadline), and is not renewed
// until the transfer's answer confirms it or ends it as lost (settle).

// handover is a lock handed to a waiter of the same Locker before the store
// confirmed it. The waiter may start at once. Until the transfer that
// replaces the releaser's token with the waiter's is answered, the store
// holds the lock for one of the two tokens: the releaser's until at least
// the releaser's deadline, and the waiter's, once the transfer lands, for at
// least the waiter's TTL from the moment the transfer was sent. So the
// waiter's lease is valid until the earlier of the releaser's deadline and
// that send time plus the waiter's TTL less drift (deadline, fixed before
// the transfer is sent), and is not renewed; the answer confirms it from the
// send time with the waiter's TTL, or ends it as lost. The waiter's own
// requests for the lock (its release) wait for that answer (the Locker holds
// them back until Wait returns: store.Settling), so none can reach the
// store before the transfer does.
type handover struct {
	fence    uint64
	deadline time.Time
	fair     bool          // the waiter is a fair one
	done     chan struct{} // closed when settled

	mu      sync.Mutex
	host    store.Host
	lease   store.Lease // the waiter's, once made
	state   *leaseState // its state
	settled bool
	sentAt  time.Time       // when settled and confirmed: the transfer's send time
	reserve uint64          // when settled and confirmed: the next reserved fence, or 0
	next    string          // when settled and confirmed, fair: the waiter first in line, or ""
	lost    store.Ownership // when settled and refused: what the transfer found (else 0)
}

func newHandover(fence uint64, deadline time.Time, fair bool) *handover {
	return &handover{fence: fence, deadline: deadline, fair: fair, done: make(chan struct{})}
}

// Wait returns once h is settled, or its deadline has passed (the
// releasing lease's token is gone from the store by then), or ctx ends: a
// waiter that gives up a lock handed to it early releases it after that,
// not before the hand-over reaches the store.
func (h *handover) Wait(ctx context.Context) {
	t := time.NewTimer(time.Until(h.deadline))
	defer t.Stop()
	select {
	case <-h.done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// Settled is closed once h is settled.
func (h *handover) Settled() <-chan struct{} { return h.done }

// attach gives h the waiter's lease, applying the answer if it is in.
func (h *handover) attach(host store.Host, s store.Lease, st *leaseState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.host, h.lease, h.state = host, s, st
	if h.settled {
		h.apply()
	}
}

// settle records the transfer's answer (lost: refused, having found
// that), applying it if the lease is made. An answer that never came (the
// store unreachable) is not settled: the lease ends at its deadline.
func (h *handover) settle(sentAt time.Time, reserve uint64, next string, lost store.Ownership) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.settled, h.sentAt, h.reserve, h.next, h.lost = true, sentAt, reserve, next, lost
	close(h.done)
	if h.lease != nil {
		h.apply()
	}
}

// apply confirms or ends h.lease. Caller holds h.mu.
func (h *handover) apply() {
	if h.lost != 0 {
		h.host.Lose(h.lease, h.lost)
		return
	}
	if !h.fair && h.reserve != 0 {
		sentAt := h.sentAt
		h.state.reservedAt.Store(&sentAt)
	}
	h.state.reserved.Store(h.reserve)
	h.state.next.Store(&h.next)
	h.host.Confirm(h.lease, h.sentAt)
}

// testHookHandedEarly, when set by a test, runs after a waiter was handed
// a lock early and before the transfer is sent.
var testHookHandedEarly func()

// minEarlyValidity is how much validity a releasing lease must have left
// for its successor to start before the store confirms the hand-over.
func minEarlyValidity(ttl time.Duration) time.Duration { return max(ttl/4, 10*time.Millisecond) }

// newEarlyLease makes the lease for a lock handed over by h before the store
// confirmed it (see handover; the Host gives back one whose deadline has
// passed when the waiter gets to it).
func newEarlyLease(host store.Host, a *store.Acquisition, token string, h *handover) (store.Lease, error) {
	st := new(leaseState)
	s, err := host.NewEarlyLease(a, token, h.fence, h.deadline, h.fair, st, h)
	if s != nil {
		h.attach(host, s, st)
	}
	return s, err
}

// leaseState is what the grant policy keeps on a lease (store.Held.State):
// what its release may hand on to a waiter of the same Locker before the
// store confirms it.
type leaseState struct {
	// reserved is a fence the counter already passed, set when the lock
	// came by a transfer that saw nobody else waiting: a waiter of this
	// Locker may get it, and start before the store confirms its hand-over.
	reserved atomic.Uint64
	// reservedAt is when the transfer that reserved it was sent (nil until
	// known): that transfer found no fair waiter queued, so a waiter of
	// this Locker already waiting then arrived before every fair waiter
	// queued since.
	reservedAt atomic.Pointer[time.Time]
	// next is, for a fair lease handed over by a release, the queue entry
	// of the waiter first in line then (that waiter is next unless it gives
	// up); "" or nil when none was known.
	next atomic.Pointer[string]
}
