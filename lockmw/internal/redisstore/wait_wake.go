package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/errs"
	"github.com/lockmw/lockmw/lockmw/internal/pace"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is how a Redlock Acquire waits for a busy lock: on wakes, not
// by polling, and one waiter at a time.
//
// The first master keeps, beside its copy of the lock, a wait queue of
// "<locker id> <waiter id>" entries. A waiter's attempt that finds the lock
// held there queues its entry in the same step (wakeQueue's AcquireQueued),
// so no release can fall between the two; a Locker whose release just woke a
// waiter knows others wait, and its next Acquire of the lock queues with one
// enqueue step (EnqueueWake) instead of an attempt. The holder's release on
// the first master wakes the first waiter still listening, by the store's
// wake message to its Locker, and only that waiter tries (how:
// redlock_safety.go). A wake grants nothing: the
// waiter makes an ordinary attempt, decided by a quorum as every other (see
// redlock.go), so this file adds no way for a lease to become live. If the
// attempt loses (its wake came before the release reached the other masters,
// or a newcomer took the lock first), the waiter retries after a short
// backoff, or queues again when the first master says the lock is held.
//
// A lost wake (the first master down or restarted, a dropped message, a
// waiter that gave up as it was woken and could not pass its turn on)
// costs latency, never liveness: a queued waiter also retries when the
// holder's TTL would have run out.
//
// No entry outlives its Locker's Close (while the first master answers).
// An entry reaches the queue only through a waiter's attempt sent with it
// (AcquireQueued queues it when the lock is held there) or its
// EnqueueWake. After each, the waiter records what it learnt (wakeWay.try):
// queued when the first master answered that it queued the entry, or has
// not answered (acquireQueued waits for that answer a bounded time, and
// counts an answer still missing as queued); unsure when the first master
// failed without answering (a lost reply, which may have run). Every
// reply carries both, a won attempt's and a failed one's too: the first
// master may queue the entry while the others grant the lock, or before
// the fencing round fails. A wake clears queued only (the release that
// woke the waiter popped its entry); unsure stays. When the waiter is
// done for any reason (lease, give-up, error, Close: the Locker's wait loop
// calls wakeWay.Done), it takes the entry out if either is set: an LREM of every
// copy (a lost reply's attempt and the next may both have queued it),
// sent through the first master's queue after every attempt of the
// waiter, and retried by the Locker's cleaner twice after an answer (package
// lockmw's cleanup.go: an attempt stalled in the master runs before the second). Close stops
// waiters first and waits for them (a bounded time, the Locker's TTL):
// Close ends their requests too (Host.EndAtClose; a rollback no longer waits
// for its answers, which the masters' senders still send before they
// stop), so a waiter inside an attempt on a slow first master returns at
// once, and its leave is handed to the cleaner, whose close gives each
// leave a last try (twice) before the store closes; the leave is queued
// behind the waiter's attempt there, and the first master's sender sends
// both before it stops. A waiter that still outlasts Close's wait (a
// loaded host) finds the store closed: its leave then goes on the
// first master's client itself (leaveOnClient), after that sender has
// stopped, while the client is open (close clients after the Locker).
// If the entry is not recorded it was never queued: each attempt's first
// master answer said busy-and-queued, granted (nothing queued), or is
// missing or failed, all four counted above.
//
// If the first master does not answer at Close (down, paused, cut off),
// the leave is given up: its entry stays, and is skipped by the first
// release or passed-on wake there that reaches it (its Locker no longer
// listens, so PUBLISH reaches nobody and the next entry is tried), or is
// taken with the queue when the queue expires. A paused master runs a
// leave already sent when it resumes.

// wakePolicy is the policy of a store with a wakeQueue (Redlock):
// its waiters wait on wakes (wakeWay), in rooms where the wakes find them;
// a release is the store's, whose release step wakes the next waiter.
type wakePolicy struct {
	h store.Host
	*roomSet
	wakes wakeQueue // the Locker's store (Redlock)
	// backoffMin and backoffMax bound a waiter's backoff after a lost
	// race (Host.Backoff).
	backoffMin, backoffMax time.Duration
}

// Policy returns the wake policy for the Locker h, and sends the store's
// wakes to it. The Locker calls it once, before its first request.
func (b *Redlock) Policy(h store.Host) store.Policy {
	if b.holderInfo != "" {
		h = redlockDescribingHost{Host: h, b: b}
	}
	p := &wakePolicy{h: h, roomSet: newRoomSet(), wakes: b}
	p.backoffMin, p.backoffMax = h.Backoff()
	b.events = Events{Woken: p.woken}
	b.onWake = p.markHot
	return p
}

// Acquire makes one attempt (!wait) or waits on wakes.
func (l *wakePolicy) Acquire(a *store.Acquisition, wait bool) (store.Lease, error) {
	if a.Fair {
		return nil, fmt.Errorf("%w: Fair needs a store that serves its waiters in order; %s only wakes them one at a time: acquire without Fair, or use New", errs.ErrInvalidOption, l.h.Name())
	}
	if err := l.wakes.CheckTTL(a.TTL); err != nil {
		return nil, err
	}
	if !wait {
		return l.h.WaitLoop(a, false, &wakeWay{l: l, ctx: a.Ctx, single: true})
	}
	w, err := l.joinWakeQueue(a)
	if err != nil {
		return nil, err
	}
	return l.h.WaitLoop(a, true, w)
}

// Release is the store's: its release step wakes the next waiter.
func (l *wakePolicy) Release(ctx context.Context, lock store.Key, token string, _ bool) (store.Ownership, error) {
	return l.wakes.Release(ctx, lock, token)
}

// ReleaseLease is Release.
func (l *wakePolicy) ReleaseLease(ctx context.Context, s store.Held, _ time.Time) (store.Ownership, error) {
	return l.wakes.Release(ctx, s.Key, s.Token)
}

// Released and HoldEnded: nothing to do.
func (*wakePolicy) Released(store.Key, string, bool) {}
func (*wakePolicy) HoldEnded(store.Key)              {}

// woken routes a wake from the first master to its waiter; a wake for a
// waiter that is gone is passed on to the next.
func (l *wakePolicy) woken(k store.Key, token string) {
	l.roomsMu.Lock()
	var w *waiter
	if r := l.rooms[k]; r != nil {
		w = r.fair[token]
	}
	if w != nil {
		signal(w.wake)
	}
	l.roomsMu.Unlock()
	if w == nil {
		l.passWakeOn(k)
	}
}

// passWakeOn wakes the next waiter of keys, in the background.
func (l *wakePolicy) passWakeOn(lock store.Key) {
	l.h.Start()
	go func() {
		defer l.h.Done()
		ctx, cancel := context.WithTimeout(context.Background(), l.h.TTL())
		defer cancel()
		if err := l.wakes.PassWake(ctx, lock); err != nil {
			l.h.Logger().Debug("lockmw: could not pass a wake on; the next waiter retries when its timer runs out",
				slog.String("key", lock.Name), slog.String("store", l.h.Name()), slog.Any("error", err))
		}
	}()
}

// wakeWay is a waiter on a wakeQueue (Redlock): its attempts queue its
// entry on the first master when they find the lock held there, and it
// waits for the wake of a release (see the top of this file). A single
// attempt (TryAcquire) is a wakeWay without an entry.
type wakeWay struct {
	l      *wakePolicy
	ctx    context.Context // requests: a.Ctx, also ending when Close begins
	single bool            // one attempt, no entry: no room, no queue
	w      *waiter
	r      *room
	entry  string
	// queued: w counts itself queued on the first master, and waits for a
	// wake (a wake pops the entry). unsure: an attempt may have queued the
	// entry unseen (its reply lost), so the entry may be there whatever
	// queued says. done takes the entry out if either is set, whether w
	// gives up, is closed, or got its lease (a won attempt may have queued
	// it too): see leaveWakeQueue.
	queued, unsure bool
	skip           bool // queued without an attempt (EnqueueWake): wait first
	backoff        time.Duration
	watching       bool
	stop           func() // ends ctx
}

// joinWakeQueue readies a waiting acquisition on a wakeQueue: w joins its
// room (where wakes find it) and listens for wakes; if this Locker's
// release just woke a waiter of the lock, its entry queues at once,
// without an attempt that would find the lock held.
func (l *wakePolicy) joinWakeQueue(a *store.Acquisition) (*wakeWay, error) {
	// Close waits for waiting acquisitions (a waiter stops when Close
	// begins): one that may be queued leaves the queue before the store
	// closes.
	l.h.Start()
	if l.h.Closed() {
		l.h.Done()
		return nil, errs.ErrClosed
	}
	b := l.wakes
	w := &wakeWay{l: l, w: &waiter{token: l.h.NewToken(), wake: make(chan struct{}, 1)}, backoff: l.backoffMin}
	w.entry = b.WakeEntry(l.h.ID(), w.w.token)
	l.roomsMu.Lock()
	w.r = l.join(a.Key)
	w.r.fair[w.w.token] = w.w
	l.roomsMu.Unlock()
	// Requests end when Close begins: Close waits for w (a bounded time),
	// and w's leave must be handed to the cleaner before that wait ends.
	w.ctx, w.stop = l.h.EndAtClose(a.Ctx)

	if err := watchUntil(w.ctx, b, a.GiveUp, a.Key, true); err == nil {
		w.watching = true
	} else if a.Ctx.Err() != nil {
		w.Done(a, nil, nil)
		return nil, l.h.CtxErr(a)
	} else if w.ctx.Err() != nil {
		w.Done(a, nil, nil)
		return nil, errs.ErrClosed
	} else {
		l.h.Logger().Debug("lockmw: waiting without wakes", slog.String("key", a.Key.Name), slog.String("store", l.h.Name()), slog.Any("error", err))
	}
	if l.isHot(a.Key) {
		// Others were waiting when this Locker's release woke one: queue
		// behind them without an attempt that would find the lock held.
		switch ok, maybe := b.EnqueueWake(w.ctx, a.Key, w.entry); {
		case ok:
			w.queued, w.skip = true, true
		case maybe:
			w.queued, w.unsure = true, true // it may be queued: leaving takes it out; an attempt follows
		}
	}
	return w, nil
}

func (w *wakeWay) Try(a *store.Acquisition) (store.Lease, store.Reply, error) {
	if w.skip {
		w.skip = false
		return nil, store.Reply{}, nil
	}
	ctx, e := w.ctx, w.entry
	if w.single {
		ctx = a.Ctx
	}
	if w.queued {
		e = "" // already queued: do not queue twice
	}
	lease, reply, err := w.l.attemptQueued(ctx, a, e)
	w.queued = w.queued || reply.Queued // (also when it failed: leaving takes the entry out)
	w.unsure = w.unsure || reply.Unsure
	if lease != nil || err != nil {
		return lease, store.Reply{}, err
	}
	if w.single && reply.HolderTTL == 0 {
		// Masters asked with a plain SET do not tell the holder's TTL.
		reply.HolderTTL = w.l.wakes.HolderTTL(a.Ctx, a.Key)
	}
	return nil, reply.Reply, nil
}

// pause waits for the wake when queued (the timer is for a lost wake),
// else, the lock changing hands (or the first master away), a short
// backoff.
func (w *wakeWay) Pause(a *store.Acquisition, r store.Reply, left time.Duration) (store.Lease, error) {
	var d time.Duration
	if w.queued {
		d = pace.PollAfter(r.HolderTTL, a.TTL)
	} else {
		d = pace.Jitter(&w.backoff, w.l.backoffMax)
	}
	if sleep(w.l.h, a, d, left, w.w.wake) {
		// Popped by the release that woke w.
		w.queued, w.backoff = false, w.l.backoffMin
	}
	return nil, nil
}

func (w *wakeWay) Done(*store.Acquisition, store.Lease, error) {
	if w.single {
		return
	}
	if w.watching {
		w.l.wakes.Unwatch(w.r.lock, true)
	}
	w.stop()
	w.l.leaveWakeQueue(w.r, w.w, w.entry, w.queued || w.unsure)
	w.l.h.Done()
}

// leaveWakeQueue takes w out of its room and, if it is still queued, out of
// the wait queue; a wake w got and did not use goes to the next waiter.
func (l *wakePolicy) leaveWakeQueue(r *room, w *waiter, entry string, queued bool) {
	l.roomsMu.Lock()
	delete(r.fair, w.token)
	woken := len(w.wake) > 0
	l.unref(r)
	l.roomsMu.Unlock()
	if woken {
		l.passWakeOn(r.lock)
	}
	if !queued {
		return
	}
	// Taken out by the cleaner, which retries while the first master does
	// not answer. An entry popped meanwhile (LREM finds nothing) had its
	// wake sent to nobody here, and deliverWake passed it on.
	// It goes through the first master's queue, keyed by the lock, so that
	// it runs after an attempt of w's that may still be on its way there
	// (and queue the entry).
	lock := r.lock
	l.h.Cleanup(lock.Name, time.Now().Add(max(l.h.TTL(), time.Minute)), func(ctx context.Context) error {
		return l.wakes.LeaveWake(ctx, lock, entry)
	})
}

// attemptQueued is attempt on a WakeQueue, its requests made under ctx
// (a.Ctx, or one that also ends at Close): entry, if not empty, is
// queued on the first master when it finds the lock held.
func (l *wakePolicy) attemptQueued(ctx context.Context, a *store.Acquisition, entry string) (store.Lease, QueuedReply, error) {
	l.h.Start()
	defer l.h.Done()
	if l.h.Closed() {
		return nil, QueuedReply{}, errs.ErrClosed
	}
	token := l.h.NewToken()
	sentAt := time.Now()
	reply, err := l.wakes.AcquireQueued(ctx, a.Key, token, a.TTL, entry)
	if err != nil {
		if a.Ctx.Err() == nil && errors.Is(context.Cause(ctx), errs.ErrClosed) {
			return nil, reply, errs.ErrClosed
		}
		return nil, reply, l.h.StoreErr(a, err)
	}
	if !reply.Acquired {
		return nil, reply, nil
	}
	lease, err := l.h.NewLease(a, token, reply.Fence, sentAt, false, nil)
	return lease, reply, err
}
