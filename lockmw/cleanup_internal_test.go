package lockmw

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// quickTimeouts makes a client give up quickly on a frozen server.
func quickTimeouts(o *redis.Options) {
	o.DialTimeout = 200 * time.Millisecond
	o.ReadTimeout = 200 * time.Millisecond
	o.WriteTimeout = 200 * time.Millisecond
	o.MaxRetries = -1
}

// newTestLocker returns a Locker on client, closed at cleanup.
func newTestLocker(t *testing.T, client redis.UniversalClient, opts ...Option) *Locker {
	t.Helper()
	l, err := New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failWhilePaused warms l, pauses srv, and makes an acquisition of key
// fail for want of an answer, leaving a cleanup pending. srv stays paused.
func failWhilePaused(t *testing.T, srv *redistest.Server, l *Locker, key string) {
	t.Helper()
	ctx := context.Background()
	warm, err := l.TryAcquire(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	if _, err := l.TryAcquire(ctx, key); !errors.Is(err, ErrUnavailable) {
		srv.Resume(t)
		t.Fatalf("TryAcquire on a paused Redis = %v, want ErrUnavailable", err)
	}
}

// The cleaner gives back only its own token: when the failed request could
// not take the lock (another owner held it), that owner's lease is left
// alone, before and after Redis answers.
func TestCleanerLeavesOtherOwnersLock(t *testing.T) {
	srv := redistest.Start(t)
	l := newTestLocker(t, srv.Client(t, quickTimeouts), WithTTL(30*time.Second))
	rival := newTestLocker(t, srv.Client(t))
	ctx := context.Background()
	held, err := rival.Acquire(ctx, "taken", WithLeaseTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	failWhilePaused(t, srv, l, "taken")
	if l.cleaner.idle() {
		t.Fatal("no cleanup pending after an acquisition that got no answer")
	}
	srv.Resume(t)
	waitFor(t, 10*time.Second, "cleanup done once Redis answers", l.cleaner.idle)

	if err := held.Context().Err(); err != nil {
		t.Fatalf("the other owner's lease ended: %v", context.Cause(held.Context()))
	}
	owner, err := srv.Client(t).Get(ctx, lockKeyOf(held.lock)).Result()
	if err != nil || owner != held.token {
		t.Fatalf("lock key holds %q (%v), want the other owner's token", owner, err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("the other owner's Release = %v, want nil: it still owned the lock", err)
	}
}

// Close with a cleanup pending on a Redis that does not answer returns
// (after one last bounded try) and leaves no goroutine running; the lock
// is left to expire.
func TestCloseStopsPendingCleanups(t *testing.T) {
	srv := redistest.Start(t)
	l, err := New(srv.Client(t, quickTimeouts), WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	failWhilePaused(t, srv, l, "stuck")
	defer srv.Resume(t)
	if l.cleaner.idle() {
		t.Fatal("no cleanup pending after an acquisition that got no answer")
	}

	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close still waiting for the cleaner after 20s")
	}
	if !l.cleaner.idle() {
		t.Fatal("cleaner still running after Close")
	}
	// A cleanup handed over after Close is tried once, in the caller.
	l.takeBack(store.Key{Prefix: l.cfg.prefix, Name: "late"}, newToken(), false, time.Second)
	if !l.cleaner.idle() {
		t.Fatal("cleaner restarted after Close")
	}
	waitFor(t, 10*time.Second, "goroutines back to where they were before the failure", func() bool {
		return runtime.NumGoroutine() <= base
	})
}

// Many acquisitions failing at once leave as many cleanups, which all end
// once Redis answers, and the locks are free.
func TestCleanerDrainsManyFailedAcquisitions(t *testing.T) {
	srv := redistest.Start(t)
	l := newTestLocker(t, srv.Client(t, quickTimeouts, func(o *redis.Options) { o.PoolSize = 64 }), WithTTL(30*time.Second))
	rival := newTestLocker(t, srv.Client(t))
	ctx := context.Background()
	warm, err := l.TryAcquire(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Release(ctx)

	srv.Pause(t)
	const n = 100
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := l.TryAcquire(ctx, "many:"+string(rune('a'+i%26))+string(rune('a'+i/26)))
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; !errors.Is(err, ErrUnavailable) {
			srv.Resume(t)
			t.Fatalf("TryAcquire on a paused Redis = %v, want ErrUnavailable", err)
		}
	}
	srv.Resume(t)
	waitFor(t, 15*time.Second, "all cleanups done once Redis answers", l.cleaner.idle)
	for i := range n {
		key := "many:" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		lease, err := rival.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("%s after the cleanups: %v", key, err)
		}
		_ = lease.Release(ctx)
	}
}

// TestCleanerLastTryGoesTwice: the try Close gives a cleanup that has not
// been answered yet goes twice, the second after the first's answer, as
// the cleaner's ordinary tries do: Close often comes just after a stall,
// and the first answered try may run before the stalled request.
func TestCleanerLastTryGoesTwice(t *testing.T) {
	c := newCleaner(slog.New(slog.DiscardHandler), "Redis", nil)
	var mu sync.Mutex
	tries, last := 0, 0
	c.add(&cleanup{key: "k", until: time.Now().Add(time.Hour), try: func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		tries++
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) > time.Minute {
			return errors.New("no answer") // the ordinary tries, until Close
		}
		last++
		return nil
	}})
	waitFor(t, 10*time.Second, "a first try", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return tries > 0
	})
	c.close()
	if last != 2 {
		t.Fatalf("Close's last try ran %d times, want 2 (once more after its answer)", last)
	}
}

// TestCleanerGivesUpOnAClosedClient: a give-back that failed because its
// owner closed the store's client before the Locker (store.ClientCloser)
// is given up at once, not retried until the lease TTL: no retry can
// reach the store.
func TestCleanerGivesUpOnAClosedClient(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t, quickTimeouts)
	l := newTestLocker(t, client)
	var mu sync.Mutex
	var tries []error
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	lock := store.Key{Prefix: l.cfg.prefix, Name: "closed"}
	l.cleaner.add(&cleanup{key: lock.Name, until: time.Now().Add(time.Hour), try: func(ctx context.Context) error {
		_, err := l.st.Release(ctx, lock, newToken())
		mu.Lock()
		tries = append(tries, err)
		mu.Unlock()
		return err
	}})
	waitFor(t, 5*time.Second, "the cleaner to give up on the closed client", l.cleaner.idle)
	mu.Lock()
	defer mu.Unlock()
	if len(tries) != 1 || !errors.Is(tries[0], redis.ErrClosed) {
		t.Fatalf("give-back tries on a closed client: %v, want one failing with redis.ErrClosed", tries)
	}
}
