package redisstore

import (
	"context"
	"log/slog"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file routes the grant policy's releases and grants: a released lock goes to
// this Locker's first default-mode waiter (the store's transfer step), to
// the first live waiter of the lock's queue (the store's hand-over step,
// granter's ReleaseHandoff), early to a waiter of this Locker before the
// store confirms it (handEarly, handEarlyFair; see handover.go), or is
// freed; a lock the store granted to a waiter of this Locker is handed to
// it (handTo, granted); and a lock handed to a waiter that is gone is given
// back (releaseStray).
//
// Safety: each hand-over made here is one of the ways a lease becomes live
// of package lockmw's doc.go, "Safety: how a lease becomes live" (Transfer,
// Fair grant, Early hand-over), argued for this store's steps in safety.go
// ("How a lease becomes live"). A
// grant is dated from a time known to precede it, and a grant whose fence
// is not above the fence counter the waiter's last busy attempt saw is
// stale and ignored (handTo). A lock handed over early is given back only
// once the hand-over has reached the store (see handover.Wait), so that no
// request for it reaches the store before the transfer does.

// releaseStray releases a lock granted to a waiter that is gone; when it
// was handed over early (h), once the hand-over has reached the store.
// The caller has started a flight for it (Host.Start).
func (l *grantPolicy) releaseStray(lock store.Key, token string, h *handover) {
	defer l.h.Done()
	ctx, cancel := context.WithTimeout(context.Background(), l.h.TTL())
	defer cancel()
	if h != nil {
		h.Wait(ctx)
	}
	if _, err := l.releaseToken(ctx, lock, token); err != nil {
		l.h.Logger().Warn("lockmw: could not pass on a lock granted to a waiter that gave up; it expires after its TTL",
			slog.String("key", lock.Name), slog.String("store", l.h.Name()), slog.Any("error", err))
	}
}

// releaseToken releases the lock held by token, handing it over if fair
// waiters are queued; a hand-over to this Locker's own waiter is delivered
// here, without a message.
func (l *grantPolicy) releaseToken(ctx context.Context, lock store.Key, token string) (store.Ownership, error) {
	return l.releaseTokenOf(ctx, lock, token, true, false)
}

// releaseTokenOf is releaseToken; for a lock acquired without Fair (fair
// false), the store's plain release step (granter's Unlock) goes first: it
// does not hand over, and leaves the lock to releaseHandoff when fair
// waiters have queued behind it. queued says that fair waiters are known
// to have queued behind token (the grant of a fair lease named the next
// entry).
func (l *grantPolicy) releaseTokenOf(ctx context.Context, lock store.Key, token string, fair, queued bool) (store.Ownership, error) {
	// queued: fair waiters are known to be queued: the hand-over step
	// serves them.
	if to, ttl := l.defaultHead(lock); to != "" {
		sentAt := time.Now()
		t, err := l.waits.Transfer(ctx, lock, token, to, ttl, false)
		switch {
		case err != nil:
			return 0, err
		case t.Done:
			l.handTo(lock, to, t.Fence, sentAt, t.Reserved, "")
			return store.Owned, nil
		case !t.FairQueue:
			return t.Ownership, nil
		}
		queued = true
	}
	if !fair && !queued {
		o, fairQueued, err := l.waits.Unlock(ctx, lock, token)
		if err != nil || !fairQueued {
			return o, err
		}
		queued = true
	}
	sentAt := time.Now()
	h, err := l.releaseHandoff(ctx, lock, token, "", 0, queued)
	if err == nil && h.Local {
		l.handTo(lock, h.To, h.Fence, sentAt, h.Reserved, h.Next)
	}
	return h.Ownership, err
}

// releaseHandoff runs the store's ReleaseHandoff. A lock handed to a
// waiter with others queued behind it is hot (see markHot); this Locker's
// default-mode waiters for it then line up behind the new holder (see
// wakeDefaultHead).
func (l *grantPolicy) releaseHandoff(ctx context.Context, lock store.Key, token, early string, earlyFence uint64, queued bool) (Handoff, error) {
	h, err := l.waits.ReleaseHandoff(ctx, lock, token, early, earlyFence, queued)
	if err == nil && h.To != "" {
		if h.More {
			l.markHot(lock)
		}
		l.wakeDefaultHead(lock)
	}
	return h, err
}

// releaseGranted releases s, whose validity ends at deadline (zero when
// unknown or lost). When s holds a reserved fence and has validity to
// spare, and a waiter of this Locker is next (a fair lease: the one first
// in line when s was granted; a default one: the first default-mode
// waiter), that waiter gets the lock at once and the hand-over on the wire
// confirms it afterwards.
func (l *grantPolicy) releaseGranted(ctx context.Context, s store.Held, deadline time.Time) (store.Ownership, error) {
	st, _ := s.State.(*leaseState)
	var reserved uint64
	if st != nil {
		reserved = st.reserved.Load()
	}
	if reserved == 0 || time.Until(deadline) < minEarlyValidity(s.TTL) {
		return l.releaseTokenOf(ctx, s.Key, s.Token, s.Fair, false)
	}
	if s.Fair {
		return l.releaseFairEarly(ctx, s, st, reserved, deadline)
	}
	var reservedAt time.Time
	if at := st.reservedAt.Load(); at != nil {
		reservedAt = *at
	}
	w, h := l.handEarly(s.Key, reserved, deadline, reservedAt)
	if w == nil {
		return l.releaseTokenOf(ctx, s.Key, s.Token, false, false)
	}
	if testHookHandedEarly != nil {
		testHookHandedEarly()
	}
	sentAt := time.Now()
	t, err := l.waits.Transfer(ctx, s.Key, s.Token, w.token, w.ttl, true)
	switch {
	case err != nil:
		return 0, err
	case t.Done:
		h.settle(sentAt, t.Reserved, "", 0)
		return store.Owned, nil
	case t.FairQueue:
		// (A forced transfer keeps queued waiters' places and hands over,
		// so this answer does not come; should it, the waiter's lease ends
		// here, before the store's hand-over step gives the lock to one of
		// them.)
		h.settle(sentAt, 0, "", store.Taken)
		sentAt := time.Now()
		ho, err := l.releaseHandoff(ctx, s.Key, s.Token, "", 0, true)
		if err == nil && ho.Local {
			l.handTo(s.Key, ho.To, ho.Fence, sentAt, ho.Reserved, ho.Next)
		}
		return ho.Ownership, err
	}
	h.settle(sentAt, 0, "", refused(t.Ownership))
	return t.Ownership, nil
}

// releaseFairEarly releases the fair lease s, handing the lock at once to
// the waiter first in line if it is this Locker's.
func (l *grantPolicy) releaseFairEarly(ctx context.Context, s store.Held, st *leaseState, reserved uint64, deadline time.Time) (store.Ownership, error) {
	next := st.next.Load()
	if next == nil || *next == "" {
		return l.releaseToken(ctx, s.Key, s.Token)
	}
	// The grant named the entry next in line: the release will likely hand
	// the lock on.
	id, token := l.waits.EntryOwner(*next)
	if id != l.h.ID() {
		return l.releaseTokenOf(ctx, s.Key, s.Token, true, true)
	}
	h := l.handEarlyFair(s.Key, token, reserved, deadline)
	if h == nil {
		return l.releaseTokenOf(ctx, s.Key, s.Token, true, true)
	}
	if testHookHandedEarly != nil {
		testHookHandedEarly()
	}
	sentAt := time.Now()
	ho, err := l.releaseHandoff(ctx, s.Key, s.Token, *next, reserved, true)
	switch {
	case err != nil:
		return 0, err
	case ho.Local && ho.To == token:
		h.settle(sentAt, ho.Reserved, ho.Next, 0)
		return store.Owned, nil
	}
	h.settle(sentAt, 0, "", refused(ho.Ownership))
	return ho.Ownership, nil
}

// refused is what a hand-over that the store refused found: Taken, or
// else Missing (the lease ends as expired).
func refused(o store.Ownership) store.Ownership {
	if o == store.Taken {
		return o
	}
	return store.Missing
}

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
		case store.Stale(fence, w.busyCounter):
			// Made before an attempt of w's that found the lock held by
			// another owner: this grant had ended by then (a message that
			// came late). The lock is not w's; w waits on.
			l.h.Logger().Debug("lockmw: ignoring a stale grant", slog.String("key", lock.Name), slog.String("store", l.h.Name()),
				slog.Uint64("fence", fence), slog.Uint64("seen", w.busyCounter))
		default:
			w.delivered = true
			// Both are lower bounds of when the store set the lock: the
			// grant came after w's last busy attempt ran (its fence is above
			// the counter that attempt saw). Take the later.
			if w.busySent.After(validFrom) {
				validFrom = w.busySent
			}
			l.h.Start() // done once w has made its lease or given the lock back
			w.grant <- grantInfo{fence: fence, validFrom: validFrom, reserved: reserved, next: next}
		}
		l.roomsMu.Unlock()
		return
	}
	l.roomsMu.Unlock()
	l.h.Start()
	go l.releaseStray(lock, token, nil)
}

// granted wakes the fair waiter k was handed to (g); ok false: the store's
// message could not be read.
func (l *grantPolicy) granted(k store.Key, g Grant, ok bool) {
	if !ok {
		l.h.Logger().Warn("lockmw: ignoring a malformed grant message", slog.String("key", k.Name), slog.String("store", l.h.Name()))
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
	h := newHandover(fence, l.earlyDeadline(deadline, w.ttl), true)
	l.h.Start() // done once w has made its lease or given the lock back
	w.grant <- grantInfo{early: h}
	return h
}

// handEarly hands the lock of keys to the first default-mode waiter of this
// Locker, before the store is told: it returns that waiter and the hand-over
// to settle, or nil when nobody waits or that waiter may not go first.
// reservedAt is when the transfer that gave the releasing lease the lock
// (and reserved fence) was sent.
//
// Fair order (package lockmw's doc.go, "Waiting": Fair; how this store
// keeps it: doc.go, "Waiting and hand-overs", Fair order): a fair waiter is
// never overtaken by one that arrived after it. The releaser does not know
// who joined the lock's queue since it got the lock, so the waiter goes
// first only when it is known to have arrived before every fair waiter queued now: a
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
	h := newHandover(fence, l.earlyDeadline(deadline, w.ttl), false)
	l.h.Start() // done once w has made its lease or given the lock back
	w.grant <- grantInfo{early: h}
	return w, h
}

// earlyDeadline is the validity of a lease handed over early by a lease
// valid until releaserDeadline, to a waiter with TTL ttl, the transfer not
// yet sent: see handover. Called before the transfer is sent, so now is no
// later than its send time.
func (l *grantPolicy) earlyDeadline(releaserDeadline time.Time, ttl time.Duration) time.Time {
	d := time.Now().Add(ttl - l.h.Drift(ttl))
	if releaserDeadline.Before(d) {
		return releaserDeadline
	}
	return d
}
