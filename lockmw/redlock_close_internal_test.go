package lockmw

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
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
	p := l.policy.(*wakePolicy)
	p.roomsMu.Lock()
	r := p.join(keys.Key)
	r.fair[w.token] = w
	p.roomsMu.Unlock()

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	p.leaveWakeQueue(r, w, entry, true) // the waiter, done after Close
	left, err := clients[0].LRange(ctx, keys.queue, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("wait queue holds %q after the waiter left: a leave after Close was dropped", left)
	}
}
