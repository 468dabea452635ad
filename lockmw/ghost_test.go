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

// ghostTTL is the lease TTL of the ghost-lock tests: far longer than the
// bound within which the lock must be free again once Redis is back.
const (
	ghostTTL   = 30 * time.Second
	ghostBound = 5 * time.Second
	ghostPause = time.Second // the freeze being simulated
)

// freeWithin waits until rival can take key, failing the test after limit.
func freeWithin(t *testing.T, rival *lockmw.Locker, key string, limit time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	for {
		lease, err := rival.TryAcquire(ctx, key)
		if err == nil {
			_ = lease.Release(ctx)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q still not free %v after Redis came back (lease TTL %v): %v", key, limit, ghostTTL, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// contextTimeouts makes a client bound its I/O by the caller's context
// deadline rather than a short ReadTimeout.
func contextTimeouts(o *redis.Options) {
	o.ContextTimeoutEnabled = true
	o.ReadTimeout = 10 * time.Second
	o.MaxRetries = -1
}

// An acquisition that fails because Redis does not answer in time (the
// client's ReadTimeout, or the caller's context deadline) may still run
// when Redis resumes. The lock it takes then belongs to a token no lease was
// made for: the Locker gives it back as soon as Redis answers, rather than
// leaving the key held for the whole TTL.
func TestFailedAcquireLeavesNoGhostLock(t *testing.T) {
	t.Parallel() // its own servers; long, and mostly waiting
	for _, tc := range []struct {
		name   string
		client func(*redis.Options)
		wait   bool // Acquire rather than TryAcquire
		fair   bool
		ctxTO  time.Duration // the caller's context deadline, 0 for none
	}{
		{name: "TryAcquire/ReadTimeout", client: fastFailing},
		{name: "Acquire/ReadTimeout", client: fastFailing, wait: true},
		{name: "Acquire/ContextDeadline", client: contextTimeouts, wait: true, ctxTO: 300 * time.Millisecond},
		{name: "FairTryAcquire/ReadTimeout", client: fastFailing, fair: true},
		{name: "FairAcquire/ReadTimeout", client: fastFailing, fair: true, wait: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			l := newLockerOn(t, srv.Client(t, tc.client), lockmw.WithTTL(ghostTTL))
			rival := newLocker(t, srv)
			var opts []lockmw.AcquireOption
			if tc.fair {
				opts = append(opts, lockmw.Fair())
			}
			ctx := context.Background()
			// Warm the connection so the request is on the wire before the
			// pause ends.
			warm, err := l.TryAcquire(ctx, "ghost", opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}

			srv.Pause(t)
			pausedAt := time.Now()
			callCtx := ctx
			if tc.ctxTO > 0 {
				var cancel context.CancelFunc
				callCtx, cancel = context.WithTimeout(ctx, tc.ctxTO)
				defer cancel()
			}
			var lease *lockmw.Lease
			if tc.wait {
				lease, err = l.Acquire(callCtx, "ghost", opts...)
			} else {
				lease, err = l.TryAcquire(callCtx, "ghost", opts...)
			}
			if err == nil {
				srv.Resume(t)
				_ = lease.Release(ctx)
				t.Fatal("acquired while Redis was paused")
			}
			if !errors.Is(err, lockmw.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
				srv.Resume(t)
				t.Fatalf("error = %v, want ErrUnavailable or DeadlineExceeded", err)
			}
			time.Sleep(time.Until(pausedAt.Add(ghostPause)))
			srv.Resume(t)

			freeWithin(t, rival, "ghost", ghostBound)
		})
	}
}

// Redlock: an acquisition that fails because a majority of masters did not
// answer may still run on them when they resume; its rollback, sent while
// they were still frozen, is lost. The Locker gives the lock back on those
// masters once they answer, so the key does not stay blocked for the TTL.
func TestRedlockFailedAcquireLeavesNoGhostLock(t *testing.T) {
	masters := redistest.StartN(t, 3)
	l := newRedlock(t, masters, lockmw.WithTTL(ghostTTL))
	rival := newRedlock(t, masters)
	ctx := context.Background()
	warm, err := l.TryAcquire(ctx, "ghost")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}

	masters[1].Pause(t)
	masters[2].Pause(t)
	pausedAt := time.Now()
	lease, err := l.TryAcquire(ctx, "ghost")
	if err == nil {
		masters[1].Resume(t)
		masters[2].Resume(t)
		_ = lease.Release(ctx)
		t.Fatal("acquired with a majority of masters paused")
	}
	if !errors.Is(err, lockmw.ErrUnavailable) {
		masters[1].Resume(t)
		masters[2].Resume(t)
		t.Fatalf("error = %v, want ErrUnavailable", err)
	}
	time.Sleep(time.Until(pausedAt.Add(ghostPause)))
	masters[1].Resume(t)
	masters[2].Resume(t)

	freeWithin(t, rival, "ghost", ghostBound)
}
