package lockmw

import (
	"context"
	"log/slog"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file is how Acquire waits in fair mode: waiters join the lock's
// queue in the store (Granter's FairAcquire), and a release hands the lock
// straight to the first live waiter in the same step: the lock is never
// free in between, and only that waiter is told, by the store's grant
// message to its Locker — or directly, when the releasing Locker is its
// own. Queued waiters also poll now and then, so a lost grant message or a
// dropped queue entry costs latency, never liveness.
//
// Safety (doc.go, "Safety: how a lease becomes live": Acquisition, Fair
// grant, Early hand-over; for the store that hands over,
// lockmw/internal/redisstore, safety.go, "How a lease becomes live"): a fair
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
func (l *grantPolicy) acquireFair(a *acquisition, wait bool) (*Lease, error) {
	// Close waits for fair acquisitions under way (a waiter stops waiting
	// when Close begins): one that was granted the lock, or leaves the
	// queue, is done with the store before Close returns.
	l.flights.start()
	defer l.flights.done()
	if l.closed.Load() {
		return nil, ErrClosed
	}
	token := newToken()
	entry := l.waits.FairEntry(l.id, token, a.cfg.ttl)
	if !wait {
		sentAt := time.Now()
		reply, err := l.waits.FairAcquire(a.opCtx, a.lock, token, a.cfg.ttl, entry, store.FairTry)
		if err != nil {
			if !l.leftNothing(err) {
				l.takeBack(a.lock, token, true, a.cfg.ttl) // it may take the lock yet
			}
			return nil, storeErr(a.opCtx, a.key, err)
		}
		if !reply.Acquired {
			return nil, &NotAcquiredError{Key: a.key, RetryAfter: reply.Pttl}
		}
		return l.newLease(a, token, reply.Fence, sentAt, false)
	}

	w := &waiter{token: token, ttl: a.cfg.ttl, grant: make(chan grantInfo, 1)}
	l.roomsMu.Lock()
	r := l.join(a.lock)
	r.fair[token] = w
	// A fair waiter or holder here, or a hand-over that left others queued:
	// the lock is busy, and the queue likely exists.
	known := r.fairBusy > 0 || l.isHotLocked(a.lock)
	r.fairBusy++
	l.roomsMu.Unlock()

	f := &fairWay{l: l, w: w, entry: entry, known: known}
	if err := watchUntil(a.opCtx, l.waits, a.giveUp, a.lock, true); err == nil {
		f.watching = true
	} else if a.opCtx.Err() != nil {
		err = ctxErr(a.opCtx, a.key)
		f.done(a, nil, err)
		return nil, err
	} else {
		// Grants to this Locker would find nobody listening and skip its
		// waiters; polling still gets the lock once the queue drains.
		l.logger.Debug("lockmw: waiting without grant notifications", slog.String("key", a.key), slog.String("store", l.store), slog.Any("error", err))
	}
	return l.waitLoop(a, true, f)
}

// fairWay is a fair waiter on a Granter: its entry queues, and a release
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
func (f *fairWay) try(a *acquisition) (*Lease, store.Reply, error) {
	l, w := f.l, f.w
	mode := store.FairPoll
	if !f.started {
		f.started = true
		mode = store.FairWait
		// Nothing has been granted to w before its entry is queued, so
		// the time before the request is a safe start of validity for any
		// grant.
		l.setBusy(w, time.Now(), 0)
		if f.known {
			ok, err := l.waits.Enqueue(a.opCtx, a.lock, f.entry)
			if err != nil {
				return nil, store.Reply{}, storeErr(a.opCtx, a.key, err)
			}
			if ok {
				return nil, store.Reply{}, nil
			}
		}
	}
	sentAt := time.Now()
	reply, err := l.waits.FairAcquire(a.opCtx, a.lock, w.token, a.cfg.ttl, f.entry, mode)
	if err != nil {
		return nil, store.Reply{}, storeErr(a.opCtx, a.key, err)
	}
	if lease, err := l.fairReplyLease(a, w, reply, sentAt); lease != nil || err != nil {
		return lease, store.Reply{}, err
	}
	f.holderTTL = reply.Pttl
	return nil, store.Reply{HolderTTL: reply.Pttl}, nil
}

// pause waits for a grant, or for the holder's TTL to run out: then try
// polls.
func (f *fairWay) pause(a *acquisition, _ store.Reply, left time.Duration) (*Lease, error) {
	g, granted, _ := f.l.pauseFor(a, pollAfter(f.holderTTL, a.cfg.ttl), left, nil, f.w.grant)
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
func (f *fairWay) done(a *acquisition, lease *Lease, err error) {
	if f.watching {
		f.l.waits.Unwatch(a.lock, true)
	}
	if lease == nil {
		f.l.abandonFair(a.lock, f.w, f.entry, err)
	}
}

// fairGrantLease turns a grant delivered to the fair waiter w into its
// lease. again reports a grant that had expired before w saw it: w waits on
// and should poll at once.
func (l *grantPolicy) fairGrantLease(a *acquisition, w *waiter, g grantInfo) (lease *Lease, again bool, err error) {
	defer l.flights.done() // started by the grant's sender
	if g.early != nil {
		// Handed over by a release in this Locker, before the store
		// confirmed it.
		lease, err = l.newEarlyLease(a, w.token, g.early, true)
		return lease, false, err
	}
	if time.Since(g.validFrom) > a.cfg.ttl/3 {
		// Queued long ago: the grant's start is only known to be after
		// w's last busy attempt. Renew to learn a fresh one.
		sentAt := time.Now()
		res := l.st.Renew(a.opCtx, []store.RenewRequest{{Key: a.lock, Token: w.token, TTL: a.cfg.ttl}})[0]
		if res.Err != nil {
			return nil, false, storeErr(a.opCtx, a.key, res.Err)
		}
		if res.Ownership != owned {
			// The grant expired before it was seen: wait again.
			l.reopen(w)
			return nil, true, nil
		}
		g.validFrom = sentAt
	}
	lease, err = l.newLease(a, w.token, g.fence, g.validFrom, true)
	if lease != nil {
		lease.reserved.Store(g.reserved)
		lease.next.Store(&g.next)
	}
	return lease, false, err
}

// fairReplyLease turns a fair attempt's reply into a lease, or records that
// the lock was still busy when the attempt (sent at sentAt) ran.
func (l *grantPolicy) fairReplyLease(a *acquisition, w *waiter, reply store.FairReply, sentAt time.Time) (*Lease, error) {
	switch {
	case reply.Acquired:
		l.claim(w)
		return l.newLease(a, w.token, reply.Fence, sentAt, true)
	case reply.Granted:
		// Handed over earlier, its message not seen: the lock has pttl
		// left from when the attempt ran, which was after sentAt.
		l.claim(w)
		return l.newLease(a, w.token, reply.Fence, sentAt.Add(reply.Pttl-a.cfg.ttl), true)
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
		g, err := l.waits.Leave(ctx, lock, entry, w.token)
		if err != nil {
			// A failed attempt may yet take the lock or queue the entry:
			// the cleaner leaves and gives back once the store answers.
			l.logger.Debug("lockmw: could not leave the fair queue", slog.String("key", lock.Name), slog.String("store", l.store), slog.Any("error", err))
			l.takeBackAfter(lock, w.token, true, w.ttl, func(ctx context.Context) (bool, error) {
				return l.waits.Leave(ctx, lock, entry, w.token)
			})
			return
		}
		granted = g
	}
	if granted {
		if _, err := l.releaseToken(ctx, lock, w.token); err != nil {
			l.logger.Debug("lockmw: could not pass on a lock granted to a waiter that gave up; retrying",
				slog.String("key", lock.Name), slog.String("store", l.store), slog.Any("error", err), slog.Any("reason", why))
			l.takeBack(lock, w.token, true, w.ttl)
		}
	}
}
