package lockmw

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw/internal/store"
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
	token := newToken()
	entry := l.id + " " + token
	// The entry its attempt queued, as redlock_acquire.lua does.
	if err := clients[0].RPush(ctx, keys.queue, entry).Err(); err != nil {
		t.Fatal(err)
	}
	leave := l.policy.(ownPolicy).p.(interface {
		JoinRoom(k store.Key, token, entry string) (leave func())
	}).JoinRoom(keys.Key, token, entry)

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	leave() // the waiter, done after Close
	left, err := clients[0].LRange(ctx, keys.queue, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("wait queue holds %q after the waiter left: a leave after Close was dropped", left)
	}
}
