package lockmw_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// redlockQueueLen waits until the wait queue of key on the first master
// holds n entries.
func redlockQueueLen(t *testing.T, first *redistest.Server, key string, n int64) {
	t.Helper()
	c := first.Client(t)
	eventually(t, 10*time.Second, func() error {
		got, err := c.LLen(context.Background(), queueKey(key)).Result()
		if err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("wait queue holds %d waiters, want %d", got, n)
		}
		return nil
	})
}

// setCalls sums the SET calls the masters have served: one per master an
// attempt asks.
func setCalls(t *testing.T, masters []*redistest.Server) int64 {
	t.Helper()
	var n int64
	for _, m := range masters {
		n += commandCalls(t, m, "set")
	}
	return n
}

// TestRedlockWakesOneWaiterAtATime queues waiters of eight Redlock Lockers
// behind a holder, on five masters, and checks that each release wakes
// one of them, the next in arrival order (unless the woken waiter's attempt
// lost to the release still on its way), whose attempt is the only one
// made: no waiter polls and no release starts a herd.
func TestRedlockWakesOneWaiterAtATime(t *testing.T) {
	masters := redistest.StartN(t, 5)
	ctx := context.Background()
	const key, waiters = "redlock:order", 8
	// A long TTL keeps the waiters' fallback timers out of the way.
	holder := newRedlock(t, masters, lockmw.WithTTL(time.Minute))
	first, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan handOver, waiters)
	for i := range waiters {
		l := newRedlock(t, masters, lockmw.WithTTL(time.Minute))
		go func() {
			lease, err := l.Acquire(ctx, key)
			got <- handOver{i, lease, err}
		}()
		redlockQueueLen(t, masters[0], key, int64(i+1))
	}

	release := assertHandOversInOrder(t, first, got, waiters, func(i int) func() bool {
		sets := setCalls(t, masters)
		return func() bool {
			// The woken waiter's attempt, on a quorum (all five masters if
			// the first three were slow to answer), and a second or third
			// one if the wake overtook the release on other masters (a
			// loaded machine). A herd would show here as 3 SETs or more for
			// each of the other waiters (21 at the first hand-over).
			n := setCalls(t, masters) - sets
			if n < 3 || n > 15 {
				t.Fatalf("hand-over %d: %d SET calls, want 3 to 15 (the woken waiters' attempts only)", i, n)
			}
			// A woken waiter whose attempt lost to the release still on its
			// way queues again, and its rollback wakes the next waiter, who
			// takes the lock (wait_wake.go): two attempts, 6 SETs or more.
			return n >= 6
		}
	})
	if err := release.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, m := range masters {
		eventually(t, 5*time.Second, func() error {
			if keys := liveLockKeys(t, m); len(keys) > 0 {
				return fmt.Errorf("master %d keeps %v", i, keys)
			}
			return nil
		})
	}
}

// TestRedlockLostWakeCostsLatency drops the wait queue behind a queued
// waiter's back (as a restarted first master would): the release wakes
// nobody, and the waiter still gets the lock, when the holder's TTL would
// have run out.
func TestRedlockLostWakeCostsLatency(t *testing.T) {
	masters := redistest.StartN(t, 3)
	ctx := context.Background()
	const key, ttl = "redlock:lost-wake", time.Second
	holder := newRedlock(t, masters, lockmw.WithTTL(ttl))
	waiter := newRedlock(t, masters, lockmw.WithTTL(ttl))
	held, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lease, err := waiter.Acquire(ctx, key)
		if err == nil {
			err = lease.Release(ctx)
		}
		got <- err
	}()
	redlockQueueLen(t, masters[0], key, 1)
	if err := masters[0].Client(t).Del(ctx, queueKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * ttl):
		t.Fatalf("the waiter did not get the lock within %v of a release that woke nobody", 10*ttl)
	}
}

// TestRedlockWaiterGivingUpLeavesTheQueue: a queued waiter that gives up
// takes its entry out of the wait queue, and the next release wakes the
// waiter behind it.
func TestRedlockWaiterGivingUpLeavesTheQueue(t *testing.T) {
	masters := redistest.StartN(t, 3)
	ctx := context.Background()
	const key = "redlock:give-up"
	holder := newRedlock(t, masters, lockmw.WithTTL(time.Minute))
	held, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	quitter, patient := newRedlock(t, masters), newRedlock(t, masters)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := quitter.Acquire(ctx, key, lockmw.WithWait(300*time.Millisecond))
		gaveUp <- err
	}()
	redlockQueueLen(t, masters[0], key, 1)
	got := make(chan *lockmw.Lease, 1)
	go func() {
		lease, err := patient.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	redlockQueueLen(t, masters[0], key, 2)
	if err := <-gaveUp; !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("quitter: %v, want ErrNotAcquired", err)
	}
	redlockQueueLen(t, masters[0], key, 1)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case lease := <-got:
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the release did not wake the waiter behind the one that gave up")
	}
}

// TestRedlockLeaseSpreadsAtFirstRenewal: an acquisition takes a quorum of
// masters; its first renewal takes the others that are free, so that a held
// lease survives the loss of as many masters as Redlock tolerates.
func TestRedlockLeaseSpreadsAtFirstRenewal(t *testing.T) {
	masters := redistest.StartN(t, 5)
	ctx := context.Background()
	const ttl = 2 * time.Second // room for late renewals on a loaded machine
	l, rival := newRedlock(t, masters), newRedlock(t, masters)
	lease, err := l.Acquire(ctx, "spread", lockmw.WithLeaseTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range masters {
		eventually(t, 5*time.Second, func() error {
			if len(liveLockKeys(t, m)) != 1 {
				return fmt.Errorf("master %d does not hold the lease", i)
			}
			return nil
		})
	}
	// Two masters lost: the lease is still held on three, and renewed.
	masters[0].Kill(t)
	masters[1].Kill(t)
	// Renewals reach the three left (a condition, not a span of time).
	for i, m := range masters[2:] {
		if !waitRenewedOn(t, m.Client(t), lease, 30*time.Second) {
			t.Fatalf("lease ended before master %d saw a renewal: %v", i+2, context.Cause(lease.Context()))
		}
	}
	if err := lease.Context().Err(); err != nil {
		t.Fatalf("lease ended with 3 of 5 masters holding it: %v", context.Cause(lease.Context()))
	}
	if _, err := rival.TryAcquire(ctx, "spread"); !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("rival: %v, want ErrNotAcquired", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release with 3 of 5 masters up: %v", err)
	}
	for i, m := range masters[2:] {
		if keys := liveLockKeys(t, m); len(keys) > 0 {
			t.Errorf("master %d keeps %v after Release", i+2, keys)
		}
	}
}

// TestRedlockWaiterNotQueuedWhereFirstMasterGranted: a waiter's attempt
// that the other masters settle (another owner holds a quorum of them)
// before the first master answers, and that the first master then grants,
// was not queued there: nothing will wake it (the holder's release does
// not reach the first master, and a rollback wakes nobody), so the waiter
// must try again shortly, not sleep until its timer, a TTL, with the lock
// free on the first master. Here the first master answers late (a proxy
// delays it) and masters 1 to 4 are another owner's; the test counts the
// waiter's attempts on the first master (its fence counter), then frees
// the others and expects the waiter to take the lock, both well within the
// long TTL that a waiter wrongly counting itself queued would sleep.
func TestRedlockWaiterNotQueuedWhereFirstMasterGranted(t *testing.T) {
	masters := redistest.StartN(t, 5)
	ctx := context.Background()
	const key, ttl = "redlock:late-first", 30 * time.Second
	for _, m := range masters[1:] {
		occupy(t, m, key, ttl)
	}
	p := redistest.StartProxy(t, masters[0].Addr())
	clients := redlockClients(t, masters, fastFailing, dialOnce)
	clients[0] = masters[0].Client(t, fastFailing, dialOnce, func(o *redis.Options) { o.Addr = p.Addr() })
	l, err := lockmw.NewRedlock(clients, lockmw.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p.AddLatency(t, 50*time.Millisecond)

	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		lease, err := l.Acquire(waitCtx, key)
		if err == nil {
			err = lease.Release(ctx)
		}
		got <- err
	}()
	first := masters[0].Client(t)
	eventually(t, ttl/3, func() error {
		n, err := first.Get(ctx, lockKey(key)+":fence").Int64()
		if errors.Is(err, redis.Nil) {
			n, err = 0, nil
		}
		if err != nil {
			return err
		}
		if n < 3 {
			return fmt.Errorf("the first master saw %d attempts, want 3: the waiter, whose attempt the first master granted after the others had settled it, sleeps as if queued there", n)
		}
		return nil
	})
	if q, err := first.LLen(ctx, queueKey(key)).Result(); err != nil || q != 0 {
		t.Fatalf("wait queue holds %d entries (%v), want none: the lock is free on the first master", q, err)
	}
	for _, m := range masters[1:] {
		vacate(t, m, key)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
	case <-time.After(ttl / 3):
		t.Fatalf("the waiter has not taken the lock %v after it was freed (TTL %v): it sleeps as if queued", ttl/3, ttl)
	}
}
