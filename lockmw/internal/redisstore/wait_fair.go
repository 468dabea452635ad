package redisstore

import (
	"context"
	"log/slog"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/errs"
	"github.com/lockmw/lockmw/lockmw/internal/pace"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is how Acquire waits in fair mode: waiters join the lock's
// queue in the store (granter's FairAcquire), and a release hands the lock
// straight to the first live waiter in the same step: the lock is never
// free in between, and only that waiter is told, by the store's grant
// message to its Locker — or directly, when the releasing Locker is its
// own. Queued waiters also poll now and then, so a lost grant message or a
// dropped queue entry costs latency, never liveness.
//
// Safety (package lockmw's doc.go, "Safety: how a lease becomes live":
// Acquisition, Fair grant, Early hand-over; for this store's steps,
// safety.go, "How a lease becomes live"): a fair
// lease comes from a fair attempt taking a free lock, dated from the
// request's send time; from a grant, dated from a time known to precede it,
// and confirmed by a renewal first when dated more than TTL/3 back
// (fairGrantLease); or from an early hand-over (handover.go).

// forgetFair drops a released fair lease from its room.
func (l *grantPolicy) forgetFair(lock store.Key, token string) {
	l.roomsMu.Lock()
	defer l.roomsMu.Unlock()
	if r := l.rooms[lock]; r != nil && r.fair[token] != nil {
		delete(r.fair, token)
		r.fairBusy--
		l.unref(r)
	}
}

// acquireFair takes key in arrival order: one attempt when !wait, else a
// place in the queue and a wait for the hand-over.
func (l *grantPolicy) acquireFair(a *store.Acquisition, wait bool) (store.Lease, error) {
	// Close waits for fair acquisitions under way (a waiter stops waiting
	// when Close begins): one that was granted the lock, or leaves the
	// queue, is done with the store before Close returns.
	l.h.Start()
	defer l.h.Done()
	if l.h.Closed() {
		return nil, errs.ErrClosed
	}
	token := l.h.NewToken()
	entry := l.waits.FairEntry(l.h.ID(), token, a.TTL)
	if !wait {
		sentAt := time.Now()
		reply, err := l.waits.FairAcquire(a.Ctx, a.Key, token, a.TTL, entry, FairTry)
		if err != nil {
			if !l.waits.LeftNothing(err) {
				l.h.TakeBack(a.Key, token, true, a.TTL, nil) // it may take the lock yet
			}
			return nil, l.h.StoreErr(a, err)
		}
		if !reply.Acquired {
			return nil, l.h.NotAcquired(a, reply.Pttl)
		}
		return l.h.NewLease(a, token, reply.Fence, sentAt, false, nil)
	}

	w := &waiter{token: token, ttl: a.TTL, grant: make(chan grantInfo, 1)}
	l.roomsMu.Lock()
	r := l.join(a.Key)
	r.fair[token] = w
	// A fair waiter or holder here, or a hand-over that left others queued:
	// the lock is busy, and the queue likely exists.
	known := r.fairBusy > 0 || l.isHotLocked(a.Key)
	r.fairBusy++
	l.roomsMu.Unlock()

	f := &fairWay{l: l, w: w, entry: entry, known: known}
	if err := watchUntil(a.Ctx, l.waits, a.GiveUp, a.Key, true); err == nil {
		f.watching = true
	} else if a.Ctx.Err() != nil {
		err = l.h.CtxErr(a)
		f.Done(a, nil, err)
		return nil, err
	} else {
		// Grants to this Locker would find nobody listening and skip its
		// waiters; polling still gets the lock once the queue drains.
		l.h.Logger().Debug("lockmw: waiting without grant notifications", slog.String("key", a.Key.Name), slog.String("store", l.h.Name()), slog.Any("error", err))
	}
	return l.h.WaitLoop(a, true, f)
}

// fairWay is a fair waiter on a granter: its entry queues, and a release
// hands it the lock (a grant, heard in the store's grant message to its
// Locker or directly from a release of this Locker); it also polls now and
// then, when the holder's TTL runs out, in case a grant message was lost.
type fairWay struct {
	l         *grantPolicy
	w         *waiter
	entry     string
	known     bool // the queue likely exists: enqueue without an attempt
	started   bool // the entry was queued (or the first attempt made)
	holderTTL time.Duration
	watching  bool
}

// try queues the entry (first), or polls: granted? still queued?
func (f *fairWay) Try(a *store.Acquisition) (store.Lease, store.Reply, error) {
	l, w := f.l, f.w
	mode := FairPoll
	if !f.started {
		f.started = true
		mode = FairWait
		// Nothing has been granted to w before its entry is queued, so
		// the time before the request is a safe start of validity for any
		// grant.
		l.setBusy(w, time.Now(), 0)
		if f.known {
			ok, err := l.waits.Enqueue(a.Ctx, a.Key, f.entry)
			if err != nil {
				return nil, store.Reply{}, l.h.StoreErr(a, err)
			}
			if ok {
				return nil, store.Reply{}, nil
			}
		}
	}
	sentAt := time.Now()
	reply, err := l.waits.FairAcquire(a.Ctx, a.Key, w.token, a.TTL, f.entry, mode)
	if err != nil {
		return nil, store.Reply{}, l.h.StoreErr(a, err)
	}
	if lease, err := l.fairReplyLease(a, w, reply, sentAt); lease != nil || err != nil {
		return lease, store.Reply{}, err
	}
	f.holderTTL = reply.Pttl
	return nil, store.Reply{HolderTTL: reply.Pttl}, nil
}

// pause waits for a grant, or for the holder's TTL to run out: then try
// polls.
func (f *fairWay) Pause(a *store.Acquisition, _ store.Reply, left time.Duration) (store.Lease, error) {
	g, granted, _ := pauseFor(f.l.h, a, pace.PollAfter(f.holderTTL, a.TTL), left, nil, f.w.grant)
	if !granted {
		return nil, nil
	}
	// No lease, no error: the grant had expired before w saw it, and try
	// polls at once.
	lease, _, err := f.l.fairGrantLease(a, f.w, g)
	return lease, err
}

// done leaves the queue, and passes on a lock granted meanwhile, unless w
// holds the lease.
func (f *fairWay) Done(a *store.Acquisition, lease store.Lease, err error) {
	if f.watching {
		f.l.waits.Unwatch(a.Key, true)
	}
	if lease == nil {
		f.l.abandonFair(a.Key, f.w, f.entry, err)
	}
}

// fairGrantLease turns a grant delivered to the fair waiter w into its
// lease. again reports a grant that had expired before w saw it: w waits on
// and should poll at once.
func (l *grantPolicy) fairGrantLease(a *store.Acquisition, w *waiter, g grantInfo) (lease store.Lease, again bool, err error) {
	defer l.h.Done() // started by the grant's sender
	if g.early != nil {
		// Handed over by a release in this Locker, before the store
		// confirmed it.
		lease, err = newEarlyLease(l.h, a, w.token, g.early)
		return lease, false, err
	}
	if time.Since(g.validFrom) > a.TTL/3 {
		// Queued long ago: the grant's start is only known to be after
		// w's last busy attempt. Renew to learn a fresh one.
		sentAt := time.Now()
		res := l.waits.Renew(a.Ctx, []store.RenewRequest{{Key: a.Key, Token: w.token, TTL: a.TTL}})[0]
		if res.Err != nil {
			return nil, false, l.h.StoreErr(a, res.Err)
		}
		if res.Ownership != store.Owned {
			// The grant expired before it was seen: wait again.
			l.reopen(w)
			return nil, true, nil
		}
		g.validFrom = sentAt
	}
	st := new(leaseState)
	st.reserved.Store(g.reserved)
	st.next.Store(&g.next)
	lease, err = l.h.NewLease(a, w.token, g.fence, g.validFrom, true, st)
	return lease, false, err
}

// fairReplyLease turns a fair attempt's reply into a lease, or records that
// the lock was still busy when the attempt (sent at sentAt) ran.
func (l *grantPolicy) fairReplyLease(a *store.Acquisition, w *waiter, reply FairReply, sentAt time.Time) (store.Lease, error) {
	switch {
	case reply.Acquired:
		l.claim(w)
		return l.h.NewLease(a, w.token, reply.Fence, sentAt, true, nil)
	case reply.Granted:
		// Handed over earlier, its message not seen: the lock has pttl
		// left from when the attempt ran, which was after sentAt.
		l.claim(w)
		return l.h.NewLease(a, w.token, reply.Fence, sentAt.Add(reply.Pttl-a.TTL), true, nil)
	}
	l.setBusy(w, sentAt, reply.Counter)
	return nil, nil
}

// reopen lets w receive a grant again, after one it got had expired.
func (l *grantPolicy) reopen(w *waiter) {
	l.roomsMu.Lock()
	w.delivered = false
	l.roomsMu.Unlock()
}

// claim marks w as holding the lock, so a late grant message is ignored.
func (l *grantPolicy) claim(w *waiter) {
	l.roomsMu.Lock()
	w.delivered = true
	l.roomsMu.Unlock()
}

// setBusy records that the lock was not w's when an attempt sent at t ran
// and saw the fence counter at counter, unless a grant was already
// delivered.
func (l *grantPolicy) setBusy(w *waiter, t time.Time, counter uint64) {
	l.roomsMu.Lock()
	if !w.delivered {
		w.busySent = t
		w.busyCounter = max(w.busyCounter, counter)
	}
	l.roomsMu.Unlock()
}

// abandonFair takes a fair waiter that gives up out of its room and out of
// the queue; a lock granted to it meanwhile is passed on.
func (l *grantPolicy) abandonFair(lock store.Key, w *waiter, entry string, why error) {
	l.roomsMu.Lock()
	r := l.rooms[lock]
	delivered := w.delivered
	if r != nil && r.fair[w.token] == w {
		delete(r.fair, w.token)
		r.fairBusy--
		l.unref(r)
	}
	l.roomsMu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), l.h.TTL())
	defer cancel()
	granted := delivered
	if delivered {
		select {
		case g := <-w.grant:
			defer l.h.Done() // started by the grant's sender
			if g.early != nil {
				g.early.Wait(ctx)
			}
		default:
		}
	} else {
		g, err := l.waits.Leave(ctx, lock, entry, w.token)
		if err != nil {
			// A failed attempt may yet take the lock or queue the entry:
			// the cleaner leaves and gives back once the store answers.
			l.h.Logger().Debug("lockmw: could not leave the fair queue", slog.String("key", lock.Name), slog.String("store", l.h.Name()), slog.Any("error", err))
			l.h.TakeBack(lock, w.token, true, w.ttl, func(ctx context.Context) (bool, error) {
				return l.waits.Leave(ctx, lock, entry, w.token)
			})
			return
		}
		granted = g
	}
	if granted {
		if _, err := l.releaseToken(ctx, lock, w.token); err != nil {
			l.h.Logger().Debug("lockmw: could not pass on a lock granted to a waiter that gave up; retrying",
				slog.String("key", lock.Name), slog.String("store", l.h.Name()), slog.Any("error", err), slog.Any("reason", why))
			l.h.TakeBack(lock, w.token, true, w.ttl, nil)
		}
	}
}
