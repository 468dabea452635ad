package lockmw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/pace"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is how Acquire waits for a busy lock on every store but Redis's
// (storePolicy), and the loop that every policy's waiters run: waitLoop
// makes an attempt, returns the lease, the error, or (a single attempt, or a
// wait that ran out) ErrNotAcquired, and otherwise pauses as its way says
// before the next attempt, until the caller's context ends or the Locker
// closes. storePolicy's ways, picked from what the store offers (caps.go):
//
//   - backoff (no notifications): the next attempt after a capped,
//     jittered backoff in the store's range (store.Backoff, else
//     minBackoff to maxBackoff), never past the holder's remaining TTL;
//   - notifications (store.Notifier): one waiter per key and Locker
//     waits at the store until the lock may be free (enterGate; the
//     others wait at the gate, then try once and take its place), so a
//     release sets off one attempt per Locker, and every waiting Locker
//     tries (they barge);
//   - a queue (store.Queue): the waiter's entry waits for the entry just
//     before it only (no herd), then asks again, unless the store reports
//     that a release handed it the lock (queueWay.handed); the first entry
//     holds the lock. Fair waiters wait so; default-mode waiters too, one
//     per key and Locker behind the gate, unless the queue is for Fair
//     waiters only (store.FairOnly: a polling store, where a turn costs
//     more requests than an attempt).
//
// A store that waits its own way (store.Waits: the Redis stores) brings its
// policy, which runs this file's loop (host.go).
//
// Every pause that waits for the store's word is bounded by the holder's
// TTL (or the waiter's own), so a lost notification, turn, wake or grant
// costs latency, never liveness.
//
// This file adds no way for a lease to become live: every lease here comes
// from an attempt (attempt.go) or a queue's Enqueue, decided by the store,
// or from a hand-over that the queue's store made in the release's own
// step and reports (queueWay.handed; doc.go, "Safety: how a lease becomes
// live").

// Without release notifications, a waiter retries with a jittered, capped
// exponential backoff, never sleeping past the holder's remaining TTL. This
// is the default range, tuned for an in-memory store's round trip (Redlock's
// retries after a lost race use it too); a store may choose its own
// (store.Backoff: a database wants longer).
const (
	minBackoff = 500 * time.Microsecond
	maxBackoff = 8 * time.Millisecond
)

// wait runs attempts until one succeeds, fails, or the wait ends, as the
// Locker's policy waits. opCtx carries the acquire span; leaseParent is the
// caller's context the lease context derives from.
func (l *Locker) wait(opCtx, leaseParent context.Context, key string, ac *acquireConfig, wait bool, start time.Time) (*Lease, error) {
	a := newAcquisition(opCtx, leaseParent, store.Key{Prefix: l.cfg.prefix, Name: key}, ac)
	if ac.hasWait {
		if ac.wait == 0 {
			wait = false
		}
		a.GiveUp = start.Add(ac.wait)
	}
	lease, err := l.policy.acquire(a, wait)
	if a.waiting {
		l.tel.waitingFor(a.Ctx, ac.name, -1)
	}
	return lease, err
}

// startWaiting counts a as waiting (lockmw.waiting), once per call.
func (l *Locker) startWaiting(a *acquisition) {
	if !a.waiting {
		a.waiting = true
		l.tel.waitingFor(a.Ctx, a.cfg.name, 1)
	}
}

// newAcquisition returns the record of one Acquire or TryAcquire call for
// lock, made under opCtx, its lease's context to derive from leaseParent.
func newAcquisition(opCtx, leaseParent context.Context, lock store.Key, ac *acquireConfig) *acquisition {
	a := &acquisition{leaseParent: leaseParent, cfg: ac}
	a.Acquisition = store.Acquisition{Ctx: opCtx, Key: lock, TTL: ac.ttl, Fair: ac.fair, Locker: a}
	return a
}

// storePolicy is the policy of every store but Redis's: attempts, and
// waits by backoff, the store's notifications or its queue (see the top of
// this file); a release is the store's.
type storePolicy struct{ l *Locker }

func (p storePolicy) acquire(a *acquisition, wait bool) (*Lease, error) {
	l, ac, c := p.l, a.cfg, &p.l.caps
	if ac.fair && c.queue == nil {
		return nil, fmt.Errorf("%w: Fair needs a store whose locks are queues; this one has none: acquire without Fair", ErrInvalidOption)
	}
	if err := l.st.CheckTTL(ac.ttl); err != nil {
		return nil, err
	}
	switch {
	case c.queue != nil && wait && (ac.fair || !c.fairOnly):
		// A Fair waiter queues; so does the one default-mode waiter per
		// key and Locker (the others wait at the gate), whose place in
		// the queue takes a free lock at once, as an attempt would, and
		// otherwise waits for the entry before it only: a release then
		// wakes one waiter across all Lockers, not every waiting one.
		q := &queueWay{l: l, token: newToken()}
		if !ac.fair {
			leave, _, err := l.enterGate(a)
			if err != nil {
				return nil, gateErr(a, err, &NotAcquiredError{Key: a.Key.Name})
			}
			q.leaveGate = leave
		}
		return l.waitLoop(a, true, q)
	case c.notifier != nil:
		return l.waitLoop(a, wait, &notifyWay{l: l, backoff: c.backoffMin})
	}
	// A single Fair attempt takes the lock only when nobody holds it or
	// queues for it: exactly what a default attempt does on a queue.
	return l.waitLoop(a, wait, &backoffWay{l: l, backoff: c.backoffMin})
}

func (p storePolicy) release(ctx context.Context, lock store.Key, token string, _ bool) (ownership, error) {
	return p.l.st.Release(ctx, lock, token)
}

func (p storePolicy) releaseLease(ctx context.Context, s *Lease, _ time.Time) (ownership, error) {
	return p.l.st.Release(ctx, s.lock, s.token)
}

func (storePolicy) released(store.Key, string, bool) {}
func (storePolicy) holdEnded(store.Key)              {}

// waitWay is how a waiter waits between its attempts on a store; waitLoop
// runs it.
type waitWay interface {
	// try makes one attempt, or asks for the waiter's turn: the lease,
	// or the store's busy reply, or an error that ends the wait.
	try(a *acquisition) (*Lease, store.Reply, error)
	// pause waits until the next attempt is due, at most until left
	// runs out (0: no bound); it returns early when the Locker closes or
	// a.Ctx ends (waitLoop checks both), with the lease when the lock
	// was handed to the waiter meanwhile, or with an error that ends the
	// wait.
	pause(a *acquisition, r store.Reply, left time.Duration) (*Lease, error)
	// done is called once when the wait ends, with its outcome.
	done(a *acquisition, lease *Lease, err error)
}

// waitLoop makes w's attempts until one gets the lease or fails, or the
// wait ends: a single attempt (!wait), WithWait running out, the caller's
// context, Close.
func (l *Locker) waitLoop(a *acquisition, wait bool, w waitWay) (lease *Lease, err error) {
	defer func() { w.done(a, lease, err) }()
	for {
		lease, r, err := w.try(a)
		if lease != nil || err != nil {
			return lease, err
		}
		var left time.Duration
		if !a.GiveUp.IsZero() {
			if left = time.Until(a.GiveUp); left <= 0 {
				wait = false
			}
		}
		if !wait {
			return nil, &NotAcquiredError{Key: a.Key.Name, RetryAfter: r.HolderTTL}
		}
		l.startWaiting(a)
		if lease, err := w.pause(a, r, left); lease != nil || err != nil {
			return lease, err
		}
		switch {
		case l.closed.Load():
			return nil, ErrClosed
		case a.Ctx.Err() != nil:
			return nil, ctxErr(a.Ctx, a.Key.Name)
		}
	}
}

// sleep waits d (cut at left, when not 0), or until wake delivers (woken),
// a.Ctx ends or the Locker closes.
func (l *Locker) sleep(a *acquisition, d, left time.Duration, wake <-chan struct{}) (woken bool) {
	if left > 0 {
		d = min(d, left)
	}
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wake:
		return true
	case <-t.C:
	case <-a.Ctx.Done():
	case <-l.closing:
	}
	return false
}

// backoffWay polls the store: attempts after a capped, jittered backoff,
// never past the holder's remaining TTL.
type backoffWay struct {
	l       *Locker
	backoff time.Duration
}

func (w *backoffWay) try(a *acquisition) (*Lease, store.Reply, error) { return w.l.attempt(a) }

func (w *backoffWay) pause(a *acquisition, r store.Reply, left time.Duration) (*Lease, error) {
	d := pace.Jitter(&w.backoff, w.l.caps.backoffMax)
	if r.HolderTTL > 0 {
		d = min(d, r.HolderTTL)
	}
	w.l.sleep(a, d, left, nil)
	return nil, nil
}

func (w *backoffWay) done(*acquisition, *Lease, error) {}

// notifyWay waits for the store's word that the lock may be free
// (store.Notifier), one waiter per key and Locker: the first pause enters
// the key's gate.
type notifyWay struct {
	l       *Locker
	backoff time.Duration // after a failed watch
	leave   func()        // leaves the gate; nil: not through it yet
}

func (w *notifyWay) try(a *acquisition) (*Lease, store.Reply, error) { return w.l.attempt(a) }

func (w *notifyWay) pause(a *acquisition, r store.Reply, left time.Duration) (*Lease, error) {
	l := w.l
	if w.leave == nil {
		leave, waited, err := l.enterGate(a)
		if err != nil {
			return nil, gateErr(a, err, &NotAcquiredError{Key: a.Key.Name, RetryAfter: r.HolderTTL})
		}
		w.leave = leave
		if waited {
			return nil, nil // the lock may have changed hands meanwhile
		}
	}
	d := pace.PollAfter(r.HolderTTL, a.cfg.ttl)
	if left > 0 {
		d = min(d, left)
	}
	err := l.untilClosed(a.Ctx, d, func(ctx context.Context) error {
		return l.caps.notifier.WaitFree(ctx, a.Key, r.Seen)
	})
	if err != nil && a.Ctx.Err() == nil && !l.closed.Load() && !isTimeout(err) {
		// The store could not watch: back off before the next attempt,
		// which reports the store's state.
		l.sleep(a, pace.Jitter(&w.backoff, l.caps.backoffMax), left, nil)
	}
	return nil, nil
}

func (w *notifyWay) done(*acquisition, *Lease, error) {
	if w.leave != nil {
		w.leave()
	}
}

// queueWay waits in the store's queue (store.Queue): its entry waits for
// the entry before it to end, then asks again whether it is first.
type queueWay struct {
	l         *Locker
	token     string
	leaveGate func() // a default-mode waiter's gate; nil for Fair
	settled   bool   // the token took the lock, or was given back whole
	queued    bool   // an Enqueue of the token was answered: it may have an entry
	// busyCounter is the highest Reply.Counter of the token's busy
	// Enqueues: a hand-over whose fence is not above it is stale.
	busyCounter uint64
}

func (w *queueWay) try(a *acquisition) (*Lease, store.Reply, error) {
	l := w.l
	reply, err := l.enqueue(a.Ctx, a.Key, w.token, a.cfg)
	if err != nil {
		// Given back whole: its holding, if the request took the lock,
		// and its entry; unless the token has nothing: its first request
		// left nothing (store.LeftNothing).
		w.settled = true
		if w.queued || !l.leftNothing(err) {
			l.takeBack(a.Key, w.token, false, a.cfg.ttl)
		}
		return nil, store.Reply{}, storeErr(a.Ctx, a.Key.Name, err)
	}
	w.queued = true
	if !reply.Acquired {
		w.busyCounter = max(w.busyCounter, reply.Counter)
		return nil, reply, nil
	}
	// The lease, or, when its reply came too late, its give-back, ends
	// the holding and the entry.
	w.settled = true
	lease, err := l.newLease(a, w.token, reply.Fence, reply.ValidFrom, false, nil)
	return lease, store.Reply{}, err
}

func (w *queueWay) pause(a *acquisition, r store.Reply, left time.Duration) (*Lease, error) {
	l := w.l
	d := pace.PollAfter(r.HolderTTL, a.cfg.ttl)
	if left > 0 {
		d = min(d, left)
	}
	var handed store.Reply
	err := l.untilClosed(a.Ctx, d, func(ctx context.Context) (err error) {
		handed, err = l.caps.queue.WaitTurn(ctx, a.Key, w.token, a.cfg.ttl, r)
		return err
	})
	switch {
	case err == nil && handed.Acquired:
		return w.handed(a, handed)
	case err != nil && !isTimeout(err) && !l.closed.Load() && a.Ctx.Err() == nil:
		// The store could not watch the queue: give up the place, as a
		// store failure ends every other wait.
		return nil, unavailable("acquire", a.Key.Name, err)
	}
	return nil, nil
}

// handed makes the lease for a hand-over that WaitTurn reported: a
// release made the token's entry the holder in its own step (see
// store.Queue). The lease becomes live in that step, decided by the store
// as every acquisition is; its validity counts from the store's ValidFrom,
// no later than that step. A hand-over whose fence is not above the
// counter the token's last busy Enqueue saw was made before that request
// ran, to an earlier queueing of the token, whose holding the Locker cannot
// date: it is ignored, and the next try asks Enqueue, which reports what
// the token holds now.
func (w *queueWay) handed(a *acquisition, h store.Reply) (*Lease, error) {
	if store.Stale(h.Fence, w.busyCounter) {
		w.l.logger.Debug("lockmw: ignoring a stale hand-over", slog.String("key", a.Key.Name), slog.String("store", w.l.store),
			slog.Uint64("fence", h.Fence), slog.Uint64("seen", w.busyCounter))
		return nil, nil
	}
	w.settled = true
	return w.l.newLease(a, w.token, h.Fence, h.ValidFrom, false, nil)
}

// done takes the entry out of the queue when the wait ended without a
// lease or a give-back (Close, the caller's context, WithWait, a failed
// watch).
func (w *queueWay) done(a *acquisition, _ *Lease, _ error) {
	if !w.settled {
		w.l.leaveQueue(a.Ctx, a.Key, w.token, a.cfg.ttl)
	}
	if w.leaveGate != nil {
		w.leaveGate()
	}
}

// gateErr is the error for a waiter that could not pass its gate: Close,
// its context, or (else) the wait ran out: busy.
func gateErr(a *acquisition, err error, busy error) error {
	switch {
	case errors.Is(err, ErrClosed):
		return ErrClosed
	case a.Ctx.Err() != nil:
		return ctxErr(a.Ctx, a.Key.Name)
	}
	return busy
}

// untilClosed runs fn with a context that ends after d, when ctx ends, or
// when the Locker closes.
func (l *Locker) untilClosed(ctx context.Context, d time.Duration, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-l.closing:
			cancel()
		case <-stop:
		}
	}()
	return fn(ctx)
}

// enqueue is one Queue.Enqueue, counted as a flight so that Close waits
// for it.
func (l *Locker) enqueue(opCtx context.Context, sk store.Key, token string, ac *acquireConfig) (store.Reply, error) {
	l.flights.start()
	defer l.flights.done()
	if l.closed.Load() {
		return store.Reply{}, ErrClosed
	}
	ctx, cancel := bound(opCtx, ac.ttl)
	defer cancel()
	reply, err := l.caps.queue.Enqueue(ctx, sk, token, ac.ttl, ac.watchdog)
	return reply, unanswered(boundEnded(ctx), l.store, l.caps.diagnoser, "the queue entry", ac.ttl, err)
}

// leaveQueue takes token's entry out of the queue, even if opCtx has
// ended; if the store cannot be told, the cleaner retries.
func (l *Locker) leaveQueue(opCtx context.Context, lock store.Key, token string, ttl time.Duration) {
	l.flights.start()
	defer l.flights.done()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(opCtx), ttl)
	defer cancel()
	if err := l.caps.queue.Leave(ctx, lock, token); err != nil {
		l.takeBack(lock, token, false, ttl)
	}
}

// isTimeout reports whether err is a context deadline: the wait's own
// bound, after which the waiter asks the store again.
func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// enterGate waits until a is the one waiter through its key's gate, or
// a.Ctx ends, a.GiveUp passes (errGaveUp) or the Locker closes
// (ErrClosed); a waits (startWaiting) while the gate is taken. waited says
// whether it had to wait; leave lets the next one through.
func (l *Locker) enterGate(a *acquisition) (leave func(), waited bool, err error) {
	opCtx, key, giveUp := a.Ctx, a.Key, a.GiveUp
	l.gatesMu.Lock()
	if l.gates == nil {
		l.gates = make(map[store.Key]*gate)
	}
	g := l.gates[key]
	if g == nil {
		g = &gate{turn: make(chan struct{}, 1)}
		g.turn <- struct{}{}
		l.gates[key] = g
	}
	g.refs++
	l.gatesMu.Unlock()
	unref := func() {
		l.gatesMu.Lock()
		if g.refs--; g.refs == 0 {
			delete(l.gates, key)
		}
		l.gatesMu.Unlock()
	}
	leave = func() {
		g.turn <- struct{}{}
		unref()
	}
	select {
	case <-g.turn:
		return leave, false, nil
	default:
	}
	l.startWaiting(a)
	var deadline <-chan time.Time
	if !giveUp.IsZero() {
		t := time.NewTimer(time.Until(giveUp))
		defer t.Stop()
		deadline = t.C
	}
	select {
	case <-g.turn:
		return leave, true, nil
	case <-opCtx.Done():
		err = opCtx.Err()
	case <-l.closing:
		err = ErrClosed
	case <-deadline:
		err = errGaveUp
	}
	unref()
	return nil, false, err
}

// errGaveUp is enterGate's error when WithWait ran out.
var errGaveUp = errors.New("lockmw: the wait ran out")
