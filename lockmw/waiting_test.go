package lockmw_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// queueKey is where lockmw keeps the fair queue of key (default prefix).
func queueKey(key string) string { return lockKey(key) + ":q" }

// waitQueueLen waits until key's fair queue holds n waiters.
func waitQueueLen(t *testing.T, admin *redis.Client, key string, n int64) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		got, err := admin.LLen(context.Background(), queueKey(key)).Result()
		if err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("queue holds %d waiters, want %d", got, n)
		}
		return nil
	})
}

// scriptCalls reads how many EVALSHA and EVAL calls srv has served.
func scriptCalls(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	return commandCalls(t, srv, "evalsha") + commandCalls(t, srv, "eval")
}

// lockCalls reads how many lock calls srv has served: scripts, and the SET
// NX that plain acquisition attempts send on one server.
func lockCalls(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	return scriptCalls(t, srv) + commandCalls(t, srv, "set")
}

// TestFairHandsOverInArrivalOrder queues 100 waiters from four Lockers one
// after another and checks that each release wakes exactly one of them —
// the next in arrival order — and nobody else touches Redis meanwhile.
func TestFairHandsOverInArrivalOrder(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const key, waiters = "fair:order", 100

	// A long TTL keeps the waiters' fallback polls (due when the holder's
	// TTL would run out) out of the way of the script counts below.
	holder := newLocker(t, srv, lockmw.WithTTL(time.Minute))
	lockers := make([]*lockmw.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(t, srv, lockmw.WithTTL(time.Minute))
	}
	first, err := holder.Acquire(ctx, key, lockmw.Fair())
	if err != nil {
		t.Fatal(err)
	}

	// Load the release script, so that the hand-overs below run it by SHA.
	warm, err := holder.Acquire(ctx, "warm-up", lockmw.Fair())
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}

	got := make(chan handOver, waiters)
	for i := range waiters {
		go func() {
			lease, err := lockers[i%len(lockers)].Acquire(ctx, key, lockmw.Fair())
			got <- handOver{i, lease, err}
		}()
		waitQueueLen(t, admin, key, int64(i+1)) // i joined before i+1 starts
	}

	release := assertHandOversInOrder(t, first, got, waiters, func(i int) func() bool {
		before := scriptCalls(t, srv)
		return func() bool {
			// One script: the release that handed over. A herd of retries
			// would show here as up to 99 more.
			if calls := scriptCalls(t, srv) - before; calls != 1 {
				t.Fatalf("hand-over %d ran %d scripts, want 1 (the release)", i, calls)
			}
			return false
		}
	})
	if err := release.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := admin.Del(ctx, lockKey("warm-up")+":fence").Err(); err != nil {
		t.Fatal(err)
	}
	assertNoLockState(t, admin, key)
}

// TestFairSkipsAKilledWaiter queues a waiter in another process, kills it,
// and checks that the release goes to the next waiter at once instead of to
// the dead one (which would keep the lock for its whole TTL).
func TestFairSkipsAKilledWaiter(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const key = "fair:killed"
	const ttl = 30 * time.Second // a lock granted to the dead waiter would block for this long

	l := newLocker(t, srv, lockmw.WithTTL(ttl))
	held, err := l.Acquire(ctx, key, lockmw.Fair())
	if err != nil {
		t.Fatal(err)
	}
	dead := startFairWaiterProcess(t, srv, key, ttl)
	waitQueueLen(t, admin, key, 1)

	next := make(chan error, 1)
	go func() {
		lease, err := l.Acquire(ctx, key, lockmw.Fair(), lockmw.WithWait(10*time.Second))
		if err == nil {
			err = lease.Release(ctx)
		}
		next <- err
	}()
	waitQueueLen(t, admin, key, 2)

	if err := dead.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = dead.Wait()
	// Its subscription is gone once Redis has seen the connection close.
	eventually(t, 5*time.Second, func() error {
		clients, err := admin.ClientList(ctx).Result()
		if err != nil {
			return err
		}
		if c := countSubscribers(clients); c != 1 {
			return fmt.Errorf("%d subscriber connections, want 1 (this process's)", c)
		}
		return nil
	})

	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-next; err != nil {
		t.Fatalf("the waiter behind the killed one: %v (the dead waiter was not skipped)", err)
	}
	assertNoLockState(t, admin, key)
}

// startFairWaiterProcess runs a separate process that waits for key with
// Fair (it never gets it in these tests).
func startFairWaiterProcess(t *testing.T, srv *redistest.Server, key string, ttl time.Duration) *exec.Cmd {
	t.Helper()
	cmd, _ := startTestProcess(t, holderEnv, fmt.Sprintf("%s %s %s fair", srv.Addr(), key, ttl))
	return cmd
}

// countSubscribers counts connections in a CLIENT LIST reply that have
// channel subscriptions.
func countSubscribers(clientList string) int {
	n := 0
	for _, line := range strings.Split(clientList, "\n") {
		for _, field := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(field, "sub="); ok && v != "0" {
				n++
			}
		}
	}
	return n
}

// TestDroppedNotificationStillAcquires kills the waiting Locker's
// subscription connection and the holder's process, so no release message
// ever comes: the waiter still gets the lock when the holder's TTL runs out,
// woken by its timer, after a bounded number of attempts (it does not poll).
func TestDroppedNotificationStillAcquires(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const key = "dropped"

	holder, _ := startHolderProcess(t, srv, key, time.Second)
	l := newLocker(t, srv)
	before := lockCalls(t, srv)
	got := make(chan error, 1)
	go func() {
		lease, err := l.Acquire(ctx, key, lockmw.WithWait(20*time.Second))
		if err == nil {
			err = lease.Release(ctx)
		}
		got <- err
	}()
	// Wait until the waiter listens, then cut that connection.
	eventually(t, 5*time.Second, func() error {
		clients, err := admin.ClientList(ctx).Result()
		if err != nil {
			return err
		}
		if countSubscribers(clients) == 0 {
			return errors.New("the waiter has not subscribed yet")
		}
		return nil
	})
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if err := holder.Process.Kill(); err != nil { // dies holding: no release, no message
		t.Fatal(err)
	}
	_ = holder.Wait()

	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	// The holder's 1 s lease is renewed until the kill, so the waiter
	// waits about a second: a poller would run hundreds of attempts.
	// Here: the first, one after subscribing, a few on the TTL timer
	// (the TTL it learns shrinks towards 0), and the release.
	if calls := lockCalls(t, srv) - before; calls > 8 {
		t.Fatalf("%d lock calls while the waiter waited; it should wait on its timer, not poll", calls)
	}
}

// TestCancelledWaitsLeaveNothing cancels default and fair waiters of three
// Lockers (by context and by WithWait) and checks that each returns the
// right error and that no queue entry, key or subscription is left.
func TestCancelledWaitsLeaveNothing(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const key = "cancelled"

	holder := newLocker(t, srv)
	held, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	lockers := []*lockmw.Locker{newLocker(t, srv), newLocker(t, srv), newLocker(t, srv)}

	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var wrong atomic.Int32
	for i := range 24 {
		opts := []lockmw.AcquireOption{}
		if i%2 == 0 {
			opts = append(opts, lockmw.Fair())
		}
		byWait := i%3 == 0
		if byWait {
			opts = append(opts, lockmw.WithWait(300*time.Millisecond))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx := cctx
			if byWait {
				wctx = ctx // only WithWait ends this one
			}
			_, err := lockers[i%3].Acquire(wctx, key, opts...)
			switch {
			case byWait && errors.Is(err, lockmw.ErrNotAcquired) && !errors.Is(err, context.Canceled):
			case !byWait && errors.Is(err, context.Canceled) && !errors.Is(err, lockmw.ErrNotAcquired):
			default:
				t.Errorf("waiter %d (WithWait %v): %v", i, byWait, err)
				wrong.Add(1)
			}
		}()
	}
	// Another Locker holds the key: default waiters line up in the queue
	// beside the fair ones.
	waitQueueLen(t, admin, key, 24)
	cancel()
	wg.Wait()

	if n, err := admin.Exists(ctx, queueKey(key)).Result(); err != nil || n != 0 {
		t.Fatalf("queue key still exists (%d, %v) after every fair waiter gave up", n, err)
	}
	// Grant channels linger for a while after their last waiter (see
	// subscriptionLinger); then nothing stays subscribed.
	eventually(t, 10*time.Second, func() error {
		channels, err := admin.PubSubChannels(ctx, "*").Result()
		if err != nil {
			return err
		}
		if len(channels) != 0 {
			return fmt.Errorf("still subscribed to %v after every waiter gave up", channels)
		}
		return nil
	})
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	assertNoLockState(t, admin, key)
}

// assertNoLockState checks that only key's fence counter is left in Redis.
func assertNoLockState(t *testing.T, admin *redis.Client, key string) {
	t.Helper()
	keys, err := admin.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	if want := []string{lockKey(key) + ":fence"}; !slices.Equal(keys, want) {
		t.Fatalf("keys left in Redis: %q, want only %q", keys, want)
	}
}

// TestNoOverlapInAnyMode has three Lockers run default and fair waiters on
// one key at once, with a deliberately racy critical section: it must never
// see two holders, every acquisition must complete, and fences must rise in
// the order the critical sections ran.
func TestNoOverlapInAnyMode(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	const key, perWorker = "overlap", 25
	lockers := []*lockmw.Locker{newLocker(t, srv), newLocker(t, srv), newLocker(t, srv)}

	var (
		inside  atomic.Int32
		overlap atomic.Int32
		mu      sync.Mutex
		fences  []uint64
		wg      sync.WaitGroup
	)
	for w := range 12 {
		var opts []lockmw.AcquireOption
		switch w % 3 {
		case 1:
			opts = append(opts, lockmw.Fair())
		case 2:
			opts = append(opts, lockmw.Fair(), lockmw.WithLeaseTTL(time.Second))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWorker {
				lease, err := lockers[w%3].Acquire(ctx, key, opts...)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					overlap.Add(1)
				}
				mu.Lock()
				fences = append(fences, lease.Fence())
				mu.Unlock()
				time.Sleep(200 * time.Microsecond)
				inside.Add(-1)
				if err := lease.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := overlap.Load(); n != 0 {
		t.Fatalf("%d critical sections overlapped", n)
	}
	if len(fences) != 12*perWorker {
		t.Fatalf("%d critical sections ran, want %d", len(fences), 12*perWorker)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fence %d ran after fence %d", fences[i], fences[i-1])
		}
	}
	assertNoLockState(t, srv.Client(t), key)
}

// TestEarlyHandOverIsConfirmedOrCancelled follows a lock handed between
// goroutines of one Locker: the second hand-over lets the waiter start
// before Redis confirms it (the releasing lease was valid, and its fence
// was reserved). Here the key is deleted behind the holder's back first, so
// the transfer finds it gone: the waiter's lease, already returned, must
// end at once with ErrLost, and the holder's Release must report the loss.
func TestEarlyHandOverIsConfirmedOrCancelled(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const key = "early"
	l := newLocker(t, srv)

	a, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	subscribers := func(want int64) func() error {
		return func() error {
			n, err := admin.PubSubNumSub(ctx, lockKey(key)+":n").Result()
			if err != nil {
				return err
			}
			if got := n[lockKey(key)+":n"]; got != want {
				return fmt.Errorf("%d subscribers to the release channel, want %d", got, want)
			}
			return nil
		}
	}
	waitFor := func() chan *lockmw.Lease {
		// The previous waiter's UNSUBSCRIBE may not have reached Redis
		// yet: wait for it, so that the count below is the new waiter's.
		eventually(t, 5*time.Second, subscribers(0))
		sets, gets := commandCalls(t, srv, "set"), commandCalls(t, srv, "get")
		got := make(chan *lockmw.Lease, 1)
		go func() {
			lease, err := l.Acquire(ctx, key, lockmw.WithWait(10*time.Second))
			if err != nil {
				t.Error(err)
			}
			got <- lease
		}()
		// The waiter is in its room once it has subscribed, and has made
		// the attempt it makes then (its second: a release may have come
		// while it subscribed).
		eventually(t, 5*time.Second, subscribers(1))
		eventually(t, 5*time.Second, func() error {
			if n := commandCalls(t, srv, "set") - sets; n < 2 {
				return fmt.Errorf("the waiter has made %d attempts, want 2", n)
			}
			// Then it checks that no fair waiter queued before it: only
			// then may a release hand it the lock early.
			if n := commandCalls(t, srv, "get") - gets; n < 1 {
				return fmt.Errorf("the waiter has not checked the fair queue")
			}
			return nil
		})
		return got
	}

	// a came from a plain acquisition: its release transfers to b after
	// Redis confirms, and reserves b's successor's fence.
	gotB := waitFor()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-gotB
	if b == nil {
		t.FailNow()
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("b's fence %d is not above a's %d", b.Fence(), a.Fence())
	}

	// b's release hands over early; the deleted key makes the transfer fail.
	gotC := waitFor()
	if err := admin.Del(ctx, lockKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
		t.Fatalf("b.Release = %v, want ErrLost (its key was deleted)", err)
	}
	c := <-gotC
	if c == nil {
		t.FailNow()
	}
	waitDone(t, c.Context(), 5*time.Second, "c, handed a lock that was gone")
	if reason := lostReason(t, c.Context()); reason != lockmw.LostExpired {
		t.Fatalf("c lost its lease with reason %q, want %q", reason, lockmw.LostExpired)
	}
	if c.Fence() <= b.Fence() {
		t.Fatalf("c's fence %d is not above b's %d", c.Fence(), b.Fence())
	}

	// And a confirmed early hand-over keeps the lease alive and renewed.
	d, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	gotE := waitFor()
	if err := d.Release(ctx); err != nil {
		t.Fatal(err)
	}
	e := <-gotE
	gotF := waitFor()
	if err := e.Release(ctx); err != nil { // early: e's fence was reserved
		t.Fatal(err)
	}
	f := <-gotF
	owner, err := admin.Get(ctx, lockKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if f.Context().Err() != nil || owner == "" {
		t.Fatalf("f's lease ended (%v) or the key is gone (%q)", context.Cause(f.Context()), owner)
	}
	if f.Fence() <= e.Fence() {
		t.Fatalf("f's fence %d is not above e's %d", f.Fence(), e.Fence())
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	assertNoLockState(t, admin, key)
}
