package redisstore

import "github.com/lockmw/lockmw/lockmw/internal/store"

// This file is what package lockmw's white-box tests see of a Redis
// policy: a lock's waiters in a Locker's rooms, a lease's reserved fence,
// a hand-over's outcome, and a hook into early hand-overs. Nothing else
// calls it.

// RoomView is what a Locker's policy knows of one lock's waiters in its
// process.
type RoomView struct {
	Defaults int // default-mode waiters, in arrival order
	Fair     int // fair waiters and holders
	// Ahead: the first default-mode waiter is known to have arrived before
	// every fair waiter queued now (a release may hand it the lock early).
	Ahead bool
	// Woken: the first default-mode waiter has a wake it has not taken.
	Woken bool
}

// Room returns the view of k's room (zero when nobody waits).
func (rs *roomSet) Room(k store.Key) RoomView {
	rs.roomsMu.Lock()
	defer rs.roomsMu.Unlock()
	r := rs.rooms[k]
	if r == nil {
		return RoomView{}
	}
	v := RoomView{Defaults: len(r.defaults)}
	for _, w := range r.fair {
		if w.wake == nil {
			v.Fair++
		}
	}
	if len(r.defaults) > 0 {
		v.Ahead, v.Woken = r.defaults[0].aheadOfQueue, len(r.defaults[0].wake) > 0
	}
	return v
}

// SetHandedEarly sets the hook run after a waiter was handed a lock early
// and before the transfer is sent (nil: none). Not safe while Lockers run.
func SetHandedEarly(f func()) { testHookHandedEarly = f }

// Reserved is the fence reserved for the lease's hand-over to a waiter of
// its Locker, or 0.
func (s *leaseState) Reserved() uint64 { return s.reserved.Load() }

// Refused reports, once h is settled, that the store refused the
// hand-over.
func (h *handover) Refused() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost != 0
}

// JoinRoom puts a waiter with token into k's room, as a waiting Acquire
// does, and returns its leave: out of the room and, by the cleaner, out of
// the wait queue, where entry is taken to be queued.
func (l *wakePolicy) JoinRoom(k store.Key, token, entry string) (leave func()) {
	w := &waiter{token: token, wake: make(chan struct{}, 1)}
	l.roomsMu.Lock()
	r := l.join(k)
	r.fair[w.token] = w
	l.roomsMu.Unlock()
	return func() { l.leaveWakeQueue(r, w, entry, true) }
}
