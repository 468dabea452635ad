package lockmw

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file hands a lock to a waiter of this Locker: one the store granted
// to it (handTo), or one handed over early, before the store confirms it
// (handEarly, handEarlyFair; see handover).
//
// Safety (doc.go, "Safety: how a lease becomes live": Transfer, Fair
// grant, Early hand-over; argued for the one store that hands over, in
// lockmw/internal/redisstore, safety.go, "How a lease becomes live"). A
// grant is dated from a time known to precede it, and a grant whose fence
// is not above the fence counter the waiter's last busy attempt saw is
// stale and ignored (handTo). An early hand-over's lease is valid
// until the earlier of the releaser's deadline and the transfer's send time
// plus the waiter's TTL less drift, fixed before the transfer is sent
// (earlyDeadline), and is not renewed until the transfer's answer confirms
// it or ends it as lost (settle).

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

// handTo gives the lock, just granted to token by the store, to its waiter
// in this Locker. validFrom is when the grant's request left, if this Locker
// sent it; zero when only the waiter's own last attempt bounds it. reserved
// and next are what the grant left for the waiter's own hand-over (see
// grantInfo). A token nobody here waits for any more is released, so the
// lock moves on.
func (l *grantPolicy) handTo(lock store.Key, token string, fence uint64, validFrom time.Time, reserved uint64, next string) {
	l.roomsMu.Lock()
	var w *waiter
	if r := l.rooms[lock]; r != nil {
		w = r.fair[token]
	}
	if w != nil {
		switch {
		case w.delivered:
			// A duplicate: the waiter already has the lock.
		case fence <= w.busyCounter:
			// Made before an attempt of w's that found the lock held by
			// another owner: this grant had ended by then (a message that
			// came late). The lock is not w's; w waits on.
			l.logger.Debug("lockmw: ignoring a stale grant", slog.String("key", lock.Name), slog.String("store", l.store),
				slog.Uint64("fence", fence), slog.Uint64("seen", w.busyCounter))
		default:
			w.delivered = true
			// Both are lower bounds of when the store set the lock: the
			// grant came after w's last busy attempt ran (its fence is above
			// the counter that attempt saw). Take the later.
			if w.busySent.After(validFrom) {
				validFrom = w.busySent
			}
			l.flights.start() // done once w has made its lease or given the lock back
			w.grant <- grantInfo{fence: fence, validFrom: validFrom, reserved: reserved, next: next}
		}
		l.roomsMu.Unlock()
		return
	}
	l.roomsMu.Unlock()
	l.flights.start()
	go l.releaseStray(lock, token, nil)
}

// granted wakes the fair waiter k was handed to (g); ok false: the store's
// message could not be read.
func (l *grantPolicy) granted(k store.Key, g store.Grant, ok bool) {
	if !ok {
		l.logger.Warn("lockmw: ignoring a malformed grant message", slog.String("key", k.Name), slog.String("store", l.store))
		return
	}
	l.handTo(k, g.Token, g.Fence, time.Time{}, g.Reserved, g.Next)
}

// handEarlyFair hands the lock of keys to this Locker's fair waiter with
// token, before the store is told: it returns the hand-over to settle, or
// nil when that waiter is gone or already has the lock.
func (l *grantPolicy) handEarlyFair(lock store.Key, token string, fence uint64, deadline time.Time) *handover {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	r := l.rooms[lock]
	if r == nil {
		return nil
	}
	w := r.fair[token]
	if w == nil || w.wake != nil || w.delivered {
		return nil // gone, a default-mode waiter, or granted already
	}
	w.delivered = true
	h := newHandover(fence, l.earlyDeadline(deadline, w.ttl))
	l.flights.start() // done once w has made its lease or given the lock back
	w.grant <- grantInfo{early: h}
	return h
}

// handEarly hands the lock of keys to the first default-mode waiter of this
// Locker, before the store is told: it returns that waiter and the hand-over
// to settle, or nil when nobody waits or that waiter may not go first.
// reservedAt is when the transfer that gave the releasing lease the lock
// (and reserved fence) was sent.
//
// Fair order (doc.go, "Waiting": Fair; how the store that hands over
// keeps it: lockmw/internal/redisstore, doc.go, "Waiting and hand-overs",
// Fair order): a fair waiter is never overtaken by one that arrived after
// it. The releaser does not know who joined the lock's queue since it got
// the lock, so the waiter goes first only
// when it is known to have arrived before every fair waiter queued now: a
// check of the lock made after it arrived found no fair waiter queued
// (aheadOfQueue), or it was waiting before reservedAt, when the releaser's
// own transfer found none. Any fair waiter queued now queued after that
// check, so after the waiter; the transfer keeps its place, and the
// waiter's release serves it. Otherwise the release goes through the store
// (releaseTokenOf), which hands the lock to the queue first.
func (l *grantPolicy) handEarly(lock store.Key, fence uint64, deadline, reservedAt time.Time) (*waiter, *handover) {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	var w *waiter
	if r := l.rooms[lock]; r != nil && r.fairBusy == 0 {
		// (With fair waiters of its own queued, the lock goes to them: the
		// store's transfer step gives way to the queue.)
		w = r.nextDefault()
	}
	if w == nil || !(w.aheadOfQueue || w.arrived.Before(reservedAt)) {
		return nil, nil
	}
	w.delivered = true
	h := newHandover(fence, l.earlyDeadline(deadline, w.ttl))
	l.flights.start() // done once w has made its lease or given the lock back
	w.grant <- grantInfo{early: h}
	return w, h
}

// earlyDeadline is the validity of a lease handed over early by a lease
// valid until releaserDeadline, to a waiter with TTL ttl, the transfer not
// yet sent: see handover. Called before the transfer is sent, so now is no
// later than its send time.
func (l *grantPolicy) earlyDeadline(releaserDeadline time.Time, ttl time.Duration) time.Time {
	d := time.Now().Add(ttl - l.cfg.drift(ttl))
	if releaserDeadline.Before(d) {
		return releaserDeadline
	}
	return d
}
