package lockmw_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// proxiedLocker returns a Locker whose client reaches srv through a new
// proxy, failing fast (200ms timeouts, no retries), and the proxy.
func proxiedLocker(t *testing.T, srv *redistest.Server, opts ...lockmw.Option) (*lockmw.Locker, *redistest.Proxy) {
	t.Helper()
	p := redistest.StartProxy(t, srv.Addr())
	o := &redis.Options{Addr: p.Addr()}
	fastFailing(o)
	client := redis.NewClient(o)
	t.Cleanup(func() { _ = client.Close() })
	return newLockerOn(t, client, opts...), p
}

// Injected latency and resets make acquisitions fail with ErrUnavailable
// (or the context's error) within the client's timeouts: never
// ErrNotAcquired, never a hang, and never a lock left behind.
func TestFaultNetAcquireUnderLatencyAndResets(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		inject func(*redistest.Proxy, testing.TB)
		ttl    time.Duration
	}{
		// Replies slower than ReadTimeout (200ms): the client gives up.
		{"latency over ReadTimeout", func(p *redistest.Proxy, t testing.TB) { p.AddLatency(t, 400*time.Millisecond) }, time.Second},
		// Replies within ReadTimeout but after the lease's validity: the
		// acquisition is useless and rolled back.
		{"latency over validity", func(p *redistest.Proxy, t testing.TB) { p.AddLatency(t, 100*time.Millisecond) }, 50 * time.Millisecond},
		{"connections reset", (*redistest.Proxy).ResetConnections, time.Second},
		{"link cut", (*redistest.Proxy).Cut, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, p := proxiedLocker(t, srv)
			key := "net:" + tc.name
			if lease, err := l.TryAcquire(ctx, key); err != nil { // warm the pool
				t.Fatal(err)
			} else if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			tc.inject(p, t)
			for name, call := range map[string]func() error{
				"TryAcquire": func() error { _, err := l.TryAcquire(ctx, key, lockmw.WithLeaseTTL(tc.ttl)); return err },
				"Acquire":    func() error { _, err := l.Acquire(ctx, key, lockmw.WithLeaseTTL(tc.ttl)); return err },
				"Acquire with deadline": func() error {
					dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
					defer cancel()
					_, err := l.Acquire(dctx, key, lockmw.WithLeaseTTL(tc.ttl))
					return err
				},
			} {
				err := within(t, 10*time.Second, call)
				switch {
				case err == nil:
					t.Fatalf("%s succeeded through a broken link", name)
				case errors.Is(err, lockmw.ErrNotAcquired):
					t.Fatalf("%s: %v: a broken link reported as a busy lock", name, err)
				case !errors.Is(err, lockmw.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded):
					t.Fatalf("%s: %v, want ErrUnavailable or the context's deadline", name, err)
				}
			}
			// Whatever reached Redis was rolled back or expires with its TTL;
			// nothing holds the lock beyond that.
			deadline := time.Now().Add(10 * time.Second)
			for {
				n, err := direct.Exists(ctx, lockKey(key)).Result()
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					break
				}
				pttl := direct.PTTL(ctx, lockKey(key)).Val()
				if pttl > tc.ttl {
					t.Fatalf("lock key has PTTL %v, longer than its lease TTL %v", pttl, tc.ttl)
				}
				if time.Now().After(deadline) {
					t.Fatalf("lock key still there: PTTL %v", pttl)
				}
				time.Sleep(10 * time.Millisecond)
			}
			p.Heal(t)
			eventually(t, 10*time.Second, func() error {
				lease, err := l.TryAcquire(ctx, key)
				if err == nil {
					err = lease.Release(ctx)
				}
				return err
			})
		})
	}
}

// A partition between a holder and Redis cancels the lease context with
// ErrLost before the lock expires in Redis (PEXPIRETIME, read over a
// direct connection), so no one else can take it while the holder still
// works; after the link heals the holder's Locker acquires and renews again.
func TestFaultNetPartitionCancelsLeaseBeforeExpiry(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	// The drift factor is the margin between the holder's deadline and the
	// key's expiry: 20% of 3s leaves room for a slow scheduler on a busy
	// machine (10% of 1s did not always).
	l, p := proxiedLocker(t, srv, lockmw.WithDriftFactor(0.2))
	rival := newLocker(t, srv)
	ctx := context.Background()
	const key, ttl = "partitioned", 3 * time.Second

	lease, err := l.Acquire(ctx, key, lockmw.WithLeaseTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	p.Cut(t)
	// From here no renewal reaches Redis: the expiry it has now is final.
	expireAt, err := direct.PExpireTime(ctx, lockKey(key)).Result()
	if err != nil || expireAt <= 0 {
		t.Fatalf("PEXPIRETIME = %v, %v", expireAt, err)
	}
	waitDone(t, lease.Context(), 10*ttl, "lease behind a cut link")
	lostAt := time.Now()
	if r := lostReason(t, lease.Context()); r != lockmw.LostDeadline {
		t.Errorf("reason = %q, want %q", r, lockmw.LostDeadline)
	}
	// Redis and this test share the host's clock: PEXPIRETIME is Unix ms.
	if expiry := time.UnixMilli(int64(expireAt / time.Millisecond)); !lostAt.Before(expiry) {
		t.Fatalf("lease cancelled at %v, not before the key's expiry %v", lostAt.Format(time.StampMicro), expiry.Format(time.StampMicro))
	} else {
		t.Logf("lease cancelled %v before the key expired in Redis", expiry.Sub(lostAt))
	}
	if n, err := direct.Exists(ctx, lockKey(key)).Result(); err != nil || n != 1 {
		t.Errorf("lock key gone (%d, %v) when the holder learned it was lost", n, err)
	}
	mustBusy(t, rival, key)

	// After the key expires, the rival gets the lock even though the holder
	// never released it.
	var taken *lockmw.Lease
	eventually(t, 30*time.Second, func() (err error) {
		taken, err = rival.TryAcquire(ctx, key)
		return err
	})
	if taken.Fence() <= lease.Fence() {
		t.Errorf("fence went from %d to %d", lease.Fence(), taken.Fence())
	}
	if err := taken.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
		t.Errorf("Release of the lost lease = %v, want ErrLost", err)
	}

	p.Heal(t)
	var again *lockmw.Lease
	eventually(t, 10*time.Second, func() (err error) {
		again, err = l.Acquire(ctx, key, lockmw.WithLeaseTTL(ttl))
		return err
	})
	// A renewal reaches Redis through the healed link (a condition, not a
	// span of time).
	if !waitRenewedOn(t, direct, again, 30*time.Second) {
		t.Fatalf("lease after the link healed ended: %v", context.Cause(again.Context()))
	}
	if err := again.Context().Err(); err != nil {
		t.Fatalf("lease after the link healed ended: %v", context.Cause(again.Context()))
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
