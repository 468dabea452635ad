package lockmw

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is how Acquire waits for a lock kept in a store behind the
// internal boundary (store.go).
//
// Default mode: an attempt that finds the lock busy waits; a free lock is
// taken at once, whoever waits. Within one Locker only one waiter per key
// waits on the store (enterGate); the others wait for it to be done, then
// try once and take its place, so the store sees one waiter per Locker,
// not one per goroutine. On a store whose locks are queues (store.Queue)
// that waiter asks for a place in the queue as a Fair waiter does (which
// takes a free lock at once, at the cost of an attempt), so a release
// wakes one waiter across all Lockers, unless the queue is for Fair
// waiters only (store.FairOnly: a polling store, where a turn in the queue
// costs more requests than an attempt). Otherwise it waits until
// the store says the lock may be free (store.Notifier), then tries again
// (every waiting Locker tries: they barge); a store without notifications
// is polled with a capped, jittered backoff, in the store's range
// (store.Backoff) or else minBackoff to maxBackoff. A
// notification wait is bounded by the holder's TTL (or the waiter's own),
// so a lost notification costs latency, never liveness.
//
// Fair mode (store.Queue): the waiter's entry joins the lock's queue and
// waits for the entry just before it to end (only that one: no herd),
// then asks again; the first entry holds the lock. A waiter that gives up
// takes its entry out; if that fails, the Locker's cleaner retries it.

// Without release notifications, a waiter retries with a jittered,
// capped exponential backoff, never sleeping past the holder's remaining
// TTL. This is the default range, tuned for Redis' round trip (Redlock's
// wake-lost retries use it too); a store may choose its own
// (store.Backoff: a database wants longer).
const (
	minBackoff = 500 * time.Microsecond
	maxBackoff = 8 * time.Millisecond
)

// waitStore runs an acquisition on a store without hand-overs (no
// store.Granter) and without a WakeQueue: the dispatch target of wait.
func (l *Locker) waitStore(a *acquisition, wait bool) (*Lease, error) {
	if err := l.st.CheckTTL(a.cfg.ttl); err != nil {
		return nil, err
	}
	sk := a.lock
	c := &l.caps
	if a.cfg.fair {
		if c.queue == nil {
			return nil, fmt.Errorf("%w: Fair needs a store whose locks are queues; this one has none: acquire without Fair", ErrInvalidOption)
		}
		if wait {
			return l.waitQueue(a, sk)
		}
		// A single attempt takes the lock only when nobody holds it or
		// queues for it: exactly what a default attempt does on a queue.
	}
	if wait && c.queue != nil && !c.fairOnly {
		// A store whose locks are queues: the Locker's one waiter for
		// key (the others wait at the gate) asks for a place in the
		// queue, which takes a free lock at once, as an attempt would,
		// and otherwise waits for the entry before it only. A release
		// then wakes one waiter across all Lockers, not every waiting one.
		leave, _, err := l.enterGate(a.opCtx, sk, a.giveUp)
		switch {
		case errors.Is(err, ErrClosed):
			return nil, ErrClosed
		case err != nil && a.opCtx.Err() != nil:
			return nil, ctxErr(a.opCtx, a.key)
		case err != nil:
			return nil, &NotAcquiredError{Key: a.key} // WithWait ran out
		}
		defer leave()
		return l.waitQueue(a, sk)
	}
	backoff := c.backoffMin
	var timer *time.Timer
	gated := false
	for {
		lease, reply, err := l.attempt(a)
		if lease != nil || err != nil {
			return lease, err
		}
		busy := &NotAcquiredError{Key: a.key, RetryAfter: reply.HolderTTL}
		if !wait {
			return nil, busy
		}
		if c.notifier != nil && !gated {
			// One waiter per key and Locker waits for the store's word;
			// the others queue behind it here.
			leave, waited, err := l.enterGate(a.opCtx, sk, a.giveUp)
			switch {
			case errors.Is(err, ErrClosed):
				return nil, ErrClosed
			case err != nil && a.opCtx.Err() != nil:
				return nil, ctxErr(a.opCtx, a.key)
			case err != nil:
				return nil, busy // WithWait ran out
			}
			defer leave()
			gated = true
			if waited {
				continue // the lock may have changed hands meanwhile
			}
		}
		var d time.Duration
		if c.notifier != nil {
			d = pollAfter(reply.HolderTTL, a.cfg.ttl)
		} else {
			d = backoff/2 + mathrand.N(backoff/2+1)
			backoff = min(backoff*2, c.backoffMax)
			if reply.HolderTTL > 0 {
				d = min(d, reply.HolderTTL)
			}
		}
		if !a.giveUp.IsZero() {
			left := time.Until(a.giveUp)
			if left <= 0 {
				return nil, busy
			}
			d = min(d, left)
		}
		if c.notifier != nil {
			werr := l.untilClosed(a.opCtx, d, func(ctx context.Context) error {
				return c.notifier.WaitFree(ctx, sk, reply.Seen)
			})
			if werr != nil && a.opCtx.Err() == nil && !l.closed.Load() {
				// The store could not watch: back off before the next
				// attempt, which reports the store's state.
				d = backoff/2 + mathrand.N(backoff/2+1)
				backoff = min(backoff*2, c.backoffMax)
			} else {
				d = 0
			}
		}
		if d > 0 {
			if timer == nil {
				timer = time.NewTimer(d)
				defer timer.Stop()
			} else {
				timer.Reset(d)
			}
			select {
			case <-timer.C:
			case <-a.opCtx.Done():
			case <-l.closing:
			}
		}
		switch {
		case l.closed.Load():
			return nil, ErrClosed
		case a.opCtx.Err() != nil:
			return nil, ctxErr(a.opCtx, a.key)
		}
	}
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

// waitQueue waits in the store's queue for the lock: its entry waits for
// the entry before it to end, then asks again whether it is first.
func (l *Locker) waitQueue(a *acquisition, sk store.Key) (*Lease, error) {
	token := newToken()
	for {
		reply, err := l.enqueue(a.opCtx, sk, token, a.cfg)
		if err != nil {
			l.takeBack(a.lock, token, "", false, a.cfg.ttl)
			return nil, storeErr(a.opCtx, a.key, err)
		}
		if reply.Acquired {
			return l.newLease(a, token, reply.Fence, reply.ValidFrom, false)
		}
		d := pollAfter(reply.HolderTTL, a.cfg.ttl)
		if !a.giveUp.IsZero() {
			left := time.Until(a.giveUp)
			if left <= 0 {
				l.leaveQueue(a.opCtx, a.lock, token, a.cfg.ttl)
				return nil, &NotAcquiredError{Key: a.key, RetryAfter: reply.HolderTTL}
			}
			d = min(d, left)
		}
		werr := l.untilClosed(a.opCtx, d, func(ctx context.Context) error {
			return l.caps.queue.WaitTurn(ctx, sk, token, a.cfg.ttl, reply)
		})
		switch {
		case l.closed.Load():
			l.leaveQueue(a.opCtx, a.lock, token, a.cfg.ttl)
			return nil, ErrClosed
		case a.opCtx.Err() != nil:
			l.leaveQueue(a.opCtx, a.lock, token, a.cfg.ttl)
			return nil, ctxErr(a.opCtx, a.key)
		case werr != nil && !isTimeout(werr):
			// The store could not watch the queue: give up the place, as
			// a store failure ends every other wait.
			l.leaveQueue(a.opCtx, a.lock, token, a.cfg.ttl)
			return nil, unavailable("acquire", a.key, werr)
		}
	}
}

// enqueue is one Queue.Enqueue, counted as a flight so that Close waits
// for it.
func (l *Locker) enqueue(opCtx context.Context, sk store.Key, token string, ac *acquireConfig) (store.Reply, error) {
	l.flights.start()
	defer l.flights.done()
	if l.closed.Load() {
		return store.Reply{}, ErrClosed
	}
	return l.caps.queue.Enqueue(opCtx, sk, token, ac.ttl, ac.watchdog)
}

// leaveQueue takes token's entry out of the queue, even if opCtx has
// ended; if the store cannot be told, the cleaner retries.
func (l *Locker) leaveQueue(opCtx context.Context, lock store.Key, token string, ttl time.Duration) {
	l.flights.start()
	defer l.flights.done()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(opCtx), ttl)
	defer cancel()
	if err := l.caps.queue.Leave(ctx, lock, token); err != nil {
		l.takeBack(lock, token, "", false, ttl)
	}
}

// isTimeout reports whether err is a context deadline: the wait's own
// bound, after which the waiter asks the store again.
func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// gate lets one default-mode waiter per key and Locker wait for the
// store's notification and retry; the others wait for the gate, so that a
// release sets off one attempt per Locker, not one per waiting goroutine.
type gate struct {
	turn chan struct{} // holds a token while nobody is through the gate
	refs int           // waiters through or at the gate; guarded by Locker.gatesMu
}

// enterGate waits until the caller is the one waiter through key's gate,
// or opCtx ends, giveUp passes (errGaveUp) or the Locker closes
// (ErrClosed). waited says whether it had to wait; leave lets the next one
// through.
func (l *Locker) enterGate(opCtx context.Context, key store.Key, giveUp time.Time) (leave func(), waited bool, err error) {
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
