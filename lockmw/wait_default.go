package lockmw

import (
	"log/slog"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is how Acquire waits in default mode, without polling: a
// release publishes on the lock's notify channel. Each Locker keeps its
// waiters for a key in a room, in arrival order; only the first retries
// when a release is heard (or when the holder's TTL, learnt from the failed
// attempt, runs out), and later arrivals queue behind it instead of racing
// it. A release thus costs one retry per waiting process, not one per
// waiting goroutine.
//
// Waiting adds no way to become live (doc.go, "Safety: how a lease becomes
// live"): a default waiter's lease comes from an attempt (attempt.go), or
// from a release of this Locker that handed it the lock (handover.go).

// defaultHead returns the token and TTL of the first default-mode waiter for
// keys in this Locker, if any: a release hands the lock straight to it.
func (l *Locker) defaultHead(lock store.Key) (string, time.Duration) {
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

// waitDefault waits in key's room for a release and retries, as the room's
// first waiter, until it gets the lock. holderTTL is what the failed first
// attempt reported (0 when the call skipped it to queue behind others).
// lineUp reports, with no lease and no error, an attempt that found the
// lock held by another Locker: the caller lines up in the lock's queue
// instead (see lineup.go), and the room's next waiter is woken to do the
// same.
func (l *Locker) waitDefault(a *acquisition, holderTTL time.Duration) (lease *Lease, lineUp bool, err error) {
	w := &waiter{token: newToken(), ttl: a.cfg.ttl, wake: make(chan struct{}, 1), grant: make(chan grantInfo, 1), arrived: time.Now()}
	l.roomsMu.Lock()
	r := l.join(a.lock)
	r.defaults = append(r.defaults, w)
	r.fair[w.token] = w
	l.roomsMu.Unlock()
	defer l.leaveDefault(r, w)

	// Once subscribed, retry: a release may have come since the attempt.
	retry := true
	if err := watchUntil(a.opCtx, l.caps.waits, a.giveUp, a.lock, false); err == nil {
		defer l.caps.waits.Unwatch(a.lock, false)
	} else if a.opCtx.Err() != nil {
		return nil, false, ctxErr(a.opCtx, a.key)
	} else {
		l.logger.Debug("lockmw: waiting without release notifications", slog.String("key", a.key), slog.Any("error", err))
	}

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if retry && l.leads(r, w) {
			lease, reply, err := l.attempt(a)
			if lease != nil || err != nil {
				return lease, false, err
			}
			holderTTL = reply.HolderTTL
			if l.linesUp(a.lock, a.cfg) && (a.giveUp.IsZero() || time.Now().Before(a.giveUp)) {
				l.roomsMu.Lock()
				// Not if a release of this Locker handed w the lock
				// meanwhile: w takes it below.
				lineUp := !w.delivered
				w.passOn = lineUp
				l.roomsMu.Unlock()
				if lineUp {
					return nil, true, nil
				}
			}
			l.checkAheadOfQueue(a, w)
		}
		retry = false
		sleep := holderTTL
		if sleep <= 0 {
			sleep = a.cfg.ttl
		}
		if !a.giveUp.IsZero() {
			left := time.Until(a.giveUp)
			if left <= 0 {
				return nil, false, &NotAcquiredError{Key: a.key, RetryAfter: holderTTL}
			}
			sleep = min(sleep, left)
		}
		timer.Reset(sleep)
		select {
		case g := <-w.grant:
			// A release in this Locker handed the lock over.
			defer l.flights.done()
			if g.early != nil {
				lease, err := l.newEarlyLease(a, w.token, g.early, false)
				return lease, false, err
			}
			lease, err := l.newLease(a, w.token, g.fence, g.validFrom, false)
			if lease != nil && g.reserved != 0 {
				// A transfer's grant: validFrom is when it was sent.
				lease.reservedAt.Store(&g.validFrom)
				lease.reserved.Store(g.reserved)
			}
			return lease, false, err
		case <-w.wake:
			retry = true
		case <-timer.C:
			retry = true // the holder's TTL ran out, or the wait did
		case <-a.opCtx.Done():
			return nil, false, ctxErr(a.opCtx, a.key)
		case <-l.closing:
			return nil, false, ErrClosed
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// checkAheadOfQueue asks Redis, once w is in its room and until an answer
// says so, whether fair waiters are queued for the lock: if none is, w
// arrived before every fair waiter that queues later, and a release of
// this Locker may hand it the lock ahead of them (see handEarly). An error
// leaves w as it was: it is then not handed the lock early.
func (l *Locker) checkAheadOfQueue(a *acquisition, w *waiter) {
	l.roomsMu.Lock()
	known := w.aheadOfQueue || w.delivered // (handed the lock meanwhile: take it)
	l.roomsMu.Unlock()
	if known {
		return
	}
	queued, err := l.caps.waits.FairQueued(a.opCtx, a.lock)
	if err != nil {
		l.logger.Debug("lockmw: could not check the fair queue", slog.String("key", a.key), slog.Any("error", err))
		return
	}
	if !queued {
		l.roomsMu.Lock()
		w.aheadOfQueue = true
		l.roomsMu.Unlock()
	}
}

// leads reports whether w is the first default waiter of r.
func (l *Locker) leads(r *room, w *waiter) bool {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	return len(r.defaults) > 0 && r.defaults[0] == w
}

// leaveDefault takes w out of r. If w led the room, the next waiter leads
// now; it is woken to retry unless w took the lock (then the next release
// will wake it). A lock handed to w that it did not take is passed on.
func (l *Locker) leaveDefault(r *room, w *waiter) {
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
func (l *Locker) hasDefaultWaiters(lock store.Key) bool {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	r := l.rooms[lock]
	return r != nil && len(r.defaults) > 0
}
