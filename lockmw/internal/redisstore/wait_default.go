package redisstore

import (
	"errors"
	"log/slog"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is how Acquire waits in default mode, without polling: the store
// sends a release notice for the lock (watcher). Each Locker keeps its
// waiters for a key in a room, in arrival order; only the first retries when
// a release is heard (or when the holder's TTL, learnt from the failed
// attempt, runs out), and later arrivals queue behind it instead of racing
// it. A release thus costs one retry per waiting process, not one per
// waiting goroutine.
//
// Waiting adds no way to become live (package lockmw's doc.go, "Safety: how
// a lease becomes live", and, for this store's hand-overs, safety.go, "How a
// lease becomes live"): a default waiter's lease comes from an attempt
// (Host.Attempt), or from a release of this Locker that handed it the lock
// (release.go, handover.go). A waiter that lines up in the
// lock's queue (lineUp, at the end of this file) waits as a Fair one does.

// waitGranter acquires on a store whose releases hand the lock over
// (granter): Fair waiters queue for grants (wait_fair.go); a
// default-mode waiter queues behind this Locker's waiters for the lock
// rather than race them, or lines up behind other Lockers' (lineup.go),
// or makes an attempt and, finding the lock held, waits in its room
// (waitDefault).
func (l *grantPolicy) waitGranter(a *store.Acquisition, wait bool) (store.Lease, error) {
	if a.Fair {
		return l.acquireFair(a, wait)
	}
	holderTTL := time.Duration(0)
	switch {
	case wait && l.hasDefaultWaiters(a.Key):
		// Queue behind this Locker's waiters rather than race them.
	case wait && l.isHot(a.Key) && l.linesUp(a.Key, false):
		// Waiters of other Lockers are queued: line up behind them (see
		// lineup.go) rather than make an attempt that finds the lock held.
		return l.lineUp(a)
	default:
		lease, reply, err := l.h.Attempt(a)
		if lease != nil || err != nil {
			return lease, err
		}
		ttl := reply.HolderTTL
		if !wait || (!a.GiveUp.IsZero() && !time.Now().Before(a.GiveUp)) {
			return nil, l.h.NotAcquired(a, ttl)
		}
		if l.linesUp(a.Key, false) {
			return l.lineUp(a)
		}
		holderTTL = ttl
	}
	lease, lineUp, err := l.waitDefault(a, holderTTL, false)
	if lineUp {
		return l.lineUp(a)
	}
	return lease, err
}

// waitDefault waits in key's room for a release and retries, as the room's
// first waiter, until it gets the lock. holderTTL is what the failed first
// attempt reported (0 when the call skipped it to queue behind others).
// lineUp reports, with no lease and no error, an attempt that found the
// lock held by another Locker: the caller lines up in the lock's queue
// instead (see lineup.go), and the room's next waiter is woken to do the
// same.
func (l *grantPolicy) waitDefault(a *store.Acquisition, holderTTL time.Duration, stay bool) (lease store.Lease, lineUp bool, err error) {
	d := &roomWay{l: l, holderTTL: holderTTL, retry: true, stay: stay}
	d.w = &waiter{token: l.h.NewToken(), ttl: a.TTL, wake: make(chan struct{}, 1), grant: make(chan grantInfo, 1), arrived: time.Now()}
	l.roomsMu.Lock()
	d.r = l.join(a.Key)
	d.r.defaults = append(d.r.defaults, d.w)
	d.r.fair[d.w.token] = d.w
	l.roomsMu.Unlock()

	// Once watching, retry: a release may have come since the attempt.
	if err := watchUntil(a.Ctx, l.waits, a.GiveUp, a.Key, false); err == nil {
		d.watching = true
	} else if a.Ctx.Err() != nil {
		d.Done(a, nil, nil)
		return nil, false, l.h.CtxErr(a)
	} else {
		l.h.Logger().Debug("lockmw: waiting without release notifications", slog.String("key", a.Key.Name), slog.String("store", l.h.Name()), slog.Any("error", err))
	}
	lease, err = l.h.WaitLoop(a, true, d)
	if errors.Is(err, errLineUp) {
		return nil, true, nil
	}
	return lease, false, err
}

// errLineUp ends a roomWay's wait when its waiter lines up in the lock's
// queue instead.
var errLineUp = errors.New("lockmw: line up in the lock's queue")

// roomWay is a default-mode waiter in its Locker's room for a key, on a
// Granter: only the room's first waiter tries, when a release is heard
// (or the holder's TTL, learnt from its attempt, runs out); a release of
// this Locker may hand it the lock instead (release.go).
type roomWay struct {
	l         *grantPolicy
	r         *room
	w         *waiter
	holderTTL time.Duration // from the room's last attempt of w
	retry     bool          // a release was heard, or the TTL ran out: try if w leads
	watching  bool
	stay      bool // w waits in its room, never in the lock's queue (see lineUp)
}

func (d *roomWay) Try(a *store.Acquisition) (store.Lease, store.Reply, error) {
	l, w := d.l, d.w
	retry := d.retry
	d.retry = false
	if !retry || !l.leads(d.r, w) {
		return nil, store.Reply{HolderTTL: d.holderTTL}, nil
	}
	lease, reply, err := l.h.Attempt(a)
	if lease != nil || err != nil {
		return lease, reply, err
	}
	d.holderTTL = reply.HolderTTL
	if l.linesUp(a.Key, d.stay) && (a.GiveUp.IsZero() || time.Now().Before(a.GiveUp)) {
		l.roomsMu.Lock()
		// Not if a release of this Locker handed w the lock meanwhile: w
		// takes it in pause.
		lineUp := !w.delivered
		w.passOn = lineUp
		l.roomsMu.Unlock()
		if lineUp {
			return nil, reply, errLineUp
		}
	}
	if l.h.Holds(a.Key) {
		// The lock is this Locker's, or its release is under way: w stays
		// for the hand-over in-process. Should that release hand the lock
		// to another Locker instead, or free it, its end wakes w
		// (HoldEnded): a wake that came while it was under way
		// (wakeDefaultHead) found the lock still counted as this Locker's.
		l.roomsMu.Lock()
		w.heldHere = true
		l.roomsMu.Unlock()
		if !l.h.Holds(a.Key) {
			signal(w.wake) // it ended meanwhile: try again at once
		}
	}
	l.checkAheadOfQueue(a, w)
	return nil, reply, nil
}

// holdEnded runs when the release of a lease of this Locker for lock has
// ended (the lease no longer counts as holding it, see holds): the room's
// first default-mode waiter, if its last attempt stayed in the room for
// that release's hand-over (heldHere) and the release did not hand it the
// lock, tries again, and lines up if the lock went to another Locker.
func (l *grantPolicy) HoldEnded(lock store.Key) {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	r := l.rooms[lock]
	if r == nil || len(r.defaults) == 0 {
		return
	}
	if w := r.defaults[0]; w.heldHere && !w.delivered {
		w.heldHere = false
		signal(w.wake)
	}
}

// pause waits for a release (w.wake), the holder's TTL (or w's own), or
// the lock handed over by a release of this Locker (w.grant).
func (d *roomWay) Pause(a *store.Acquisition, _ store.Reply, left time.Duration) (store.Lease, error) {
	l, w := d.l, d.w
	sleep := d.holderTTL
	if sleep <= 0 {
		sleep = a.TTL
	}
	g, granted, _ := pauseFor(l.h, a, sleep, left, w.wake, w.grant)
	// Woken, or the holder's TTL (or the wait) ran out: retry.
	d.retry = true
	if !granted {
		return nil, nil
	}
	// A release in this Locker handed the lock over.
	defer l.h.Done()
	if g.early != nil {
		return newEarlyLease(l.h, a, w.token, g.early)
	}
	var st any
	if g.reserved != 0 {
		// A transfer's grant: validFrom is when it was sent.
		ls := new(leaseState)
		ls.reservedAt.Store(&g.validFrom)
		ls.reserved.Store(g.reserved)
		st = ls
	}
	return l.h.NewLease(a, w.token, g.fence, g.validFrom, false, st)
}

func (d *roomWay) Done(*store.Acquisition, store.Lease, error) {
	if d.watching {
		d.l.waits.Unwatch(d.r.lock, false)
	}
	d.l.leaveDefault(d.r, d.w)
}

// checkAheadOfQueue asks the store, once w is in its room and until an
// answer says so, whether fair waiters are queued for the lock: if none is,
// w arrived before every fair waiter that queues later, and a release of
// this Locker may hand it the lock ahead of them (see handEarly). An error
// leaves w as it was: it is then not handed the lock early.
func (l *grantPolicy) checkAheadOfQueue(a *store.Acquisition, w *waiter) {
	l.roomsMu.Lock()
	known := w.aheadOfQueue || w.delivered // (handed the lock meanwhile: take it)
	l.roomsMu.Unlock()
	if known {
		return
	}
	queued, err := l.waits.FairQueued(a.Ctx, a.Key)
	if err != nil {
		l.h.Logger().Debug("lockmw: could not check the fair queue", slog.String("key", a.Key.Name), slog.String("store", l.h.Name()), slog.Any("error", err))
		return
	}
	if !queued {
		l.roomsMu.Lock()
		w.aheadOfQueue = true
		l.roomsMu.Unlock()
	}
}

// leads reports whether w is the first default waiter of r.
func (l *grantPolicy) leads(r *room, w *waiter) bool {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	return len(r.defaults) > 0 && r.defaults[0] == w
}

// leaveDefault takes w out of r. If w led the room, the next waiter leads
// now; it is woken to retry unless w took the lock (then the next release
// will wake it). A lock handed to w that it did not take is passed on.
func (l *grantPolicy) leaveDefault(r *room, w *waiter) {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	delete(r.fair, w.token)
	select {
	case g := <-w.grant:
		go l.releaseStray(r.lock, w.token, g.early)
	default:
	}
	for i, x := range r.defaults {
		if x == w {
			r.defaults = append(r.defaults[:i], r.defaults[i+1:]...)
			if i == 0 && len(r.defaults) > 0 && (len(w.wake) > 0 || w.passOn) {
				// Pass on a release w heard but did not use, or, when w
				// lines up in the queue, its lead: the next waiter retries
				// and lines up too.
				signal(r.defaults[0].wake)
			}
			break
		}
	}
	l.unref(r)
}

// hasDefaultWaiters reports whether this Locker already has default-mode
// waiters for keys: a new Acquire then queues behind them without trying.
func (l *grantPolicy) hasDefaultWaiters(lock store.Key) bool {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	r := l.rooms[lock]
	return r != nil && len(r.defaults) > 0
}

// releaseHeard wakes the first default waiter of k: k was released.
func (l *grantPolicy) releaseHeard(k store.Key) {
	l.roomsMu.Lock()
	if r := l.rooms[k]; r != nil && len(r.defaults) > 0 {
		signal(r.defaults[0].wake)
	}
	l.roomsMu.Unlock()
}

// lineUp waits for key in the lock's queue, as a Fair waiter does. While the
// store moves the lock between its members, it may refuse the queue's steps
// longer than a waiter retries (granter's Moving; when and why:
// doc.go, Waiting and hand-overs): the
// waiter then waits in its room instead, on release notices, whose attempts
// need only the lock and its counter.
func (l *grantPolicy) lineUp(a *store.Acquisition) (store.Lease, error) {
	lease, err := l.acquireFair(a, true)
	if err == nil || a.Ctx.Err() != nil || !l.waits.Moving(err) {
		return lease, err
	}
	l.h.Logger().Debug("lockmw: waiting without the queue while the store moves the lock", slog.String("key", a.Key.Name), slog.String("store", l.h.Name()), slog.Any("error", err))
	lease, _, err = l.waitDefault(a, 0, true)
	return lease, err
}
