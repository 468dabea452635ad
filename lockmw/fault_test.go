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

// fastFailing makes a client give up quickly on a dead or frozen server.
func fastFailing(o *redis.Options) {
	o.DialTimeout = 200 * time.Millisecond
	o.ReadTimeout = 200 * time.Millisecond
	o.WriteTimeout = 200 * time.Millisecond
	o.MaxRetries = -1
}

// within runs call and fails the test if it has not returned after limit.
func within(t *testing.T, limit time.Duration, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("call still running after %v", limit)
		return nil
	}
}

// eventually retries call until it succeeds, failing the test after limit
// with the last error. A client that saw its server die backs off dialing
// for up to a second after the server is back.
func eventually(t *testing.T, limit time.Duration, call func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := call()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %v: %v", limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Redis that is down or frozen gives ErrUnavailable (never ErrNotAcquired,
// never a hang), to Acquire and TryAcquire alike; service resumes with Redis.
func TestFaultRedisDownOrFrozen(t *testing.T) {
	for _, tc := range []struct {
		name        string
		fail, heal  func(*redistest.Server, testing.TB)
		waitingCall bool
	}{
		{"killed/TryAcquire", (*redistest.Server).Kill, (*redistest.Server).Restart, false},
		{"killed/Acquire", (*redistest.Server).Kill, (*redistest.Server).Restart, true},
		{"paused/TryAcquire", (*redistest.Server).Pause, (*redistest.Server).Resume, false},
		{"paused/Acquire", (*redistest.Server).Pause, (*redistest.Server).Resume, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			l := newLockerOn(t, srv.Client(t, fastFailing))
			ctx := context.Background()
			try := func() error {
				var lease *lockmw.Lease
				var err error
				if tc.waitingCall {
					lease, err = l.Acquire(ctx, "k")
				} else {
					lease, err = l.TryAcquire(ctx, "k")
				}
				if err == nil {
					err = lease.Release(ctx)
				}
				return err
			}
			tc.fail(srv, t)
			err := within(t, 10*time.Second, try)
			if !errors.Is(err, lockmw.ErrUnavailable) {
				t.Fatalf("error = %v, want ErrUnavailable", err)
			}
			if errors.Is(err, lockmw.ErrNotAcquired) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %v is confused with busy or a context error", err)
			}
			tc.heal(srv, t)
			eventually(t, 10*time.Second, try)
		})
	}
}

// An acquisition answered after its lease's validity is useless: it fails
// with ErrUnavailable and gives the lock back at once.
func TestFaultSlowAcquireIsRolledBack(t *testing.T) {
	srv := redistest.Start(t)
	l, rival := newLocker(t, srv), newLocker(t, srv)
	ctx := context.Background()
	const ttl = 100 * time.Millisecond
	// Warm the connection so the request is on the wire before the pause ends.
	if err := srv.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	lease, err := l.TryAcquire(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(ctx)

	srv.Pause(t)
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		time.Sleep(3 * ttl) // the freeze being simulated
		srv.Resume(t)
	}()
	_, err = l.TryAcquire(ctx, "slow", lockmw.WithLeaseTTL(ttl))
	<-resumed
	if !errors.Is(err, lockmw.ErrUnavailable) {
		t.Fatalf("acquire answered after %v with TTL %v: %v, want ErrUnavailable", 3*ttl, ttl, err)
	}
	// The late acquisition was rolled back: the key is gone and free.
	lease, err = rival.TryAcquire(ctx, "slow", lockmw.WithLeaseTTL(time.Minute))
	if err != nil {
		t.Fatalf("lock left behind by the late acquisition: %v", err)
	}
	_ = lease.Release(ctx)
}

// A held lease whose Redis goes down keeps renewing in vain and is cancelled
// with ErrLost (reason deadline, wrapping the renewal error) at its validity
// deadline; the watchdog then recovers for new leases once Redis is back.
func TestFaultRedisDownWhileHolding(t *testing.T) {
	srv := redistest.Start(t)
	l := newLockerOn(t, srv.Client(t, fastFailing))
	ctx := context.Background()
	const ttl = 500 * time.Millisecond
	lease, err := l.Acquire(ctx, "held", lockmw.WithLeaseTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	waitDone(t, lease.Context(), 10*ttl, "lease on a killed Redis")
	if r := lostReason(t, lease.Context()); r != lockmw.LostDeadline {
		t.Errorf("reason = %q, want %q", r, lockmw.LostDeadline)
	}
	var lost *lockmw.LostError
	if errors.As(context.Cause(lease.Context()), &lost); lost == nil || lost.Err == nil {
		t.Errorf("LostError %v does not carry the renewal error", lost)
	}
	srv.Restart(t)
	var lease2 *lockmw.Lease
	eventually(t, 10*time.Second, func() (err error) {
		lease2, err = l.Acquire(ctx, "held", lockmw.WithLeaseTTL(ttl))
		return err
	})
	// The watchdog works again: a renewal reaches the restarted Redis (a
	// condition, not a span of time).
	if !waitRenewedOn(t, srv.Client(t), lease2, 30*time.Second) {
		t.Fatalf("lease after restart ended: %v", context.Cause(lease2.Context()))
	}
	if err := lease2.Context().Err(); err != nil {
		t.Fatalf("lease after restart ended: %v", context.Cause(lease2.Context()))
	}
	if err := lease2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
