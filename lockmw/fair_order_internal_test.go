package lockmw

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
)

// These tests check Fair's promise: a Fair waiter is never overtaken by a
// waiter that arrived after it, whatever that waiter's mode or Locker, and
// in particular not by a waiter of the holder's own Locker that a release
// could hand the lock to in-process (early, before Redis confirms it).

// fairOrderStores runs check on one Redis server and on a Cluster.
func fairOrderStores(t *testing.T, check func(t *testing.T, admin redis.UniversalClient, newClient func() redis.UniversalClient)) {
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		check(t, srv.Client(t), func() redis.UniversalClient { return srv.Client(t) })
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		check(t, c.Client(t), func() redis.UniversalClient { return c.Client(t) })
	})
}

// queueLen is the length of key's fair queue list in Redis.
func queueLen(t *testing.T, admin redis.UniversalClient, key string) int64 {
	t.Helper()
	n, err := admin.LLen(context.Background(), newLockKeys(DefaultPrefix, key).queue).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// releaseSubscribers counts the subscribers of key's release channel.
func releaseSubscribers(t *testing.T, admin redis.UniversalClient, key string) int64 {
	t.Helper()
	ctx := context.Background()
	ch := newLockKeys(DefaultPrefix, key).notify
	var n map[string]int64
	var err error
	if _, cluster := admin.(*redis.ClusterClient); cluster {
		n, err = admin.PubSubShardNumSub(ctx, ch).Result()
	} else {
		n, err = admin.PubSubNumSub(ctx, ch).Result()
	}
	if err != nil {
		t.Fatal(err)
	}
	return n[ch]
}

// heldByTransfer returns a lease of l on key that came by a transfer from
// an earlier lease of l to a waiting default-mode Acquire, and holds a
// reserved fence: its release may hand the lock to l's next default-mode
// waiter early.
func heldByTransfer(t *testing.T, l *Locker, key string) *Lease {
	t.Helper()
	a, err := l.Acquire(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	gotB := acquireAsync(l, key)
	waitFor(t, 10*time.Second, "b to wait", func() bool { d, _ := roomWaiters(l, key); return d == 1 })
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := takeLease(t, gotB, "b")
	if reservedOf(b) == 0 {
		t.Fatal("b's lease holds no reserved fence: its release would not hand over early")
	}
	return b
}

// TestFairWaiterIsNotOvertakenByALaterLocalWaiter is the case of issue 23:
// Locker L1 holds the key by a transfer to a waiting default-mode Acquire
// of L1; then a Fair Acquire of L2 queues; then a default-mode Acquire of
// L1 arrives; L1 releases. L2's Fair waiter must get the lock first, and
// L1's later waiter only once L2 released it, with a higher fence.
func TestFairWaiterIsNotOvertakenByALaterLocalWaiter(t *testing.T) {
	fairOrderStores(t, func(t *testing.T, admin redis.UniversalClient, newClient func() redis.UniversalClient) {
		ctx := context.Background()
		const key = "fair-not-overtaken"
		l1 := newTestLocker(t, newClient())
		l2 := newTestLocker(t, newClient())

		b := heldByTransfer(t, l1, key)
		gotF := acquireAsync(l2, key, Fair())
		waitFor(t, 10*time.Second, "L2's fair waiter to queue in Redis", func() bool { return queueLen(t, admin, key) == 1 })
		gotC := acquireAsync(l1, key)
		waitFor(t, 10*time.Second, "L1's later waiter to wait in its room", func() bool {
			d, _ := roomWaiters(l1, key)
			return d == 1 && releaseSubscribers(t, admin, key) == 1
		})
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}

		var f *Lease
		select {
		case a := <-gotC:
			if a.err != nil {
				t.Fatal(a.err)
			}
			t.Fatalf("L1's default waiter, which arrived after L2's Fair waiter, got the lock first (fence %d, b's %d)", a.lease.Fence(), b.Fence())
		case a := <-gotF:
			if a.err != nil {
				t.Fatal(a.err)
			}
			f = a.lease
		case <-time.After(10 * time.Second):
			t.Fatal("nobody got the lock after b's release")
		}
		if f.Fence() <= b.Fence() {
			t.Fatalf("the fair waiter's fence %d is not above b's %d", f.Fence(), b.Fence())
		}
		select {
		case a := <-gotC:
			t.Fatalf("L1's later waiter got the lock (%v) while L2's fair waiter holds it", a.err)
		case <-time.After(50 * time.Millisecond):
		}
		if err := f.Release(ctx); err != nil {
			t.Fatal(err)
		}
		c := takeLease(t, gotC, "L1's later waiter")
		if c.Fence() <= f.Fence() {
			t.Fatalf("L1's later waiter's fence %d is not above the fair waiter's %d", c.Fence(), f.Fence())
		}
		if err := c.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestFairWaiterIsServedAfterTheLockExpired: the holder's key expires
// (here: is deleted) while a Fair waiter of L2 is queued, and a plain
// TryAcquire of L3 comes before the waiter's next poll: the attempt finds
// the lock free with a waiter queued, and hands it to that waiter instead
// of taking it (it used to take it, overtaking the queue). L2's waiter
// gets the lock, and a later default waiter of L3 gets it after it.
func TestFairWaiterIsServedAfterTheLockExpired(t *testing.T) {
	fairOrderStores(t, func(t *testing.T, admin redis.UniversalClient, newClient func() redis.UniversalClient) {
		ctx := context.Background()
		const key = "fair-after-expiry"
		l1 := newTestLocker(t, newClient())
		l2 := newTestLocker(t, newClient())
		l3 := newTestLocker(t, newClient())
		keys := newLockKeys(DefaultPrefix, key)

		// A holder with a minute left: the fair waiter polls only then.
		if _, err := l1.Acquire(ctx, key, WithLeaseTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
		gotF := acquireAsync(l2, key, Fair())
		waitFor(t, 10*time.Second, "L2's fair waiter to queue in Redis", func() bool { return queueLen(t, admin, key) == 1 })
		if err := admin.Del(ctx, keys.lock).Err(); err != nil {
			t.Fatal(err)
		}
		if x, err := l3.TryAcquire(ctx, key); err == nil {
			t.Fatalf("L3's TryAcquire took the lock (fence %d) that had expired with L2's Fair waiter queued", x.Fence())
		} else if !errors.Is(err, ErrNotAcquired) {
			t.Fatal(err)
		}
		f := takeLease(t, gotF, "L2's fair waiter")
		gotD := acquireAsync(l3, key)
		waitFor(t, 10*time.Second, "L3's later waiter to wait (lined up in Redis: another Locker holds the lock)", func() bool {
			return queueLen(t, admin, key) == 1
		})
		select {
		case a := <-gotD:
			t.Fatalf("L3's later waiter got the lock (%v) while L2's fair waiter holds it", a.err)
		case <-time.After(50 * time.Millisecond):
		}
		if err := f.Release(ctx); err != nil {
			t.Fatal(err)
		}
		d := takeLease(t, gotD, "L3's later waiter")
		if d.Fence() <= f.Fence() {
			t.Fatalf("L3's later waiter's fence %d is not above the fair waiter's %d", d.Fence(), f.Fence())
		}
		if err := d.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPlainAttemptSkipsDeadQueueEntries: a free lock whose queue holds only
// entries of Lockers that no longer listen (their processes died) is taken
// by a plain attempt at once, and the dead entries go.
func TestPlainAttemptSkipsDeadQueueEntries(t *testing.T) {
	fairOrderStores(t, func(t *testing.T, admin redis.UniversalClient, newClient func() redis.UniversalClient) {
		ctx := context.Background()
		const key = "dead-queue"
		l := newTestLocker(t, newClient())
		keys := newLockKeys(DefaultPrefix, key)
		if err := admin.RPush(ctx, keys.queue, "deadlocker00000 "+newToken()+" 1000", "deadlocker00001 "+newToken()+" 1000").Err(); err != nil {
			t.Fatal(err)
		}
		x, err := l.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("TryAcquire with only dead waiters queued: %v", err)
		}
		if n := queueLen(t, admin, key); n != 0 {
			t.Fatalf("queue holds %d dead entries after the attempt", n)
		}
		if err := x.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := admin.Exists(ctx, keys.lock).Result(); err != nil || n != 0 {
			t.Fatalf("lock key still there after the release (%d, %v)", n, err)
		}
	})
}

// TestEarlyHandOverToAWaiterThatWasWaitingFirst: keeping Fair order must
// not cost the early hand-over where nobody is queued. c queues behind b in
// L1's room without an attempt of its own; it was waiting before the
// transfer that gave b the lock found no fair waiter, so b's release hands
// it the lock early.
func TestEarlyHandOverToAWaiterThatWasWaitingFirst(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	const key = "early-waiting-first"
	l := newTestLocker(t, srv.Client(t))

	a, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	gotB := acquireAsync(l, key)
	waitFor(t, 10*time.Second, "b to wait", func() bool { d, _ := roomWaiters(l, key); return d == 1 })
	gotC := acquireAsync(l, key)
	waitFor(t, 10*time.Second, "c to wait behind b", func() bool { d, _ := roomWaiters(l, key); return d == 2 })
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := takeLease(t, gotB, "b")
	if reservedOf(b) == 0 {
		t.Fatal("b's lease holds no reserved fence")
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c := takeLease(t, gotC, "c")
	if c.early == nil {
		t.Fatal("c was not handed the lock early")
	}
	if c.Fence() <= b.Fence() {
		t.Fatalf("c's fence %d is not above b's %d", c.Fence(), b.Fence())
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
