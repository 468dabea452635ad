package lockmw

import (
	"log/slog"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is how waiters of different Lockers (processes) take turns
// without a herd.
//
// A Locker's own waiters for a lock it holds wait in its room (rooms.go):
// its release hands the lock to the first of them, in-process. A waiter
// whose lock is held by another Locker lines up in the lock's queue in the
// store instead, whatever its mode: the holder's release hands the lock
// straight to the first live entry in the same step, and only that entry's
// Locker is told, by the store's grant message. A release thus wakes one
// waiter, not the first waiter of every process, and the lock is never free
// while waiters are queued, so nobody barges in between. Default mode keeps
// what it is for: a lock nobody waits on costs no queue bookkeeping, and a
// first attempt on a lock that is free takes it at once. The lease of a
// default waiter that came through the queue is released like a Fair one (by
// the store's hand-over step).
//
// The safety of a lease that becomes live this way is that of every grant
// (doc.go, "Safety: how a lease becomes live": Fair grant; for the store
// that hands over, lockmw/internal/redisstore, safety.go, "How a lease
// becomes live"): the queue only decides who is next.

// hotFor is how long a lock stays hot after a release of this Locker
// handed it on with others still queued.
const hotFor = time.Second

// maxHot bounds the hot locks a Locker remembers.
const maxHot = 1024

// markHot records that the lock of keys was just handed on with waiters
// still queued behind the new holder: an Acquire of this Locker for it in
// the next hotFor joins the queue with one enqueue step (Granter's
// Enqueue) instead of a full attempt that would find the lock held.
func (rs *roomSet) markHot(lock store.Key) {
	now := time.Now()
	rs.roomsMu.Lock()
	defer rs.roomsMu.Unlock()
	if len(rs.hot) >= maxHot {
		for k, t := range rs.hot {
			if now.Sub(t) >= hotFor {
				delete(rs.hot, k)
			}
		}
		if len(rs.hot) >= maxHot {
			clear(rs.hot)
		}
	}
	rs.hot[lock] = now
}

// isHotLocked reports whether the lock of keys is hot, forgetting it once
// it is not. Caller holds l.roomsMu.
func (rs *roomSet) isHotLocked(lock store.Key) bool {
	t, ok := rs.hot[lock]
	if ok && time.Since(t) >= hotFor {
		delete(rs.hot, lock)
		return false
	}
	return ok
}

// isHot is isHotLocked for a caller that does not hold l.roomsMu.
func (rs *roomSet) isHot(lock store.Key) bool {
	rs.roomsMu.Lock()
	defer rs.roomsMu.Unlock()
	return rs.isHotLocked(lock)
}

// wakeDefaultHead wakes the first default-mode waiter of keys, if any,
// after a release handed the lock to a queued waiter: the lock did not
// become free, so no release notification comes. The woken waiter retries
// and, finding the lock held by another Locker, lines up in the queue.
func (l *grantPolicy) wakeDefaultHead(lock store.Key) {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	if r := l.rooms[lock]; r != nil && len(r.defaults) > 0 {
		signal(r.defaults[0].wake)
	}
}

// linesUp reports whether a default-mode waiter for keys should line up in
// the lock's queue: the lock is neither held by this Locker (whose release
// would hand it over in-process) nor being handed to one of its waiters
// (between a release's transfer and the waiter's lease), and the waiter has
// not fallen back to its room (see lineUp).
func (l *grantPolicy) linesUp(lock store.Key, ac *acquireConfig) bool {
	if ac.stayInRoom || l.keeper.holds(lock) {
		return false
	}
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	if r := l.rooms[lock]; r != nil {
		for _, w := range r.fair {
			if w.delivered {
				return false
			}
		}
	}
	return true
}

// lineUp waits for key in the lock's queue, as a Fair waiter does. While the
// store moves the lock between its members, it may refuse the queue's steps
// longer than a waiter retries (Granter's Moving; when and why:
// lockmw/internal/redisstore, doc.go, Waiting and hand-overs): the
// waiter then waits in its room instead, on release notices, whose attempts
// need only the lock and its counter.
func (l *grantPolicy) lineUp(a *acquisition) (*Lease, error) {
	lease, err := l.acquireFair(a, true)
	if err == nil || a.opCtx.Err() != nil || !l.waits.Moving(err) {
		return lease, err
	}
	l.logger.Debug("lockmw: waiting without the queue while the store moves the lock", slog.String("key", a.key), slog.String("store", l.store), slog.Any("error", err))
	a.cfg.stayInRoom = true
	lease, _, err = l.waitDefault(a, 0)
	return lease, err
}
