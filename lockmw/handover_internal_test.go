package lockmw

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw/internal/redisstore"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// These tests follow each way a lease becomes live by a hand-over, and
// check the promise: while it is live no other lease of its key is, and its
// fence is above every earlier holder's. Each reproduces a double grant or
// a stranded lock that an earlier version of the hand-over allowed.

type acquired struct {
	lease *Lease
	err   error
}

// acquireAsync runs l.Acquire in the background.
func acquireAsync(l *Locker, key string, opts ...AcquireOption) chan acquired {
	got := make(chan acquired, 1)
	go func() {
		lease, err := l.Acquire(context.Background(), key, append([]AcquireOption{WithWait(20 * time.Second)}, opts...)...)
		got <- acquired{lease, err}
	}()
	return got
}

func takeLease(t *testing.T, c chan acquired, who string) *Lease {
	t.Helper()
	select {
	case a := <-c:
		if a.err != nil {
			t.Fatalf("%s: %v", who, a.err)
		}
		return a.lease
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not get the lock", who)
	}
	return nil
}

// liveAfter reports whether s was still a live lease of its Locker at time
// at: not ended, and its validity deadline later than at. The deadline is
// what the watchdog cancels the context at; checking it, rather than
// whether the context has been cancelled yet, does not depend on how fast
// the watchdog's timer fires on a loaded machine.
func liveAfter(s *Lease, at time.Time) bool {
	k := s.locker.keeper
	k.mu.Lock()
	defer k.mu.Unlock()
	return s.keep.state == stateHeld && s.keep.deadline.After(at)
}

// tryUntil makes TryAcquire attempts on key until one succeeds.
func tryUntil(t *testing.T, l *Locker, key string) *Lease {
	t.Helper()
	var lease *Lease
	waitFor(t, 10*time.Second, "the lock to be free", func() bool {
		s, err := l.TryAcquire(context.Background(), key)
		if err != nil && !errors.Is(err, ErrNotAcquired) {
			t.Fatal(err)
		}
		lease = s
		return s != nil
	})
	return lease
}

// roomWaiters counts l's default-mode and fair waiters for key.
func roomWaiters(l *Locker, key string) (defaults, fair int) {
	v := roomOf(l, key)
	return v.Defaults, v.Fair
}

// queued is the length of key's fair queue list in Redis.
func queued(t *testing.T, admin *redis.Client, key string) int64 {
	t.Helper()
	n, err := admin.LLen(context.Background(), newLockKeys(DefaultPrefix, key).queue).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// earlyChain returns a lease of l on key whose release hands the lock over
// early to the waiter that last(…) queues: for default mode the lease came
// by a transfer that saw nobody else waiting (its successor's fence is
// reserved); for Fair, by a local grant that named the next waiter.
// last is started once the chain is ready and must queue one waiter of l;
// earlyChain waits until it has.
func earlyChain(t *testing.T, l *Locker, admin *redis.Client, key string, fair bool, opts ...AcquireOption) (holder *Lease, next chan acquired) {
	t.Helper()
	ctx := context.Background()
	var mode []AcquireOption
	if fair {
		mode = []AcquireOption{Fair()}
	}
	a, err := l.Acquire(ctx, key, mode...)
	if err != nil {
		t.Fatal(err)
	}
	gotB := acquireAsync(l, key, mode...)
	if fair {
		waitFor(t, 10*time.Second, "b to queue", func() bool { return queued(t, admin, key) == 1 })
		next = acquireAsync(l, key, append(mode, opts...)...)
		waitFor(t, 10*time.Second, "the next waiter to queue", func() bool { return queued(t, admin, key) == 2 })
	} else {
		waitFor(t, 10*time.Second, "b to wait", func() bool { d, _ := roomWaiters(l, key); return d == 1 })
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := takeLease(t, gotB, "b")
	if reservedOf(b) == 0 {
		t.Fatal("b's lease holds no reserved fence: its release would not hand over early")
	}
	if !fair {
		next = acquireAsync(l, key, append(mode, opts...)...)
		waitFor(t, 10*time.Second, "the next waiter to wait, known to be ahead of any fair waiter", func() bool {
			return aheadOfQueue(l, key)
		})
	}
	return b, next
}

// aheadOfQueue reports whether l's only default-mode waiter for key has
// learnt that no fair waiter was queued when it arrived: a release of l may
// then hand it the lock early.
func aheadOfQueue(l *Locker, key string) bool {
	v := roomOf(l, key)
	return v.Defaults == 1 && v.Ahead
}

// TestEarlyHandOverLastsNoLongerThanTheWaitersTTL: the holder's lease has
// the Locker's 10 s TTL, the waiter asks for 100 ms without the watchdog.
// Handed over early, the waiter's lease must end when its own key expires,
// before another Locker takes the lock, not at the holder's deadline.
func TestEarlyHandOverLastsNoLongerThanTheWaitersTTL(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "fair"}[fair], func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			l := newTestLocker(t, srv.Client(t))
			other := newTestLocker(t, srv.Client(t))
			const key = "early-ttl"

			b, gotC := earlyChain(t, l, admin, key, fair, WithLeaseTTL(100*time.Millisecond), WithoutWatchdog())
			if err := b.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			c := takeLease(t, gotC, "c")
			if c.early == nil {
				t.Fatal("c was not handed the lock early")
			}
			<-c.early.Settled() // the transfer has landed: the key holds c's token, for 100 ms
			o := tryUntil(t, other, key)
			if liveAfter(c, time.Now()) {
				t.Fatalf("another Locker holds the lock (fence %d) while c's lease (fence %d, TTL 100ms) is live", o.Fence(), c.Fence())
			}
			if o.Fence() <= c.Fence() {
				t.Fatalf("fence %d after fence %d", o.Fence(), c.Fence())
			}
		})
	}
}

// TestEarlyHandOverEndsWhenItsLinkIsCut: the waiter's lease (300 ms TTL,
// watchdog on) came early from a holder with a 10 s TTL; the Locker's link
// to Redis is then cut. Its lease must end before another Locker gets the
// lock, though the holder's deadline was seconds away.
func TestEarlyHandOverEndsWhenItsLinkIsCut(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "fair"}[fair], func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			proxy := redistest.StartProxy(t, srv.Addr())
			l := newTestLocker(t, redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: -1}))
			other := newTestLocker(t, srv.Client(t))
			const key = "early-cut"

			b, gotC := earlyChain(t, l, admin, key, fair, WithLeaseTTL(300*time.Millisecond))
			if err := b.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			c := takeLease(t, gotC, "c")
			if c.early == nil {
				t.Fatal("c was not handed the lock early")
			}
			<-c.early.Settled() // confirmed: the key holds c's token
			if c.early.(interface{ Refused() bool }).Refused() {
				t.Fatal("the hand-over to c failed")
			}
			proxy.Cut(t)
			o := tryUntil(t, other, key)
			if liveAfter(c, time.Now()) {
				t.Fatalf("another Locker holds the lock (fence %d) while c's lease (fence %d), cut off from Redis, is live", o.Fence(), c.Fence())
			}
		})
	}
}

// TestStaleFairGrantIsIgnored delivers a grant message that comes late: it
// was made (fence 2) before the waiter's attempt that found the lock held
// by X (fence 41), so it had ended by then. The waiter must not take it
// for the lock, and must get the lock, with a higher fence, after X.
func TestStaleFairGrantIsIgnored(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const key = "stale-grant"
	keys := newLockKeys(DefaultPrefix, key)
	lx := newTestLocker(t, srv.Client(t))
	lw := newTestLocker(t, srv.Client(t))

	if err := admin.Set(ctx, keys.fence, 40, 0).Err(); err != nil {
		t.Fatal(err)
	}
	x, err := lx.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	gotW := acquireAsync(lw, key, Fair(), WithLeaseTTL(3*time.Second))
	waitFor(t, 10*time.Second, "w to queue", func() bool { return queued(t, admin, key) == 1 })
	entry, err := admin.LIndex(ctx, keys.queue, 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(entry) // "<locker id> <token> <ttl ms>"
	if len(f) != 3 {
		t.Fatalf("queue entry %q", entry)
	}
	n, err := admin.Publish(ctx, keys.grants+f[0], f[1]+" 2 3 ").Result()
	if err != nil || n != 1 {
		t.Fatalf("publishing the late grant reached %d subscribers: %v", n, err)
	}
	select {
	case a := <-gotW:
		t.Fatalf("w acquired (fence %v, err %v) from a stale grant while x (fence %d) holds the lock", fenceOf(a.lease), a.err, x.Fence())
	case <-time.After(300 * time.Millisecond): // time for the message to be handled
	}
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := takeLease(t, gotW, "w")
	if w.Fence() <= x.Fence() {
		t.Fatalf("w's fence %d is not above x's %d", w.Fence(), x.Fence())
	}
}

func fenceOf(s *Lease) any {
	if s == nil {
		return nil
	}
	return s.Fence()
}

// TestEarlyHandOverKeepsQueuedWaitersPlaces: a fair waiter of another
// Locker queues behind a holder whose Locker has a default-mode waiter
// that gets the lock early. The transfer still gives the lock to the
// default waiter, which has started (its lease is not cut short), and the
// fair waiter keeps its place: it is served when the default waiter
// releases, with a higher fence, and not before.
func TestEarlyHandOverKeepsQueuedWaitersPlaces(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	l := newTestLocker(t, srv.Client(t))
	lf := newTestLocker(t, srv.Client(t))
	const key = "queued-keep-places"

	b, gotC := earlyChain(t, l, admin, key, false)
	gotF := acquireAsync(lf, key, Fair())
	waitFor(t, 10*time.Second, "the fair waiter to queue", func() bool { return queued(t, admin, key) == 1 })
	if err := b.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	var c *Lease
	select {
	case a := <-gotC:
		if a.err != nil {
			t.Fatal(a.err)
		}
		c = a.lease
	case <-time.After(5 * time.Second):
		t.Fatal("the default waiter did not get the lock early on release")
	}
	if c.Fence() <= b.Fence() {
		t.Fatalf("default waiter's fence %d is not above b's %d", c.Fence(), b.Fence())
	}
	// Its transfer is confirmed: the key holds its token, its lease lives.
	waitFor(t, 5*time.Second, "the key to hold the early waiter's token", func() bool {
		v, err := admin.Get(context.Background(), newLockKeys(DefaultPrefix, key).lock).Result()
		return err == nil && strings.HasPrefix(v, c.token+"+")
	})
	select {
	case a := <-gotF:
		t.Fatalf("the fair waiter got the lock (%v) while the default waiter holds it", a.err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := c.Context().Err(); err != nil {
		t.Fatalf("the early lease ended: %v", context.Cause(c.Context()))
	}
	if err := c.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-gotF:
		if a.err != nil {
			t.Fatal(a.err)
		}
		if a.lease.Fence() <= c.Fence() {
			t.Fatalf("fair waiter's fence %d is not above %d", a.lease.Fence(), c.Fence())
		}
		if err := a.lease.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the fair waiter did not get the lock when the default waiter released it")
	}
}

// TestEarlyReleaseWaitsForItsHandOver: the waiter handed a lock early
// releases it at once, while the transfer that gives it the lock has not
// been sent yet. Its release must follow the transfer: it succeeds, and
// leaves the lock free, not held by its token for a TTL.
func TestEarlyReleaseWaitsForItsHandOver(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "fair"}[fair], func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			l := newTestLocker(t, srv.Client(t))
			other := newTestLocker(t, srv.Client(t))
			key := "early-release-" + fmt.Sprint(fair)

			b, gotC := earlyChain(t, l, admin, key, fair)
			released := make(chan error, 1)
			redisstore.SetHandedEarly(func() {
				// The waiter has its lease: let it release before the
				// transfer is sent.
				time.Sleep(100 * time.Millisecond)
			})
			t.Cleanup(func() { redisstore.SetHandedEarly(nil) })
			go func() {
				c := takeLease(t, gotC, "c")
				released <- c.Release(context.Background())
			}()
			if err := b.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			redisstore.SetHandedEarly(nil)
			if err := <-released; err != nil {
				t.Fatalf("c.Release = %v, want nil", err)
			}
			lease, err := other.TryAcquire(context.Background(), key)
			if err != nil {
				t.Fatalf("after c released, TryAcquire = %v: the lock was left held", err)
			}
			_ = lease.Release(context.Background())
		})
	}
}

// TestCloseDuringHandOversLeavesNoLock closes a Locker whose goroutines
// hand one key around: once Close has returned and its goroutines have
// stopped, the key is free, and no Release reported a loss.
func TestCloseDuringHandOversLeavesNoLock(t *testing.T) {
	srv := redistest.Start(t)
	other := newTestLocker(t, srv.Client(t))
	for round := range 10 {
		l, err := New(srv.Client(t), WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("close-%d", round)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var opts []AcquireOption
				if g%2 == 1 && round%2 == 1 {
					opts = append(opts, Fair())
				}
				for {
					s, err := l.Acquire(context.Background(), key, opts...)
					if err != nil {
						if !errors.Is(err, ErrClosed) {
							errs <- err
						}
						return
					}
					// A default-mode lease handed over early ends (ErrLost)
					// when a fair waiter queued first; a release never fails
					// on a lease that was live.
					lostFirst := s.Context().Err() != nil && errors.Is(context.Cause(s.Context()), ErrLost)
					if err := s.Release(context.Background()); err != nil && !errors.Is(err, ErrClosed) && !(lostFirst && errors.Is(err, ErrLost)) {
						errs <- fmt.Errorf("release: %w", err)
					}
				}
			}()
		}
		time.Sleep(time.Duration(20+10*round) * time.Millisecond)
		if err := l.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		lease, err := other.TryAcquire(context.Background(), key)
		if err != nil {
			v, _ := srv.Client(t).Get(context.Background(), newLockKeys(DefaultPrefix, key).lock).Result()
			pttl, _ := srv.Client(t).PTTL(context.Background(), newLockKeys(DefaultPrefix, key).lock).Result()
			t.Fatalf("round %d: right after Close, TryAcquire = %v: a lock of the closed Locker was left (%q, %v)", round, err, v, pttl)
		}
		_ = lease.Release(context.Background())
		wg.Wait()
		// Every flight started (a lock handed to a waiter, a release, a
		// waiter that may be queued) was done: one counted on forever would
		// make every Close wait out the TTL.
		waitFor(t, 10*time.Second, fmt.Sprintf("round %d: the closed Locker's flights to end", round), func() bool {
			l.flights.mu.Lock()
			defer l.flights.mu.Unlock()
			return l.flights.n == 0
		})
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
	}
}

// roomOf returns what l's policy (New's or NewRedlock's store's) knows of
// key's waiters in l.
func roomOf(l *Locker, key string) redisstore.RoomView {
	p := l.policy.(ownPolicy).p.(interface {
		Room(store.Key) redisstore.RoomView
	})
	return p.Room(newLockRef(l.cfg.prefix, key).Key)
}

// reservedOf is the fence s's release may hand to a waiter of its Locker
// early, or 0.
func reservedOf(s *Lease) uint64 {
	if st, ok := s.state.(interface{ Reserved() uint64 }); ok {
		return st.Reserved()
	}
	return 0
}
