package lockmw_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// 32 goroutines, each with its own Locker and client, increment a counter
// with a non-atomic read-modify-write inside the lock: it must end exact,
// and no two of them may ever be inside at once.
func TestMutualExclusionAcrossLockers(t *testing.T) {
	srv := redistest.Start(t)
	assertMutualExclusion(t, 32, 20, func() *lockmw.Locker { return newLocker(t, srv) })
}

// A holder process dies (SIGKILL: its watchdog dies with it). Its lock stays
// taken until its TTL runs out, then another Locker gets it.
func TestCrashedHolderLockFreesAfterTTL(t *testing.T) {
	srv := redistest.Start(t)
	cmd, holderFence := startHolderProcess(t, srv, "crash", 2*time.Second)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	l := newLocker(t, srv)
	_, err := l.TryAcquire(context.Background(), "crash")
	if !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("right after the crash TryAcquire = %v, want ErrNotAcquired", err)
	}
	if d, ok := lockmw.RetryAfter(err); !ok || d > 2*time.Second {
		t.Errorf("RetryAfter = %v, %v; want the holder's remaining TTL (<= 2s)", d, ok)
	}
	lease, err := l.Acquire(context.Background(), "crash", lockmw.WithWait(15*time.Second))
	if err != nil {
		t.Fatalf("the crashed holder's lock never freed: %v", err)
	}
	if lease.Fence() <= holderFence {
		t.Errorf("fence %d after the crashed holder's %d; want it larger", lease.Fence(), holderFence)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The watchdog keeps a lock for five times its TTL; a competitor never gets
// it meanwhile.
func TestWatchdogKeepsLockPastTTL(t *testing.T) {
	srv := redistest.Start(t)
	holder, rival := newLocker(t, srv), newLocker(t, srv)
	const ttl = 200 * time.Millisecond
	lease, err := holder.Acquire(context.Background(), "long-job", lockmw.WithLeaseTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(5 * ttl)
	for time.Now().Before(end) {
		mustBusy(t, rival, "long-job")
		if err := context.Cause(lease.Context()); err != nil {
			t.Fatalf("lease context ended while kept alive: %v", err)
		}
		time.Sleep(ttl / 10) // pace the probes; the assertion is about the lock, not timing
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatalf("Release after 5 TTLs: %v", err)
	}
	lease2, err := rival.TryAcquire(context.Background(), "long-job")
	if err != nil {
		t.Fatalf("after Release the rival could not acquire: %v", err)
	}
	_ = lease2.Release(context.Background())
}

// A Redis that stops answering (SIGSTOP) cannot confirm renewals: the
// holder's context is cancelled at its validity deadline, before its key can
// expire on the Redis side.
func TestPausedRedisCancelsHolderBeforeExpiry(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = time.Second
	l := newLocker(t, srv, lockmw.WithTTL(ttl), lockmw.WithDriftFactor(0.1))
	lease, err := l.Acquire(context.Background(), "paused")
	if err != nil {
		t.Fatal(err)
	}
	probe := srv.Client(t)
	ctx := context.Background()

	// Pause right after a renewal moved the expiry, so the expiry seen last
	// is the one Redis keeps while paused.
	first, err := probe.PExpireTime(ctx, lockKey("paused")).Result()
	if err != nil {
		t.Fatal(err)
	}
	var expiry time.Duration
	deadline := time.Now().Add(5 * ttl)
	for {
		expiry, err = probe.PExpireTime(ctx, lockKey("paused")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if expiry != first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watchdog never renewed the lock")
		}
		time.Sleep(time.Millisecond)
	}
	srv.Pause(t)
	paused := true
	defer func() {
		if paused {
			srv.Resume(t)
		}
	}()

	waitDone(t, lease.Context(), 5*ttl, "lease on a paused Redis")
	cancelledAt := time.Now()
	if r := lostReason(t, lease.Context()); r != lockmw.LostDeadline {
		t.Errorf("lost reason = %q, want %q", r, lockmw.LostDeadline)
	}
	expiresAt := time.UnixMilli(expiry.Milliseconds())
	if !cancelledAt.Before(expiresAt) {
		t.Errorf("context cancelled at %v, not before the key's expiry %v", cancelledAt.Format(time.StampMilli), expiresAt.Format(time.StampMilli))
	}
	srv.Resume(t)
	paused = false
	if err := lease.Release(context.Background()); !errors.Is(err, lockmw.ErrLost) {
		t.Errorf("Release after the loss = %v, want ErrLost", err)
	}
}

// A key deleted or overwritten behind the holder's back cancels its context
// with ErrLost; the old holder's Release leaves the new owner's lock alone.
func TestLockChangedBehindHoldersBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(ctx context.Context, c *redis.Client, key string) error
		reason lockmw.LostReason
	}{
		{"deleted", func(ctx context.Context, c *redis.Client, key string) error {
			return c.Del(ctx, key).Err()
		}, lockmw.LostExpired},
		{"overwritten", func(ctx context.Context, c *redis.Client, key string) error {
			return c.Set(ctx, key, "someone-else", time.Minute).Err()
		}, lockmw.LostTaken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			holder, other := newLocker(t, srv), newLocker(t, srv)
			ctx := context.Background()
			const ttl = 300 * time.Millisecond
			lease, err := holder.Acquire(ctx, "k", lockmw.WithLeaseTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			probe := srv.Client(t)
			if err := tc.change(ctx, probe, lockKey("k")); err != nil {
				t.Fatal(err)
			}
			waitDone(t, lease.Context(), 5*ttl, "lease whose key changed")
			if r := lostReason(t, lease.Context()); r != tc.reason {
				t.Errorf("lost reason = %q, want %q", r, tc.reason)
			}

			// Whoever owns the key now keeps it after the old holder's Release.
			var newOwner *lockmw.Lease
			if tc.name == "deleted" {
				if newOwner, err = other.TryAcquire(ctx, "k"); err != nil {
					t.Fatalf("the freed lock could not be taken: %v", err)
				}
			}
			before, err := probe.Get(ctx, lockKey("k")).Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
				t.Errorf("old holder's Release = %v, want ErrLost", err)
			}
			after, err := probe.Get(ctx, lockKey("k")).Result()
			if err != nil || after != before {
				t.Errorf("the new owner's lock changed under the old holder's Release: %q -> %q (%v)", before, after, err)
			}
			if newOwner != nil {
				if err := newOwner.Release(ctx); err != nil {
					t.Errorf("new owner's Release = %v", err)
				}
			}
		})
	}
}

// Fences strictly increase across successive holders, from any Locker, also
// when a holder's lock expired instead of being released.
func TestFenceIncreasesAcrossHolders(t *testing.T) {
	srv := redistest.Start(t)
	lockers := []*lockmw.Locker{newLocker(t, srv), newLocker(t, srv), newLocker(t, srv)}
	ctx := context.Background()
	// A first holding with the default TTL: the key's first acquisition
	// also seeds its counter (one more round trip), on fresh connections.
	first, err := lockers[0].Acquire(ctx, "fenced")
	if err != nil {
		t.Fatal(err)
	}
	_ = first.Release(ctx)
	last := first.Fence()
	for i := range 12 {
		l := lockers[i%len(lockers)]
		lease, err := l.Acquire(ctx, "fenced", lockmw.WithWait(5*time.Second), lockmw.WithLeaseTTL(50*time.Millisecond), lockmw.WithoutWatchdog())
		if err != nil {
			t.Fatal(err)
		}
		if lease.Fence() <= last {
			t.Fatalf("holder %d got fence %d after %d", i, lease.Fence(), last)
		}
		last = lease.Fence()
		if i%2 == 0 {
			_ = lease.Release(ctx)
		} // odd holders let their lock expire
	}
	// Counters are per key: another key's counter starts on its own (from
	// the server clock; with WithPermanentFences, as here, from 1).
	permanent := newLocker(t, srv, lockmw.WithPermanentFences())
	other, err := permanent.TryAcquire(ctx, "other-key")
	if err != nil {
		t.Fatal(err)
	}
	if other.Fence() != 1 {
		t.Errorf("a different key's first fence = %d, want 1: counters are per key", other.Fence())
	}
}

// Acquiring the same key through a lease's context nests instead of
// deadlocking; the lock is released only with the outermost lease.
func TestNestedLeasesReleaseWithOutermost(t *testing.T) {
	srv := redistest.Start(t)
	l, rival := newLocker(t, srv), newLocker(t, srv)
	ctx := context.Background()
	outer, err := l.Acquire(ctx, "order:42")
	if err != nil {
		t.Fatal(err)
	}
	// A context derived from the lease context, as a handler would pass on.
	derived, cancel := context.WithTimeout(outer.Context(), time.Minute)
	defer cancel()
	inner, err := l.Acquire(derived, "order:42", lockmw.WithWait(0))
	if err != nil {
		t.Fatalf("nested Acquire: %v", err)
	}
	innermost, err := l.TryAcquire(inner.Context(), "order:42")
	if err != nil {
		t.Fatalf("doubly nested TryAcquire: %v", err)
	}
	if inner.Fence() != outer.Fence() || innermost.Fence() != outer.Fence() {
		t.Errorf("nested fences %d, %d differ from the outer %d", inner.Fence(), innermost.Fence(), outer.Fence())
	}
	// Another key under the same context is a separate lock.
	sibling, err := l.TryAcquire(inner.Context(), "order:43")
	if err != nil {
		t.Fatalf("other key under a lease context: %v", err)
	}
	if err := sibling.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Another Locker does not nest: the lock is busy for it.
	if _, err := rival.TryAcquire(inner.Context(), "order:42"); !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("rival Locker under the lease context = %v, want ErrNotAcquired", err)
	}

	if err := innermost.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if inner.Context().Err() == nil {
		t.Error("nested lease context still live after its Release")
	}
	if outer.Context().Err() != nil {
		t.Error("outer lease context ended with a nested Release")
	}
	mustBusy(t, rival, "order:42")

	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := rival.TryAcquire(ctx, "order:42")
	if err != nil {
		t.Fatalf("after the outermost Release the rival could not acquire: %v", err)
	}
	_ = lease.Release(ctx)
	// A released lease's context no longer nests.
	if _, err := l.TryAcquire(outer.Context(), "order:42"); !errors.Is(err, context.Canceled) {
		t.Errorf("TryAcquire under a released lease's context = %v, want context.Canceled", err)
	}
}

// A waiter gets a released lock promptly, not after sleeping for the
// holder's TTL: here the TTL is far longer than the waiter may wait.
func TestWaiterGetsReleasedLockWithoutSleepingTTL(t *testing.T) {
	srv := redistest.Start(t)
	holder, waiter := newLocker(t, srv), newLocker(t, srv)
	ctx := context.Background()
	lease, err := holder.Acquire(ctx, "hot", lockmw.WithLeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := waiter.Acquire(ctx, "hot", lockmw.WithWait(5*time.Second))
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v (it must not sleep for the holder's 1m TTL)", err)
	}
}

// WithWait ends a wait with ErrNotAcquired; a cancelled context ends it with
// the context's error; neither is confused with the other.
func TestWaitEnds(t *testing.T) {
	srv := redistest.Start(t)
	holder, waiter := newLocker(t, srv), newLocker(t, srv)
	ctx := context.Background()
	lease, err := holder.Acquire(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(ctx) }()

	_, err = waiter.Acquire(ctx, "busy", lockmw.WithWait(50*time.Millisecond))
	if !errors.Is(err, lockmw.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WithWait ran out: %v, want ErrNotAcquired only", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	_, err = waiter.Acquire(cctx, "busy")
	if !errors.Is(err, context.Canceled) || errors.Is(err, lockmw.ErrNotAcquired) {
		t.Errorf("cancelled wait: %v, want context.Canceled only", err)
	}
	dctx, cancel2 := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel2()
	_, err = waiter.Acquire(dctx, "busy")
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, lockmw.ErrNotAcquired) {
		t.Errorf("expired wait: %v, want context.DeadlineExceeded only", err)
	}
}

// A lease without watchdog ends with ErrLost (reason expired) at its TTL.
func TestLeaseWithoutWatchdogExpires(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, srv)
	lease, err := l.Acquire(context.Background(), "short", lockmw.WithLeaseTTL(100*time.Millisecond), lockmw.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, lease.Context(), 2*time.Second, "lease without watchdog")
	if r := lostReason(t, lease.Context()); r != lockmw.LostExpired {
		t.Errorf("reason = %q, want %q", r, lockmw.LostExpired)
	}
	err = lease.Release(context.Background())
	if !errors.Is(err, lockmw.ErrLost) {
		t.Errorf("Release = %v, want ErrLost", err)
	}
	if again := lease.Release(context.Background()); again != err {
		t.Errorf("second Release = %v, want the first result %v", again, err)
	}
}

// Do releases the lock after fn returns or panics, returns fn's error, and
// reports a lock lost while fn ran.
func TestDo(t *testing.T) {
	srv := redistest.Start(t)
	l, rival := newLocker(t, srv), newLocker(t, srv)
	ctx := context.Background()

	boom := errors.New("boom")
	err := l.Do(ctx, "do", func(ctx context.Context) error {
		mustBusy(t, rival, "do")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("Do = %v, want fn's error", err)
	}

	func() {
		defer func() {
			if r := recover(); r != "panic in fn" {
				t.Errorf("recovered %v, want the fn's panic", r)
			}
		}()
		_ = l.Do(ctx, "do", func(context.Context) error { panic("panic in fn") })
	}()

	probe := srv.Client(t)
	err = l.Do(ctx, "do", func(ctx context.Context) error {
		if err := probe.Del(ctx, lockKey("do")).Err(); err != nil {
			return err
		}
		<-ctx.Done() // the watchdog finds the key gone
		return nil
	}, lockmw.WithLeaseTTL(100*time.Millisecond))
	if !errors.Is(err, lockmw.ErrLost) {
		t.Errorf("Do with the lock lost = %v, want ErrLost", err)
	}
	// After all three, the lock is free.
	lease, err := rival.TryAcquire(ctx, "do")
	if err != nil {
		t.Fatalf("lock not released by Do: %v", err)
	}
	_ = lease.Release(ctx)
	if err := l.Do(ctx, "do", nil); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Errorf("Do(nil fn) = %v, want ErrInvalidOption", err)
	}
}

// Close releases held locks (their contexts end with ErrClosed), stops
// waiters, and refuses every later call.
func TestClose(t *testing.T) {
	srv := redistest.Start(t)
	l, other := newLocker(t, srv), newLocker(t, srv)
	ctx := context.Background()
	held, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	busy, err := other.Acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, "b")
		waitErr <- err
	}()

	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-waitErr; !errors.Is(err, lockmw.ErrClosed) {
		t.Errorf("waiting Acquire = %v, want ErrClosed", err)
	}
	if cause := context.Cause(held.Context()); !errors.Is(cause, lockmw.ErrClosed) {
		t.Errorf("held lease context cause = %v, want ErrClosed", cause)
	}
	if n, err := srv.Client(t).Exists(ctx, lockKey("a")).Result(); err != nil || n != 0 {
		t.Errorf("Close left the held lock in Redis (exists=%d, %v)", n, err)
	}
	if err := held.Release(ctx); !errors.Is(err, lockmw.ErrClosed) {
		t.Errorf("Release after Close = %v, want ErrClosed", err)
	}
	if _, err := l.TryAcquire(ctx, "c"); !errors.Is(err, lockmw.ErrClosed) {
		t.Errorf("TryAcquire after Close = %v, want ErrClosed", err)
	}
	if err := l.Do(ctx, "c", func(context.Context) error { return nil }); !errors.Is(err, lockmw.ErrClosed) {
		t.Errorf("Do after Close = %v, want ErrClosed", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	_ = busy.Release(ctx)
}

// Release with a context that has already ended still frees the lock at
// once, instead of leaving it to expire.
func TestReleaseWithEndedContext(t *testing.T) {
	srv := redistest.Start(t)
	l, rival := newLocker(t, srv), newLocker(t, srv)
	reqCtx, cancel := context.WithCancel(context.Background())
	lease, err := l.Acquire(reqCtx, "req", lockmw.WithLeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the request is over
	if err := lease.Release(reqCtx); err != nil {
		t.Fatalf("Release with an ended context = %v", err)
	}
	next, err := rival.TryAcquire(context.Background(), "req")
	if err != nil {
		t.Fatalf("lock still held after Release: %v", err)
	}
	_ = next.Release(context.Background())
}
