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

// redlockQueueGone waits until key's wait queue on the first master is
// gone, and reports what it holds if it is not.
func redlockQueueGone(t *testing.T, first *redistest.Server, key, why string) {
	t.Helper()
	c := first.Client(t)
	eventually(t, 5*time.Second, func() error {
		entries, err := c.LRange(context.Background(), queueKey(key), 0, -1).Result()
		if err != nil {
			return err
		}
		if len(entries) > 0 {
			return fmt.Errorf("wait queue still holds %q after every Locker closed: %s", entries, why)
		}
		return nil
	})
}

// newRedlockVia returns a Redlock Locker over masters whose link to the
// first master goes through p, closed at cleanup.
func newRedlockVia(t *testing.T, masters []*redistest.Server, p *redistest.Proxy, opts ...func(*redis.Options)) *lockmw.Locker {
	t.Helper()
	clients := redlockClients(t, masters, fastFailing, dialOnce)
	opts = append([]func(*redis.Options){fastFailing, dialOnce, func(o *redis.Options) { o.Addr = p.Addr() }}, opts...)
	clients[0] = masters[0].Client(t, opts...)
	l, err := lockmw.NewRedlock(clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestRedlockQueueEntryGoneAfterClose: whatever became of a Redlock
// waiter's attempts on the first master, its entry in the wait queue there
// does not outlive its Locker's Close (while the first master answers).
// Each case leaves another owner's lock on the first master, with a long
// TTL, so that no release there would ever pop (skip) a forgotten entry.
func TestRedlockQueueEntryGoneAfterClose(t *testing.T) {
	ctx := context.Background()
	const foreign = time.Minute

	// The first master queues the entry (the lock is another owner's
	// there), and the other two grant the attempt: the waiter gets its
	// lease with its entry queued behind the foreign holder.
	t.Run("won where the first master queued", func(t *testing.T) {
		masters := redistest.StartN(t, 3)
		const key = "redlock:q-won"
		occupy(t, masters[0], key, foreign)
		l := newRedlock(t, masters)
		lease, err := l.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		redlockQueueGone(t, masters[0], key, "the attempt won on masters 1 and 2 and its entry, queued on master 0, was forgotten")
	})

	// As above, but the first master's answer is late (slow replies): the
	// attempt is won by masters 1 and 2 before it comes, and the entry is
	// queued all the same.
	t.Run("won before the first master answered", func(t *testing.T) {
		masters := redistest.StartN(t, 3)
		const key = "redlock:q-won-late"
		occupy(t, masters[0], key, foreign)
		p := redistest.StartProxy(t, masters[0].Addr())
		l := newRedlockVia(t, masters, p)
		p.AddLatency(t, 100*time.Millisecond) // under the clients' 200ms ReadTimeout
		lease, err := l.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		redlockQueueGone(t, masters[0], key, "the attempt was won before master 0 answered and its entry, queued there, was forgotten")
	})

	// The first master runs the attempt (and queues the entry) but its
	// reply comes after the client's ReadTimeout: the attempt sees an
	// error there, which may have run. The waiter gives up; the link
	// heals; its Locker closes.
	t.Run("reply lost", func(t *testing.T) {
		masters := redistest.StartN(t, 3)
		p := redistest.StartProxy(t, masters[0].Addr())
		// The attempt must go on a connection made before the replies
		// slowed down (a new one fails its handshake, sending nothing),
		// which the client does not always reuse: a few tries, each on a
		// key of its own, until master 0 has run the attempt.
		for try := range 5 {
			key := fmt.Sprintf("redlock:q-lost-reply-%d", try)
			for _, m := range masters {
				occupy(t, m, key, foreign)
			}
			l := newRedlockVia(t, masters, p, func(o *redis.Options) { o.PoolSize = 1 })
			warm, err := l.TryAcquire(ctx, key+"-warm")
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}
			p.AddLatency(t, 400*time.Millisecond) // over the clients' 200ms ReadTimeout
			if _, err := l.Acquire(ctx, key, lockmw.WithWait(500*time.Millisecond)); !errors.Is(err, lockmw.ErrNotAcquired) {
				t.Fatalf("Acquire: %v, want ErrNotAcquired", err)
			}
			ran, err := masters[0].Client(t).Get(ctx, lockKey(key)+":fence").Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			p.Heal(t)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if ran == 0 {
				continue // master 0 never saw the attempt
			}
			redlockQueueGone(t, masters[0], key, "master 0 queued the entry but its reply was lost, and the waiter did not count it queued")
			return
		}
		t.Fatal("master 0 never ran an attempt whose reply was lost")
	})

	// Queued normally, then Close while waiting: the waiter leaves.
	t.Run("closed while queued", func(t *testing.T) {
		masters := redistest.StartN(t, 3)
		const key = "redlock:q-closed"
		for _, m := range masters {
			occupy(t, m, key, foreign)
		}
		l := newRedlock(t, masters)
		got := make(chan error, 1)
		go func() {
			_, err := l.Acquire(ctx, key)
			got <- err
		}()
		redlockQueueLen(t, masters[0], key, 1)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-got; !errors.Is(err, lockmw.ErrClosed) {
			t.Fatalf("Acquire: %v, want ErrClosed", err)
		}
		redlockQueueGone(t, masters[0], key, "the waiter did not leave at Close")
	})
}

// TestRedlockQueueEntryGoneAfterCloseDuringAttempt: a waiter whose attempt
// is still waiting for the first master when its Locker's Close begins
// (the master's reply slow, or the master paused for a moment) takes its
// entry out before Close returns: Close ends the attempt, and the leave is
// sent after it on the first master. The Locker's TTL, which bounds how
// long Close waits for its waiters, is shorter than the first master's
// delay, so a waiter that finished its attempt first would outlast Close.
func TestRedlockQueueEntryGoneAfterCloseDuringAttempt(t *testing.T) {
	ctx := context.Background()
	const foreign = time.Minute
	patient := func(o *redis.Options) { o.ReadTimeout = 5 * time.Second }
	for _, tc := range []struct {
		name string
		// slow makes the first master's answers late and returns what
		// ends that once Close has begun; it is called after the Locker
		// has made its connections.
		slow func(t *testing.T, first *redistest.Server, p *redistest.Proxy) (heal func())
	}{
		{name: "first master's reply slow", slow: func(t *testing.T, _ *redistest.Server, p *redistest.Proxy) func() {
			p.AddLatency(t, time.Second)
			return func() {} // the latency stays: Close must wait it out
		}},
		{name: "first master paused", slow: func(t *testing.T, first *redistest.Server, _ *redistest.Proxy) func() {
			first.Pause(t)
			return func() {
				time.Sleep(300 * time.Millisecond) // Close has given up waiting for the waiter by then
				first.Resume(t)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			masters := redistest.StartN(t, 3)
			key := "redlock:q-close-in-flight"
			for _, m := range masters {
				occupy(t, m, key, foreign)
			}
			p := redistest.StartProxy(t, masters[0].Addr())
			clients := redlockClients(t, masters, fastFailing, dialOnce)
			clients[0] = masters[0].Client(t, fastFailing, dialOnce, patient, func(o *redis.Options) { o.Addr = p.Addr() })
			// The Locker's TTL bounds Close's wait for its waiters: shorter
			// than the first master's delay.
			l, err := lockmw.NewRedlock(clients, lockmw.WithTTL(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			// Connections to every master first, so that the attempt goes
			// on one that is open (a new one to a paused master would not
			// get through its handshake). Its lease TTL is long enough for
			// a loaded machine: with the Locker's 50ms, one answer after
			// 48ms fails it as outlasting its validity.
			warm, err := l.TryAcquire(ctx, key+"-warm", lockmw.WithLeaseTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}
			heal := tc.slow(t, masters[0], p)
			got := make(chan error, 1)
			go func() {
				_, err := l.Acquire(ctx, key, lockmw.WithLeaseTTL(time.Minute))
				got <- err
			}()
			// The attempt has reached master 1 (its counter moved), and
			// master 0 (queued there, or about to be when it resumes).
			eventually(t, 10*time.Second, func() error {
				n, err := masters[1].Client(t).Exists(ctx, lockKey(key)+":fence").Result()
				if err == nil && n == 0 {
					err = errors.New("the waiter's attempt has not reached master 1")
				}
				return err
			})
			closed := make(chan error, 1)
			go func() { closed <- l.Close() }()
			heal()
			if err := <-closed; err != nil {
				t.Fatal(err)
			}
			if err := <-got; !errors.Is(err, lockmw.ErrClosed) {
				t.Fatalf("Acquire: %v, want ErrClosed", err)
			}
			p.Heal(t)
			redlockQueueGone(t, masters[0], key, "the waiter's attempt outlasted Close's wait and its leave failed with ErrClosed")
		})
	}
}

// TestRedlockQueueEntryOfClosedLockerSkipped: a waiter's Locker that
// closes while the first master is out of its reach cannot take the
// waiter's entry out; the entry stays until a release on that master
// reaches it and skips it (its Locker no longer listens), waking the next
// waiter instead.
func TestRedlockQueueEntryOfClosedLockerSkipped(t *testing.T) {
	masters := redistest.StartN(t, 3)
	ctx := context.Background()
	const key = "redlock:q-unreachable"
	holder := newRedlock(t, masters, lockmw.WithTTL(time.Minute))
	held, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	p := redistest.StartProxy(t, masters[0].Addr())
	cut := newRedlockVia(t, masters, p)
	gone := make(chan error, 1)
	go func() {
		_, err := cut.Acquire(ctx, key)
		gone <- err
	}()
	redlockQueueLen(t, masters[0], key, 1)
	next := newRedlock(t, masters)
	got := make(chan error, 1)
	go func() {
		lease, err := next.Acquire(ctx, key)
		if err == nil {
			err = lease.Release(ctx)
		}
		got <- err
	}()
	redlockQueueLen(t, masters[0], key, 2)

	p.Cut(t)
	if err := cut.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-gone; !errors.Is(err, lockmw.ErrClosed) {
		t.Fatalf("Acquire of the closed Locker: %v, want ErrClosed", err)
	}
	p.Heal(t)
	redlockQueueLen(t, masters[0], key, 2) // the closed Locker's entry is still first

	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the release did not skip the closed Locker's entry to wake the waiter behind it")
	}
	if err := next.Close(); err != nil {
		t.Fatal(err)
	}
	redlockQueueGone(t, masters[0], key, "the closed Locker's entry was not skipped")
}
