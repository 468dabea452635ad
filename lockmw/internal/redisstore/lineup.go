package redisstore

import (
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
// (package lockmw's doc.go, "Safety: how a lease becomes live": Fair grant;
// for this store's steps, safety.go, "How a lease becomes live"): the queue
// only decides who is next.

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
func (l *grantPolicy) linesUp(lock store.Key, stay bool) bool {
	if stay || l.h.Holds(lock) {
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
