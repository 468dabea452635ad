package lockmw_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// These tests follow the fair waiter that is first in line: a hand-over
// moves it out of the queue's list into the lock's value, so that the new
// holder's Locker knows who comes next and, when that waiter is its own,
// hands the lock on before Redis confirms it.

// waitFair starts a fair Acquire of key on l in the background and waits
// until key's queue (list plus the one first in line) has grown to queued.
func waitFair(t *testing.T, admin *redis.Client, l *lockmw.Locker, ctx context.Context, key string, queued int, opts ...lockmw.AcquireOption) chan acquired {
	t.Helper()
	got := make(chan acquired, 1)
	go func() {
		lease, err := l.Acquire(ctx, key, append([]lockmw.AcquireOption{lockmw.Fair()}, opts...)...)
		got <- acquired{lease, err}
	}()
	eventually(t, 10*time.Second, func() error {
		if n := fairQueued(t, admin, key); n != queued {
			return fmt.Errorf("%d fair waiters queued, want %d", n, queued)
		}
		return nil
	})
	return got
}

type acquired struct {
	lease *lockmw.Lease
	err   error
}

// fairQueued counts key's queued fair waiters: the list, and the one first
// in line kept in the lock's value (an entry has two spaces).
func fairQueued(t *testing.T, admin *redis.Client, key string) int {
	t.Helper()
	ctx := context.Background()
	n, err := admin.LLen(ctx, queueKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return int(n) + firstInLine(t, admin, key)
}

// firstInLine is 1 when the lock's value names the waiter first in line.
func firstInLine(t *testing.T, admin *redis.Client, key string) int {
	t.Helper()
	v, err := admin.Get(context.Background(), lockKey(key)).Result()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, entry, _ := strings.Cut(v, "+"); strings.Count(entry, " ") == 2 {
		return 1
	}
	return 0
}

func take(t *testing.T, c chan acquired, who string) *lockmw.Lease {
	t.Helper()
	select {
	case a := <-c:
		if a.err != nil {
			t.Fatalf("%s: %v", who, a.err)
		}
		return a.lease
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not get the lock", who)
	}
	return nil
}

// TestFairEarlyHandOverIsConfirmedOrCancelled hands a fair lock along
// waiters of one Locker. The first release is confirmed by Redis before the
// next waiter starts; it tells the new holder's Locker who is next. The
// second hand-over starts that waiter at once. With the key deleted behind
// the holder's back, the hand-over finds it gone: the waiter's lease,
// already returned, must end with ErrLost, as must the holder's Release.
// (Without the early hand-over the waiter would not get a lease at all
// before the release failed.)
func TestFairEarlyHandOverIsConfirmedOrCancelled(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const key = "fair:early"
	l := newLocker(t, srv)

	a, err := l.Acquire(ctx, key, lockmw.Fair())
	if err != nil {
		t.Fatal(err)
	}
	gotB := waitFair(t, admin, l, ctx, key, 1)
	gotC := waitFair(t, admin, l, ctx, key, 2)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := take(t, gotB, "b")
	if b.Fence() <= a.Fence() {
		t.Fatalf("b's fence %d is not above a's %d", b.Fence(), a.Fence())
	}
	if n := firstInLine(t, admin, key); n != 1 {
		t.Fatal("after the hand-over to b, the lock's value does not name c as next")
	}

	if err := admin.Del(ctx, lockKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
		t.Fatalf("b.Release = %v, want ErrLost (its key was deleted)", err)
	}
	c := take(t, gotC, "c")
	waitDone(t, c.Context(), 5*time.Second, "c, handed a lock that was gone")
	if reason := lostReason(t, c.Context()); reason != lockmw.LostExpired {
		t.Fatalf("c lost its lease with reason %q, want %q", reason, lockmw.LostExpired)
	}
	if c.Fence() <= b.Fence() {
		t.Fatalf("c's fence %d is not above b's %d", c.Fence(), b.Fence())
	}
	if err := c.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
		t.Fatalf("c.Release = %v, want ErrLost", err)
	}

	// A confirmed early hand-over keeps the lease alive, renewed, and in
	// Redis, along a chain of waiters.
	d, err := l.Acquire(ctx, key, lockmw.Fair())
	if err != nil {
		t.Fatal(err)
	}
	const chain = 4
	gots := make([]chan acquired, chain)
	for i := range gots {
		gots[i] = waitFair(t, admin, l, ctx, key, i+1)
	}
	prev := d
	for i, got := range gots {
		if err := prev.Release(ctx); err != nil {
			t.Fatal(err)
		}
		next := take(t, got, fmt.Sprintf("waiter %d", i))
		if next.Fence() <= prev.Fence() {
			t.Fatalf("waiter %d's fence %d is not above %d", i, next.Fence(), prev.Fence())
		}
		eventually(t, 5*time.Second, func() error {
			if next.Context().Err() != nil {
				return fmt.Errorf("waiter %d's lease ended: %v", i, context.Cause(next.Context()))
			}
			ttl, err := admin.PTTL(ctx, lockKey(key)).Result()
			if err != nil {
				return err
			}
			if ttl <= 0 {
				return fmt.Errorf("the lock key has TTL %v", ttl)
			}
			return nil
		})
		prev = next
	}
	if err := prev.Release(ctx); err != nil {
		t.Fatal(err)
	}
	assertNoLockState(t, admin, key)
}

// TestFairFirstInLineGivesUp has the waiter kept in the lock's value give
// up: the waiter behind it takes its place, and gets the lock on release.
func TestFairFirstInLineGivesUp(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const key = "fair:first-gives-up"
	lockers := []*lockmw.Locker{newLocker(t, srv), newLocker(t, srv), newLocker(t, srv), newLocker(t, srv)}

	a, err := lockers[0].Acquire(ctx, key, lockmw.Fair())
	if err != nil {
		t.Fatal(err)
	}
	gotB := waitFair(t, admin, lockers[1], ctx, key, 1)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gotC := waitFair(t, admin, lockers[2], cctx, key, 2)
	gotD := waitFair(t, admin, lockers[3], ctx, key, 3)

	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := take(t, gotB, "b")
	if n := firstInLine(t, admin, key); n != 1 {
		t.Fatal("after the hand-over to b, the lock's value does not name c as next")
	}

	cancel()
	select {
	case r := <-gotC:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("c's Acquire = %v, want context.Canceled", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("c's cancelled Acquire did not return")
	}
	// d takes c's place in the lock's value; the list is empty.
	eventually(t, 5*time.Second, func() error {
		if n := fairQueued(t, admin, key); n != 1 || firstInLine(t, admin, key) != 1 {
			return fmt.Errorf("%d fair waiters queued, want 1 (d, first in line)", n)
		}
		return nil
	})

	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	d := take(t, gotD, "d")
	if d.Fence() <= b.Fence() {
		t.Fatalf("d's fence %d is not above b's %d", d.Fence(), b.Fence())
	}
	if err := d.Release(ctx); err != nil {
		t.Fatal(err)
	}
	assertNoLockState(t, admin, key)
}

// TestFairFirstInLineOutlivesAKilledHolder kills the holder process while
// the lock's value names the next waiter: the lock expires with that entry,
// and the waiter, finding itself in neither the list nor the value when it
// polls, queues again. Both waiters still get the lock.
func TestFairFirstInLineOutlivesAKilledHolder(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const key = "fair:killed-holder"
	const ttl = 2 * time.Second
	lockers := []*lockmw.Locker{
		newLocker(t, srv, lockmw.WithTTL(ttl)), newLocker(t, srv, lockmw.WithTTL(ttl)), newLocker(t, srv, lockmw.WithTTL(ttl)),
	}

	a, err := lockers[0].Acquire(ctx, key, lockmw.Fair())
	if err != nil {
		t.Fatal(err)
	}
	holder, held := startFairHolderProcess(t, srv, key, ttl)
	eventually(t, 10*time.Second, func() error {
		if n := fairQueued(t, admin, key); n != 1 {
			return fmt.Errorf("%d fair waiters queued, want 1 (the holder process)", n)
		}
		return nil
	})
	gotB := waitFair(t, admin, lockers[1], ctx, key, 2, lockmw.WithWait(30*time.Second))
	gotC := waitFair(t, admin, lockers[2], ctx, key, 3, lockmw.WithWait(30*time.Second))

	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the holder process did not get the lock")
	}
	if n := firstInLine(t, admin, key); n != 1 {
		t.Fatal("the holder process's lock does not name b as next")
	}
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()

	// b and c each get the lock, and hand it on.
	for range 2 {
		var r acquired
		select {
		case r = <-gotB:
		case r = <-gotC:
		case <-time.After(30 * time.Second):
			t.Fatal("a waiter is stuck behind the killed holder")
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := r.lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	assertNoLockState(t, admin, key)
}

// startFairHolderProcess runs a separate process that waits for key with
// Fair and then holds it; held is closed once it holds it.
func startFairHolderProcess(t *testing.T, srv *redistest.Server, key string, ttl time.Duration) (*exec.Cmd, chan struct{}) {
	t.Helper()
	cmd, out := startTestProcess(t, holderEnv, fmt.Sprintf("%s %s %s fair", srv.Addr(), key, ttl))
	held := make(chan struct{})
	go func() {
		line, err := out.ReadString('\n')
		if err == nil && strings.HasPrefix(line, "held ") {
			close(held)
		}
	}()
	return cmd, held
}

// TestFairFirstInLinePollsInPlace lets the waiter kept in the lock's value
// poll (as queued waiters do when the holder's TTL would run out) while the
// holder's watchdog keeps the lock: the waiter must see that it is first in
// line and not queue a second time.
func TestFairFirstInLinePollsInPlace(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const key = "fair:first-polls"
	const ttl = time.Second
	lockers := []*lockmw.Locker{newLocker(t, srv, lockmw.WithTTL(ttl)), newLocker(t, srv, lockmw.WithTTL(ttl))}

	a, err := lockers[0].Acquire(ctx, key, lockmw.Fair())
	if err != nil {
		t.Fatal(err)
	}
	gotB := waitFair(t, admin, lockers[0], ctx, key, 1)
	gotC := waitFair(t, admin, lockers[1], ctx, key, 2)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := take(t, gotB, "b")

	// Each poll runs PTTL (fair.lua); renewals do not.
	before := commandCalls(t, srv, "pttl")
	eventually(t, 10*time.Second, func() error {
		if n := commandCalls(t, srv, "pttl") - before; n < 2 {
			return fmt.Errorf("c has polled %d times, want 2", n)
		}
		return nil
	})
	if n, first := fairQueued(t, admin, key), firstInLine(t, admin, key); n != 1 || first != 1 {
		t.Fatalf("%d fair waiters queued (%d in the lock's value), want just c, first in line", n, first)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c := take(t, gotC, "c")
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	assertNoLockState(t, admin, key)
}

// commandCalls reads how many times srv has run cmd (lower case).
func commandCalls(t *testing.T, srv *redistest.Server, cmd string) int64 {
	t.Helper()
	var calls int64
	if v := srv.Info(t, "commandstats")["cmdstat_"+cmd]; v != "" {
		if _, err := fmt.Sscanf(v, "calls=%d", &calls); err != nil {
			t.Fatalf("cmdstat_%s = %q: %v", cmd, v, err)
		}
	}
	return calls
}

// TestAcquireGivesBackALockWithoutAFence breaks the fence counter (a value
// INCR refuses): on one server an acquisition sets the lock and draws the
// fence in two commands, so when the draw fails the lock must be given
// back at once, not left to expire, and the error must say Redis failed.
func TestAcquireGivesBackALockWithoutAFence(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	const key = "fence:broken"
	l := newLocker(t, srv, lockmw.WithTTL(time.Minute))

	if err := admin.Set(ctx, lockKey(key)+":fence", "not a number", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := l.TryAcquire(ctx, key)
	if !errors.Is(err, lockmw.ErrUnavailable) || errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("TryAcquire = %v, want ErrUnavailable", err)
	}
	if n, err := admin.Exists(ctx, lockKey(key)).Result(); err != nil || n != 0 {
		t.Fatalf("the lock key is left (%d, %v): it would block others for its whole TTL", n, err)
	}

	// Repaired, the counter goes on (from a value above any seed drawn from
	// the server clock, so it is counted on, not seeded again).
	if err := admin.Set(ctx, lockKey(key)+":fence", "4000000000000041", 0).Err(); err != nil {
		t.Fatal(err)
	}
	lease, err := l.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if lease.Fence() != 4000000000000042 {
		t.Fatalf("fence %d, want 4000000000000042", lease.Fence())
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
