package redisstore

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// testPrefix is the key prefix of the stores these tests bind (lockmw's
// DefaultPrefix).
const testPrefix = "lockmw:"

// startRedlock starts three masters and a Redlock store on them, bound as
// NewRedlock binds it to its Locker; it is closed when the test ends.
func startRedlock(t *testing.T) ([]*redistest.Server, []redis.UniversalClient, *Redlock) {
	t.Helper()
	masters := redistest.StartN(t, 3)
	clients := make([]redis.UniversalClient, len(masters))
	for i, m := range masters {
		clients[i] = m.Client(t)
	}
	b := NewRedlock(clients)
	b.events = Events{Woken: func(store.Key, string) {}} // (a Locker's policy sets it)
	closing := make(chan struct{})
	b.Bind(Config{
		Self:      "self",
		Prefix:    testPrefix,
		Retention: 24 * time.Hour,
		TTL:       10 * time.Second,
		Logger:    slog.Default(),
		Closing:   closing,
	})
	t.Cleanup(func() {
		close(closing)
		_ = b.Close()
	})
	return masters, clients, b
}

// TestRedlockRollbackWakesQueuedWaiter: an attempt that took the lock on
// the first master and lost the quorum gives it back there; a waiter that
// queued behind it meanwhile is woken by that give-back. Before, the
// rollback deleted the lock without a wake, and the waiter slept until
// its timer (the holder's TTL): the fleet check saw Redlock waiters idle
// for a TTL with the lock free when TryAcquire calls lost races.
func TestRedlockRollbackWakesQueuedWaiter(t *testing.T) {
	masters, clients, b := startRedlock(t)
	ctx := context.Background()
	k := newLockRef(testPrefix, "redlock:rollback-wakes")
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
