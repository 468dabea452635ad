package lockmw

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/redistest"
)

// startRedlockOf3 starts three masters and a Redlock Locker on them.
func startRedlockOf3(t *testing.T) ([]*redistest.Server, []redis.UniversalClient, *Locker) {
	t.Helper()
	masters := redistest.StartN(t, 3)
	clients := make([]redis.UniversalClient, len(masters))
	for i, m := range masters {
		clients[i] = m.Client(t)
	}
	l, err := NewRedlock(clients)
	if err != nil {
		t.Fatal(err)
	}
	return masters, clients, l
}

// TestRedlockLeaveAfterClose: a Redlock waiter that is still inside an
// attempt when Close has finished waiting for it (a loaded host, a master
// slower than the Locker's TTL) leaves the first master's wait queue all
// the same, on the master's client: the Locker's sender there has stopped.
func TestRedlockLeaveAfterClose(t *testing.T) {
	_, clients, l := startRedlockOf3(t)
	ctx := context.Background()
	keys := newLockRef(l.cfg.prefix, "redlock:leave-after-close")
	w := &waiter{token: newToken(), wake: make(chan struct{}, 1)}
	entry := l.id + " " + w.token
	// The entry its attempt queued, as redlock_acquire.lua does.
	if err := clients[0].RPush(ctx, keys.queue, entry).Err(); err != nil {
		t.Fatal(err)
	}
	l.roomsMu.Lock()
	r := l.join(keys.Key)
	r.fair[w.token] = w
	l.roomsMu.Unlock()

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l.leaveWakeQueue(r, w, entry, true) // the waiter, done after Close
	left, err := clients[0].LRange(ctx, keys.queue, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("wait queue holds %q after the waiter left: a leave after Close was dropped", left)
	}
}

// TestRedlockRollbackWakesQueuedWaiter: an attempt that took the lock on
// the first master and lost the quorum gives it back there; a waiter that
// queued behind it meanwhile is woken by that give-back. Before, the
// rollback deleted the lock without a wake, and the waiter slept until
// its timer (the holder's TTL): the fleet check saw Redlock waiters idle
// for a TTL with the lock free when TryAcquire calls lost races.
func TestRedlockRollbackWakesQueuedWaiter(t *testing.T) {
	masters, clients, l := startRedlockOf3(t)
	defer l.Close()
	b := l.st.(*redlockStore)
	ctx := context.Background()
	k := newLockRef(l.cfg.prefix, "redlock:rollback-wakes")
	// The losing attempt's lock on the first master, and a waiter of
	// another Locker ("other") queued behind it there.
	if err := clients[0].Set(ctx, k.lock, "loser", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := clients[0].RPush(ctx, k.queue, "other w1").Err(); err != nil {
		t.Fatal(err)
	}
	sub := masters[0].Client(t).Subscribe(ctx, k.grants+"other")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription is in place
		t.Fatal(err)
	}

	b.rollback(k, "loser", time.Minute, []bool{true, false, false}, []bool{false, true, true})

	select {
	case m := <-sub.Channel():
		if m.Payload != "w1" {
			t.Fatalf("woken %q, want w1", m.Payload)
		}
	case <-time.After(10 * time.Second): // a stuck-guard: the wake comes with the rollback's answer
		left, _ := clients[0].LRange(ctx, k.queue, 0, -1).Result()
		t.Fatalf("the rollback woke nobody; the wait queue holds %q", left)
	}
	if n, err := clients[0].Exists(ctx, k.lock).Result(); err != nil || n != 0 {
		t.Fatalf("the lock is still on the first master (exists %d, %v)", n, err)
	}
}
