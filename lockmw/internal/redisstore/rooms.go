package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file keeps the waiting rooms of the policies whose waiters wait in
// rooms (grantPolicy, wakePolicy): for each key, this Locker's waiters (and
// fair holders) in one room, and the locks this Locker found hot (markHot).
// How each mode waits in them is in wait_default.go, wait_fair.go and
// wait_wake.go; how a lock is handed to a waiter is in release.go and
// handover.go.

// roomSet is a Locker's rooms, and the locks it found hot (see markHot):
// the state of the policies whose waiters wait in rooms (grantPolicy,
// wakePolicy).
type roomSet struct {
	roomsMu sync.Mutex
	rooms   map[store.Key]*room     // by lock
	hot     map[store.Key]time.Time // by lock: see markHot
}

func newRoomSet() *roomSet {
	return &roomSet{rooms: make(map[store.Key]*room), hot: make(map[store.Key]time.Time)}
}

// room is a Locker's waiters (and fair holders) for one key. Guarded by
// roomSet.roomsMu.
type room struct {
	lock     store.Key
	refs     int                // waiters and fair holders in the room
	defaults []*waiter          // default-mode waiters; defaults[0] retries on a release
	fair     map[string]*waiter // fair waiters and holders, and default waiters, by token
	fairBusy int                // fair waiters queued or holding: the lock is busy
}

// waiter is one Acquire call waiting in a room.
type waiter struct {
	token     string
	ttl       time.Duration
	wake      chan struct{}  // default mode: a release was heard, or you lead now
	grant     chan grantInfo // fair mode: the lock was handed over
	delivered bool           // fair mode: a grant was sent on grant (or claimed)
	passOn    bool           // default mode: leaves its room to line up in the queue
	heldHere  bool           // default mode: stayed for a hand-over by this Locker's release (holdEnded)
	// arrived and aheadOfQueue are, in default mode, when w joined its
	// room, and whether a check of the lock made since found no fair
	// waiter queued for it: w then arrived before every fair waiter queued
	// now, and may be handed the lock ahead of them (see handEarly).
	arrived      time.Time
	aheadOfQueue bool
	// busySent and busyCounter are, in fair mode, the sent time of the last
	// attempt that found the lock held (or of the request that queued w)
	// and the fence counter that attempt saw. A grant whose fence is above
	// busyCounter was made after that attempt ran, so after busySent; one
	// whose fence is not was made before it, and had ended by then: it is
	// stale (see handTo).
	busySent    time.Time
	busyCounter uint64
}

// grantInfo is a hand-over: the waiter's fence, and a time no later than
// the moment the store set the lock for it (its validity counts from
// there).
type grantInfo struct {
	fence     uint64
	validFrom time.Time
	reserved  uint64    // a fence reserved for the next local hand-over, or 0
	next      string    // fair: the entry of the waiter first in line after this one, or ""
	early     *handover // set instead when the waiter starts before the store confirms
}

// join returns the room for keys with one more reference. Caller holds
// rs.roomsMu.
func (rs *roomSet) join(lock store.Key) *room {
	r := rs.rooms[lock]
	if r == nil {
		r = &room{lock: lock, fair: make(map[string]*waiter)}
		rs.rooms[lock] = r
	}
	r.refs++
	return r
}

// unref drops one reference to r. Caller holds rs.roomsMu.
func (rs *roomSet) unref(r *room) {
	if r.refs--; r.refs == 0 {
		delete(rs.rooms, r.lock)
	}
}

// watchUntil listens for k's events on w (releases, or with grants the
// grants and wakes for this Locker's waiters), giving up when ctx ends or,
// for a bounded wait (WithWait), at giveUp. The store may keep listening
// for grants and wakes a while after their last waiter.
func watchUntil(ctx context.Context, w watcher, giveUp time.Time, k store.Key, grants bool) error {
	if !giveUp.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, giveUp)
		defer cancel()
	}
	return w.Watch(ctx, k, grants)
}

// hotFor is how long a lock stays hot after a release of this Locker
// handed it on with others still queued.
const hotFor = time.Second

// maxHot bounds the hot locks a Locker remembers.
const maxHot = 1024

// markHot records that the lock of keys was just handed on with waiters
// still queued behind the new holder: an Acquire of this Locker for it in
// the next hotFor joins the queue with one enqueue step (granter's
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

// defaultHead returns the token and TTL of the first default-mode waiter for
// keys in this Locker, if any: a release hands the lock straight to it.
func (l *grantPolicy) defaultHead(lock store.Key) (string, time.Duration) {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	if r := l.rooms[lock]; r != nil {
		if w := r.nextDefault(); w != nil {
			return w.token, w.ttl
		}
	}
	return "", 0
}

// nextDefault returns the first default-mode waiter of r that has not been
// handed the lock yet, or nil. One that has may still be in r, giving the
// lock back: a release must not hand it the lock again. Caller holds
// Locker.roomsMu.
func (r *room) nextDefault() *waiter {
	for _, w := range r.defaults {
		if !w.delivered {
			return w
		}
	}
	return nil
}

// grantPolicy is the policy of New's store (a granter): the Locker that
// lends it leases (h), and the rooms where its waiters wait.
type grantPolicy struct {
	h store.Host
	*roomSet
	waits granter // the Locker's store (Store)
}

// signal wakes whoever waits on c, unless a wake is pending already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// sleep waits d (cut at left, when not 0), or until wake delivers (woken),
// a.Ctx ends or the Locker h closes.
func sleep(h store.Host, a *store.Acquisition, d, left time.Duration, wake <-chan struct{}) (woken bool) {
	_, _, woken = pauseFor(h, a, d, left, wake, nil)
	return woken
}

// pauseFor is sleep that also returns a hand-over delivered on grant.
func pauseFor(h store.Host, a *store.Acquisition, d, left time.Duration, wake <-chan struct{}, grant <-chan grantInfo) (g grantInfo, granted, woken bool) {
	if left > 0 {
		d = min(d, left)
	}
	if d <= 0 {
		return g, false, false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case g = <-grant:
		return g, true, false
	case <-wake:
		return g, false, true
	case <-t.C:
	case <-a.Ctx.Done():
	case <-h.Closing():
	}
	return g, false, false
}
