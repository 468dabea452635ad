package zookeeper

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockmw/lockmw/internal/testkit/zktest"
	"github.com/lockmw/lockmw/lockmw"
)

// At StateExpired every lease of the session ends, with the expiry as its
// cause: not at the next renewal (which finds the node gone) nor, for a
// lease without watchdog, at its deadline. The expiry is forced while the
// Locker is connected and its leases are live: the session is closed from
// another connection with its id and password (Curator's KillSession), so
// the server deletes its nodes at once and the Locker learns on
// reconnecting that its session expired.
//
// The lease WithoutWatchdog is never renewed, so only the event can end it
// with this cause; its deadline is far after the expiry's. Before the
// event path, it ended at its deadline (reason expired, no cause) and
// the watchdog lease at its next renewal (reason expired, no cause).
func TestExpiryEndsLeasesAtTheEvent(t *testing.T) {
	t.Parallel()
	srv := zktest.Start(t)
	// A TTL of seconds: go-zookeeper waits a second before it dials the
	// only server again, and learns of the expiry then.
	cfg := Config{Servers: []string{srv.Addr()}, TickTime: zktest.TickTime, SessionTimeout: 12 * time.Second, ConnectTimeout: 20 * time.Second}
	l, s, err := newLocker(cfg, []lockmw.Option{lockmw.WithTTL(6 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	kept, err := l.Acquire(ctx, "expiry-event-kept")
	if err != nil {
		t.Fatal(err)
	}
	unkept, err := l.Acquire(ctx, "expiry-event-unkept", lockmw.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	before := s.tr.expirations()
	id, passwd := s.tr.credentials()
	if err := zktest.CloseSession(srv.Addr(), id, passwd); err != nil {
		t.Fatal(err)
	}
	for _, lease := range []*lockmw.Lease{kept, unkept} {
		select {
		case <-lease.Context().Done():
		case <-time.After(30 * time.Second):
			t.Fatal("the lease is still live 30s after its session was closed")
		}
		cause := context.Cause(lease.Context())
		var le *lockmw.LostError
		if !errors.As(cause, &le) || le.Reason != lockmw.LostExpired || !errors.Is(cause, zk.ErrSessionExpired) {
			t.Fatalf("lease %s ended with %v, want ErrLost (expired) caused by the session's expiry", lease.Key(), cause)
		}
	}
	// The expiry the leases ended at is the server's, seen once.
	if n := s.tr.expirations() - before; n != 1 {
		t.Fatalf("the store saw %d expirations, want 1", n)
	}
	// The Locker goes on in its new session.
	waitUntil(t, 30*time.Second, "a new session", func() bool { return s.tr.now().id != 0 && s.tr.now().id != id })
	next, err := l.TryAcquire(ctx, "expiry-event-unkept")
	if err != nil {
		t.Fatalf("TryAcquire in the new session: %v", err)
	}
	_ = next.Release(ctx)
}
