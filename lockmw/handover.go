package lockmw

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// This file is an early hand-over: a lock handed to a waiter of this Locker
// before the store confirmed it (handover, made by release.go's handEarly
// and handEarlyFair), and the lease made from it (newEarlyLease).
//
// Safety (doc.go, "Safety: how a lease becomes live": Early hand-over;
// argued for the one store that hands over, in
// lockmw/internal/redisstore, safety.go, "How a lease becomes live"). An
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
// requests for the lock (its release) wait for that answer (see
// Lease.release), so none can reach the store before the transfer does.
type handover struct {
	fence    uint64
	deadline time.Time
	done     chan struct{} // closed when settled

	mu      sync.Mutex
	lease   *Lease // the waiter's, once made
	settled bool
	sentAt  time.Time  // when settled and confirmed: the transfer's send time
	reserve uint64     // when settled and confirmed: the next reserved fence, or 0
	next    string     // when settled and confirmed, fair: the waiter first in line, or ""
	lost    *LostError // when settled: the transfer found the lock gone
}

func newHandover(fence uint64, deadline time.Time) *handover {
	return &handover{fence: fence, deadline: deadline, done: make(chan struct{})}
}

// wait returns once h is settled, or its deadline has passed (the
// releasing lease's token is gone from the store by then), or ctx ends: a
// waiter that gives up a lock handed to it early releases it after that,
// not before the hand-over reaches the store.
func (h *handover) wait(ctx context.Context) {
	t := time.NewTimer(time.Until(h.deadline))
	defer t.Stop()
	select {
	case <-h.done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// attach gives h the waiter's lease, applying the answer if it is in.
func (h *handover) attach(l *Locker, s *Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lease = s
	if h.settled {
		h.apply(l)
	}
}

// settle records the transfer's answer, applying it if the lease is made. An
// answer that never came (the store unreachable) is not settled: the lease
// ends at its deadline.
func (h *handover) settle(l *Locker, sentAt time.Time, reserve uint64, next string, lost *LostError) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.settled, h.sentAt, h.reserve, h.next, h.lost = true, sentAt, reserve, next, lost
	close(h.done)
	if h.lease != nil {
		h.apply(l)
	}
}

// apply confirms or ends h.lease. Caller holds h.mu.
func (h *handover) apply(l *Locker) {
	if h.lost != nil {
		l.keeper.lose(h.lease, h.lost)
		return
	}
	if !h.lease.fair && h.reserve != 0 {
		sentAt := h.sentAt
		h.lease.reservedAt.Store(&sentAt)
	}
	h.lease.reserved.Store(h.reserve)
	h.lease.next.Store(&h.next)
	l.keeper.confirm(h.lease, h.sentAt)
}

// testHookHandedEarly, when set by a test, runs after a waiter was handed
// a lock early and before the transfer is sent.
var testHookHandedEarly func()

// minEarlyValidity is how much validity a releasing lease must have left
// for its successor to start before the store confirms the hand-over.
func minEarlyValidity(ttl time.Duration) time.Duration { return max(ttl/4, 10*time.Millisecond) }

// newEarlyLease makes the lease for a lock handed over by h before the store
// confirmed it (see handover). A hand-over whose deadline has passed when
// the waiter gets to it (a late goroutine) is given back, never returned.
func (l *Locker) newEarlyLease(a *acquisition, token string, h *handover, fair bool) (*Lease, error) {
	if late := l.keeper.now().Sub(h.deadline); late >= 0 {
		// The transfer may still be on the wire: give the lock back once
		// its answer is in (h.wait no longer waits, its deadline passed),
		// or after the TTL at most.
		settled := time.NewTimer(a.cfg.ttl)
		select {
		case <-h.done:
		case <-settled.C:
		}
		settled.Stop()
		l.giveBack(a.opCtx, a.lock, token, a.cfg.ttl, fair, h)
		return nil, unavailable("acquire", a.key,
			fmt.Errorf("the lock was handed over, but its validity had ended %v before the waiter took it", late))
	}
	s := l.makeLease(a, token, h.fence, time.Now(), fair)
	s.early = h
	if !l.keeper.addPending(s, h.deadline) {
		s.cancel(ErrClosed)
		l.giveBack(a.opCtx, a.lock, token, a.cfg.ttl, fair, h)
		return nil, ErrClosed
	}
	h.attach(l, s)
	return s, nil
}
