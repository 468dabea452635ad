package lockmw

import (
	"context"
	"log/slog"
	mathrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// This file is how Acquire waits for a busy lock without polling.
//
// Default mode: a release publishes on the lock's notify channel. Each
// Locker keeps its waiters for a key in a room, in arrival order; only the
// first retries when a release is heard (or when the holder's TTL, learnt
// from the failed attempt, runs out), and later arrivals queue behind it
// instead of racing it. A release thus costs one retry per waiting process,
// not one per waiting goroutine.
//
// Fair mode: waiters queue in Redis (fair.lua), and a release hands the
// lock straight to the first live waiter (grant.lua): the lock is never free
// in between, and only that waiter is told, on its Locker's grant channel —
// or directly, when the releasing Locker is its own. Queued waiters also
// poll now and then, so a lost grant message or a dropped queue entry costs
// latency, never liveness.

// room is a Locker's waiters (and fair holders) for one key. Guarded by
// Locker.roomsMu.
type room struct {
	keys     lockKeys
	refs     int                // waiters and fair holders in the room
	defaults []*waiter          // default-mode waiters; defaults[0] retries on a release
	fair     map[string]*waiter // fair waiters and holders, and default waiters, by token
	fairBusy int                // fair waiters queued or holding: the lock is busy
}

// waitBackend is what a backend offers for waiting without polling:
// release notifications and fair queues. The Redis backend has it.
type waitBackend interface {
	releaseHandoff(ctx context.Context, k lockKeys, token, early string, earlyFence uint64) (handoff, error)
	unlock(ctx context.Context, k lockKeys, token string) (o ownership, fair bool, err error)
	transfer(ctx context.Context, k lockKeys, token, to string, ttl time.Duration, force bool) (transferReply, error)
	fairAcquire(ctx context.Context, k lockKeys, token string, ttl time.Duration, entry string, mode fairMode) (fairReply, error)
	enqueue(ctx context.Context, k lockKeys, entry string) (bool, error)
	leave(ctx context.Context, k lockKeys, entry, token string) (bool, error)
	subscriber() *subscriber
	close()
}

// waiter is one Acquire call waiting in a room.
type waiter struct {
	token     string
	ttl       time.Duration
	wake      chan struct{}  // default mode: a release was heard, or you lead now
	grant     chan grantInfo // fair mode: the lock was handed over
	delivered bool           // fair mode: a grant was sent on grant (or claimed)
	passOn    bool           // default mode: leaves its room to line up in the queue
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
// the moment Redis set the lock for it (its validity counts from there).
type grantInfo struct {
	fence     uint64
	validFrom time.Time
	reserved  uint64    // a fence reserved for the next local hand-over, or 0
	next      string    // fair: the entry of the waiter first in line after this one, or ""
	early     *handover // set instead when the waiter starts before Redis confirms
}

// handover is a lock handed to a waiter of the same Locker before Redis
// confirmed it. The waiter may start at once. Until the transfer that
// replaces the releaser's token with the waiter's is answered, the key holds
// one of the two tokens: the releaser's until at least the releaser's
// deadline, and the waiter's, once the transfer lands, for at least the
// waiter's TTL from the moment the transfer was sent. So the waiter's lease
// is valid until the earlier of the releaser's deadline and that send time
// plus the waiter's TTL less drift (deadline, fixed before the transfer is
// sent), and is not renewed; the answer confirms it from the send time with
// the waiter's TTL, or ends it as lost. The waiter's own requests for the
// lock (its release) wait for that answer (see Lease.release), so none can
// reach Redis before the transfer does.
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
// releasing lease's token is gone from Redis by then), or ctx ends: a
// waiter that gives up a lock handed to it early releases it after that,
// not before the hand-over reaches Redis.
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

// settle records the transfer's answer, applying it if the lease is made.
// An answer that never came (Redis unreachable) is not settled: the lease
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
	h.lease.reserved.Store(h.reserve)
	h.lease.next.Store(&h.next)
	l.keeper.confirm(h.lease, h.sentAt)
}

// testHookHandedEarly, when set by a test, runs after a waiter was handed
// a lock early and before the transfer is sent.
var testHookHandedEarly func()

// minEarlyValidity is how much validity a releasing lease must have left
// for its successor to start before Redis confirms the hand-over.
func minEarlyValidity(ttl time.Duration) time.Duration { return max(ttl/4, 10*time.Millisecond) }

// pollAfter is when a queued fair waiter checks the queue and the lock
// itself, in case a grant message was lost: when the holder's TTL (or, not
// knowing it, the waiter's own) runs out, plus up to 1/8 of jitter so that
// waiters behind a crashed holder do not all come at once.
func pollAfter(holderTTL, ttl time.Duration) time.Duration {
	d := holderTTL
	if d <= 0 {
		d = ttl
	}
	d = max(d, 10*time.Millisecond)
	return d + mathrand.N(d/8+1)
}

// join returns the room for keys with one more reference. Caller holds
// l.roomsMu.
func (l *Locker) join(keys lockKeys) *room {
	r := l.rooms[keys.lock]
	if r == nil {
		r = &room{keys: keys, fair: make(map[string]*waiter)}
		l.rooms[keys.lock] = r
	}
	r.refs++
	return r
}

// unref drops one reference to r. Caller holds l.roomsMu.
func (l *Locker) unref(r *room) {
	if r.refs--; r.refs == 0 {
		delete(l.rooms, r.keys.lock)
	}
}

// deliver routes a message from the subscriber: a release notification
// wakes the first default waiter of the key; a grant wakes its fair waiter.
func (l *Locker) deliver(channel, payload string) {
	if base, ok := strings.CutSuffix(channel, ":n"); ok {
		l.roomsMu.Lock()
		if r := l.rooms[base]; r != nil && len(r.defaults) > 0 {
			signal(r.defaults[0].wake)
		}
		l.roomsMu.Unlock()
		return
	}
	base, ok := strings.CutSuffix(channel, ":g:"+l.id)
	if !ok {
		return
	}
	// "<token> <fence> <reserved> <entry of the waiter next in line>"
	parts := strings.SplitN(payload, " ", 4)
	var fence, reserved uint64
	var err error
	if len(parts) == 4 {
		fence, err = strconv.ParseUint(parts[1], 10, 64)
		if err == nil {
			reserved, err = strconv.ParseUint(parts[2], 10, 64)
		}
	}
	if len(parts) != 4 || err != nil {
		l.logger.Warn("lockmw: ignoring a malformed grant message", slog.String("channel", channel))
		return
	}
	l.handTo(newLockKeysFromBase(base), parts[0], fence, time.Time{}, reserved, parts[3])
}

// handTo gives the lock, just granted to token in Redis, to its waiter in
// this Locker. validFrom is when the grant's request left, if this Locker
// sent it; zero when only the waiter's own last attempt bounds it. reserved
// and next are what the grant left for the waiter's own hand-over (see
// grantInfo). A token nobody here waits for any more is released, so the
// lock moves on.
func (l *Locker) handTo(keys lockKeys, token string, fence uint64, validFrom time.Time, reserved uint64, next string) {
	l.roomsMu.Lock()
	var w *waiter
	if r := l.rooms[keys.lock]; r != nil {
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
			l.logger.Debug("lockmw: ignoring a stale grant", slog.String("lock", keys.lock),
				slog.Uint64("fence", fence), slog.Uint64("seen", w.busyCounter))
		default:
			w.delivered = true
			// Both are lower bounds of when Redis set the lock: the grant
			// came after w's last busy attempt ran (its fence is above the
			// counter that attempt saw). Take the later.
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
	go l.releaseStray(keys, token, nil)
}

// releaseStray releases a lock granted to a waiter that is gone; when it
// was handed over early (h), once the hand-over has reached Redis.
// The caller has started a flight for it (see flights).
func (l *Locker) releaseStray(keys lockKeys, token string, h *handover) {
	defer l.flights.done()
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.ttl)
	defer cancel()
	if h != nil {
		h.wait(ctx)
	}
	if _, err := l.releaseToken(ctx, keys, token); err != nil {
		l.logger.Warn("lockmw: could not pass on a lock granted to a waiter that gave up; it expires after its TTL",
			slog.String("lock", keys.lock), slog.Any("error", err))
	}
}

// releaseToken releases the lock held by token, handing it over if fair
// waiters are queued; a hand-over to this Locker's own waiter is delivered
// here, without a message.
func (l *Locker) releaseToken(ctx context.Context, keys lockKeys, token string) (ownership, error) {
	return l.releaseTokenOf(ctx, keys, token, true)
}

// releaseTokenOf is releaseToken; for a lock acquired without Fair (fair
// false), the short unlock script goes first: it does not hand over, and
// leaves the lock to releaseHandoff when fair waiters have queued behind
// it.
func (l *Locker) releaseTokenOf(ctx context.Context, keys lockKeys, token string, fair bool) (ownership, error) {
	if l.waits == nil {
		return l.backend.release(ctx, keys, token)
	}
	if to, ttl := l.defaultHead(keys); to != "" {
		sentAt := time.Now()
		t, err := l.waits.transfer(ctx, keys, token, to, ttl, false)
		switch {
		case err != nil:
			return 0, err
		case t.done:
			l.handTo(keys, to, t.counter-1, sentAt, t.reserve(), "")
			return owned, nil
		case !t.fairQueue:
			return t.ownership, nil
		}
	}
	if !fair {
		o, queued, err := l.waits.unlock(ctx, keys, token)
		if err != nil || !queued {
			return o, err
		}
	}
	sentAt := time.Now()
	h, err := l.releaseHandoff(ctx, keys, token, "", 0)
	if err == nil && h.local {
		l.handTo(keys, h.to, h.fence, sentAt, h.reserved, h.next)
	}
	return h.ownership, err
}

// releaseHandoff runs the backend's releaseHandoff. A lock handed to a
// waiter with others queued behind it is hot (see markHot); this Locker's
// default-mode waiters for it then line up behind the new holder (see
// wakeDefaultHead).
func (l *Locker) releaseHandoff(ctx context.Context, keys lockKeys, token, early string, earlyFence uint64) (handoff, error) {
	h, err := l.waits.releaseHandoff(ctx, keys, token, early, earlyFence)
	if err == nil && h.to != "" {
		if h.more {
			l.markHot(keys)
		}
		l.wakeDefaultHead(keys)
	}
	return h, err
}

// releaseLease releases s, whose validity ends at deadline (zero when
// unknown or lost). When s holds a reserved fence and has validity to
// spare, and a waiter of this Locker is next (a fair lease: the one first
// in line when s was granted; a default one: the first default-mode
// waiter), that waiter gets the lock at once and the hand-over on the wire
// confirms it afterwards.
func (l *Locker) releaseLease(ctx context.Context, s *Lease, deadline time.Time) (ownership, error) {
	ctx = withValidity(ctx, deadline) // retries while a slot moves end by s's deadline
	reserved := s.reserved.Load()
	if l.waits == nil || reserved == 0 || time.Until(deadline) < minEarlyValidity(s.ttl) {
		return l.releaseTokenOf(ctx, s.keys, s.token, s.fair)
	}
	if s.fair {
		return l.releaseFairEarly(ctx, s, reserved, deadline)
	}
	w, h := l.handEarly(s.keys, reserved, deadline)
	if w == nil {
		return l.releaseTokenOf(ctx, s.keys, s.token, false)
	}
	if testHookHandedEarly != nil {
		testHookHandedEarly()
	}
	sentAt := time.Now()
	t, err := l.waits.transfer(ctx, s.keys, s.token, w.token, w.ttl, true)
	switch {
	case err != nil:
		return 0, err
	case t.done:
		h.settle(l, sentAt, t.reserve(), "", nil)
		return owned, nil
	case t.fairQueue:
		// (A forced transfer keeps queued waiters' places and hands over,
		// so this answer does not come; should it, the waiter's lease ends
		// here, before release.lua hands the lock to one of them.)
		h.settle(l, sentAt, 0, "", &LostError{Key: s.key, Reason: LostTaken})
		sentAt := time.Now()
		ho, err := l.releaseHandoff(ctx, s.keys, s.token, "", 0)
		if err == nil && ho.local {
			l.handTo(s.keys, ho.to, ho.fence, sentAt, ho.reserved, ho.next)
		}
		return ho.ownership, err
	}
	h.settle(l, sentAt, 0, "", &LostError{Key: s.key, Reason: t.ownership.lostReason()})
	return t.ownership, nil
}

// releaseFairEarly releases the fair lease s, handing the lock at once to
// the waiter first in line if it is this Locker's.
func (l *Locker) releaseFairEarly(ctx context.Context, s *Lease, reserved uint64, deadline time.Time) (ownership, error) {
	next := s.next.Load()
	if next == nil || *next == "" {
		return l.releaseToken(ctx, s.keys, s.token)
	}
	id, rest, _ := strings.Cut(*next, " ")
	token, _, _ := strings.Cut(rest, " ")
	if id != l.id {
		return l.releaseToken(ctx, s.keys, s.token)
	}
	h := l.handEarlyFair(s.keys, token, reserved, deadline)
	if h == nil {
		return l.releaseToken(ctx, s.keys, s.token)
	}
	if testHookHandedEarly != nil {
		testHookHandedEarly()
	}
	sentAt := time.Now()
	ho, err := l.releaseHandoff(ctx, s.keys, s.token, *next, reserved)
	switch {
	case err != nil:
		return 0, err
	case ho.local && ho.to == token:
		h.settle(l, sentAt, ho.reserved, ho.next, nil)
		return owned, nil
	}
	h.settle(l, sentAt, 0, "", &LostError{Key: s.key, Reason: ho.ownership.lostReason()})
	return ho.ownership, nil
}

// handEarlyFair hands the lock of keys to this Locker's fair waiter with
// token, before Redis is told: it returns the hand-over to settle, or nil
// when that waiter is gone or already has the lock.
func (l *Locker) handEarlyFair(keys lockKeys, token string, fence uint64, deadline time.Time) *handover {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	r := l.rooms[keys.lock]
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
// Locker, before Redis is told: it returns that waiter and the hand-over to
// settle, or nil when nobody waits.
func (l *Locker) handEarly(keys lockKeys, fence uint64, deadline time.Time) (*waiter, *handover) {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	var w *waiter
	if r := l.rooms[keys.lock]; r != nil && r.fairBusy == 0 {
		// (With fair waiters of its own queued, the lock goes to them: see
		// transfer.lua. Those of other Lockers end the early lease.)
		w = r.nextDefault()
	}
	if w == nil {
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
func (l *Locker) earlyDeadline(releaserDeadline time.Time, ttl time.Duration) time.Time {
	d := time.Now().Add(ttl - l.cfg.drift(ttl))
	if releaserDeadline.Before(d) {
		return releaserDeadline
	}
	return d
}

// defaultHead returns the token and TTL of the first default-mode waiter for
// keys in this Locker, if any: a release hands the lock straight to it.
func (l *Locker) defaultHead(keys lockKeys) (string, time.Duration) {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	if r := l.rooms[keys.lock]; r != nil {
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

// forgetFair drops a released fair lease from its room.
func (l *Locker) forgetFair(keys lockKeys, token string) {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	if r := l.rooms[keys.lock]; r != nil && r.fair[token] != nil {
		delete(r.fair, token)
		r.fairBusy--
		l.unref(r)
	}
}

// waitDefault waits in key's room for a release and retries, as the room's
// first waiter, until it gets the lock. holderTTL is what the failed first
// attempt reported (0 when the call skipped it to queue behind others).
// lineUp reports, with no lease and no error, an attempt that found the
// lock held by another Locker: the caller lines up in the lock's queue
// instead (see lineup.go), and the room's next waiter is woken to do the
// same.
func (l *Locker) waitDefault(opCtx, leaseParent context.Context, key string, keys lockKeys, ac *acquireConfig, giveUp time.Time, holderTTL time.Duration) (lease *Lease, lineUp bool, err error) {
	w := &waiter{token: newToken(), ttl: ac.ttl, wake: make(chan struct{}, 1), grant: make(chan grantInfo, 1)}
	l.roomsMu.Lock()
	r := l.join(keys)
	r.defaults = append(r.defaults, w)
	r.fair[w.token] = w
	l.roomsMu.Unlock()
	defer l.leaveDefault(r, w)

	// Once subscribed, retry: a release may have come since the attempt.
	retry := true
	if err := watchUntil(opCtx, l.waits.subscriber(), giveUp, keys.notify, false); err == nil {
		defer l.waits.subscriber().unwatch(keys.notify)
	} else if opCtx.Err() != nil {
		return nil, false, ctxErr(opCtx, key)
	} else {
		l.logger.Debug("lockmw: waiting without release notifications", slog.String("key", key), slog.Any("error", err))
	}

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if retry && l.leads(r, w) {
			lease, ttl, err := l.attempt(opCtx, leaseParent, key, keys, ac)
			if lease != nil || err != nil {
				return lease, false, err
			}
			holderTTL = ttl
			if l.linesUp(keys, ac) && (giveUp.IsZero() || time.Now().Before(giveUp)) {
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
		}
		retry = false
		sleep := holderTTL
		if sleep <= 0 {
			sleep = ac.ttl
		}
		if !giveUp.IsZero() {
			left := time.Until(giveUp)
			if left <= 0 {
				return nil, false, &NotAcquiredError{Key: key, RetryAfter: holderTTL}
			}
			sleep = min(sleep, left)
		}
		timer.Reset(sleep)
		select {
		case g := <-w.grant:
			// A release in this Locker handed the lock over.
			defer l.flights.done()
			if g.early != nil {
				lease, err := l.newEarlyLease(opCtx, leaseParent, key, keys, ac, w.token, g.early, false)
				return lease, false, err
			}
			lease, err := l.newLease(opCtx, leaseParent, key, keys, ac, w.token, g.fence, g.validFrom, false)
			if lease != nil {
				lease.reserved.Store(g.reserved)
			}
			return lease, false, err
		case <-w.wake:
			retry = true
		case <-timer.C:
			retry = true // the holder's TTL ran out, or the wait did
		case <-opCtx.Done():
			return nil, false, ctxErr(opCtx, key)
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
		go l.releaseStray(r.keys, w.token, g.early)
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
func (l *Locker) hasDefaultWaiters(keys lockKeys) bool {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	r := l.rooms[keys.lock]
	return r != nil && len(r.defaults) > 0
}

// acquireFair takes key in arrival order: one attempt when !wait, else a
// place in the queue and a wait for the hand-over.
func (l *Locker) acquireFair(opCtx, leaseParent context.Context, key string, keys lockKeys, ac *acquireConfig, wait bool, giveUp time.Time) (*Lease, error) {
	// Close waits for fair acquisitions under way (a waiter stops waiting
	// when Close begins): one that was granted the lock, or leaves the
	// queue, is done with Redis before Close returns.
	l.flights.start()
	defer l.flights.done()
	if l.closed.Load() {
		return nil, ErrClosed
	}
	token := newToken()
	entry := l.id + " " + token + " " + strconv.FormatInt(millis(ac.ttl), 10)
	if !wait {
		sentAt := time.Now()
		reply, err := l.waits.fairAcquire(opCtx, keys, token, ac.ttl, entry, modeTry)
		if err != nil {
			if mayHaveRun(err) {
				l.takeBack(keys, token, "", true, ac.ttl) // it may take the lock yet
			}
			return nil, l.attemptErr(opCtx, key, err)
		}
		if !reply.acquired {
			return nil, &NotAcquiredError{Key: key, RetryAfter: reply.pttl}
		}
		return l.newLease(opCtx, leaseParent, key, keys, ac, token, reply.fence, sentAt, false)
	}

	w := &waiter{token: token, ttl: ac.ttl, grant: make(chan grantInfo, 1)}
	l.roomsMu.Lock()
	r := l.join(keys)
	r.fair[token] = w
	// A fair waiter or holder here, or a hand-over that left others queued:
	// the lock is busy, and the queue likely exists.
	known := r.fairBusy > 0 || l.isHotLocked(keys)
	r.fairBusy++
	l.roomsMu.Unlock()

	lease, err := l.waitFair(opCtx, leaseParent, key, keys, ac, w, entry, known, giveUp)
	if lease == nil {
		l.abandonFair(keys, w, entry, err)
	}
	return lease, err
}

func (l *Locker) waitFair(opCtx, leaseParent context.Context, key string, keys lockKeys, ac *acquireConfig, w *waiter, entry string, known bool, giveUp time.Time) (*Lease, error) {
	channel := keys.grants + l.id
	if err := watchUntil(opCtx, l.waits.subscriber(), giveUp, channel, true); err != nil {
		if opCtx.Err() != nil {
			return nil, ctxErr(opCtx, key)
		}
		// Grants to this Locker would find nobody listening and skip its
		// waiters; polling still gets the lock once the queue drains.
		l.logger.Debug("lockmw: waiting without grant notifications", slog.String("key", key), slog.Any("error", err))
	} else {
		defer l.waits.subscriber().unwatch(channel)
	}

	// Nothing has been granted to w before its entry is queued, so the
	// time before the request is a safe start of validity for any grant.
	sentAt := time.Now()
	l.setBusy(w, sentAt, 0)
	queued := false
	if known {
		ok, err := l.waits.enqueue(opCtx, keys, entry)
		if err != nil {
			return nil, l.attemptErr(opCtx, key, err)
		}
		queued = ok
	}
	holderTTL := time.Duration(0)
	if !queued {
		reply, err := l.waits.fairAcquire(opCtx, keys, w.token, ac.ttl, entry, modeWait)
		if err != nil {
			return nil, l.attemptErr(opCtx, key, err)
		}
		if lease, err := l.fairReplyLease(opCtx, leaseParent, key, keys, ac, w, reply, sentAt); lease != nil || err != nil {
			return lease, err
		}
		holderTTL = reply.pttl
	}

	poll := time.NewTimer(pollAfter(holderTTL, ac.ttl))
	defer poll.Stop()
	var giveUpC <-chan time.Time
	if !giveUp.IsZero() {
		t := time.NewTimer(time.Until(giveUp))
		defer t.Stop()
		giveUpC = t.C
	}
	for {
		select {
		case g := <-w.grant:
			lease, again, err := l.fairGrantLease(opCtx, leaseParent, key, keys, ac, w, g)
			if again {
				poll.Reset(0)
				continue
			}
			return lease, err
		case <-poll.C:
			sentAt := time.Now()
			reply, err := l.waits.fairAcquire(opCtx, keys, w.token, ac.ttl, entry, modePoll)
			if err != nil {
				return nil, l.attemptErr(opCtx, key, err)
			}
			if lease, err := l.fairReplyLease(opCtx, leaseParent, key, keys, ac, w, reply, sentAt); lease != nil || err != nil {
				return lease, err
			}
			holderTTL = reply.pttl
			poll.Reset(pollAfter(holderTTL, ac.ttl))
		case <-giveUpC:
			return nil, &NotAcquiredError{Key: key, RetryAfter: holderTTL}
		case <-opCtx.Done():
			return nil, ctxErr(opCtx, key)
		case <-l.closing:
			return nil, ErrClosed
		}
	}
}

// fairGrantLease turns a grant delivered to the fair waiter w into its
// lease. again reports a grant that had expired before w saw it: w waits on
// and should poll at once.
func (l *Locker) fairGrantLease(opCtx, leaseParent context.Context, key string, keys lockKeys, ac *acquireConfig, w *waiter, g grantInfo) (lease *Lease, again bool, err error) {
	defer l.flights.done() // started by the grant's sender
	if g.early != nil {
		// Handed over by a release in this Locker, before Redis confirmed it.
		lease, err = l.newEarlyLease(opCtx, leaseParent, key, keys, ac, w.token, g.early, true)
		return lease, false, err
	}
	if time.Since(g.validFrom) > ac.ttl/3 {
		// Queued long ago: the grant's start is only known to be after
		// w's last busy attempt. Renew to learn a fresh one.
		sentAt := time.Now()
		res := l.backend.renew(opCtx, []renewRequest{{keys: keys, token: w.token, ttl: ac.ttl}})[0]
		if res.err != nil {
			return nil, false, l.attemptErr(opCtx, key, res.err)
		}
		if res.ownership != owned {
			// The grant expired before it was seen: wait again.
			l.reopen(w)
			return nil, true, nil
		}
		g.validFrom = sentAt
	}
	lease, err = l.newLease(opCtx, leaseParent, key, keys, ac, w.token, g.fence, g.validFrom, true)
	if lease != nil {
		lease.reserved.Store(g.reserved)
		lease.next.Store(&g.next)
	}
	return lease, false, err
}

// fairReplyLease turns a fair attempt's reply into a lease, or records that
// the lock was still busy when the attempt (sent at sentAt) ran.
func (l *Locker) fairReplyLease(opCtx, leaseParent context.Context, key string, keys lockKeys, ac *acquireConfig, w *waiter, reply fairReply, sentAt time.Time) (*Lease, error) {
	switch {
	case reply.acquired:
		l.claim(w)
		return l.newLease(opCtx, leaseParent, key, keys, ac, w.token, reply.fence, sentAt, true)
	case reply.granted:
		// Handed over earlier, its message not seen: the lock has pttl
		// left from when the attempt ran, which was after sentAt.
		l.claim(w)
		return l.newLease(opCtx, leaseParent, key, keys, ac, w.token, reply.fence, sentAt.Add(reply.pttl-ac.ttl), true)
	}
	l.setBusy(w, sentAt, reply.counter)
	return nil, nil
}

// reopen lets w receive a grant again, after one it got had expired.
func (l *Locker) reopen(w *waiter) {
	l.roomsMu.Lock()
	w.delivered = false
	l.roomsMu.Unlock()
}

// claim marks w as holding the lock, so a late grant message is ignored.
func (l *Locker) claim(w *waiter) {
	l.roomsMu.Lock()
	w.delivered = true
	l.roomsMu.Unlock()
}

// setBusy records that the lock was not w's when an attempt sent at t ran
// and saw the fence counter at counter, unless a grant was already
// delivered.
func (l *Locker) setBusy(w *waiter, t time.Time, counter uint64) {
	l.roomsMu.Lock()
	if !w.delivered {
		w.busySent = t
		w.busyCounter = max(w.busyCounter, counter)
	}
	l.roomsMu.Unlock()
}

// abandonFair takes a fair waiter that gives up out of its room and out of
// the queue; a lock granted to it meanwhile is passed on.
func (l *Locker) abandonFair(keys lockKeys, w *waiter, entry string, why error) {
	l.roomsMu.Lock()
	r := l.rooms[keys.lock]
	delivered := w.delivered
	if r != nil && r.fair[w.token] == w {
		delete(r.fair, w.token)
		r.fairBusy--
		l.unref(r)
	}
	l.roomsMu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.ttl)
	defer cancel()
	granted := delivered
	if delivered {
		select {
		case g := <-w.grant:
			defer l.flights.done() // started by the grant's sender
			if g.early != nil {
				g.early.wait(ctx)
			}
		default:
		}
	} else {
		g, err := l.waits.leave(ctx, keys, entry, w.token)
		if err != nil {
			// A failed attempt may yet take the lock or queue the entry:
			// the cleaner leaves and gives back once Redis answers.
			l.logger.Debug("lockmw: could not leave the fair queue", slog.String("lock", keys.lock), slog.Any("error", err))
			l.takeBack(keys, w.token, entry, true, w.ttl)
			return
		}
		granted = g
	}
	if granted {
		if _, err := l.releaseToken(ctx, keys, w.token); err != nil {
			l.logger.Debug("lockmw: could not pass on a lock granted to a waiter that gave up; retrying",
				slog.String("lock", keys.lock), slog.Any("error", err), slog.Any("reason", why))
			l.takeBack(keys, w.token, "", true, w.ttl)
		}
	}
}

// signal wakes a waiter without blocking; a wake already pending is enough.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// watchUntil subscribes to channel on subs, giving up when ctx ends or,
// for a bounded wait (WithWait), at giveUp. A channel of grants or wakes
// (lingers) stays subscribed for a while after its last waiter (see
// subscriptionLinger).
func watchUntil(ctx context.Context, subs *subscriber, giveUp time.Time, channel string, lingers bool) error {
	if !giveUp.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, giveUp)
		defer cancel()
	}
	return subs.watch(ctx, channel, lingers)
}
