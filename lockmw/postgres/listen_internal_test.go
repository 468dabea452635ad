package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// The listening connection lives while the Locker has waiters: every
// NOTIFY in a database signals every backend listening there, so a
// Locker that no longer waits closes its connection after an idle period,
// and its next waiter opens one again.

// listeners counts the server's listening backends: those whose last
// statement was a LISTEN or the listener's ping.
func listeners(t *testing.T, ctx context.Context, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND (query LIKE 'LISTEN %' OR query = '-- ping')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestListenerClosesWithoutWaiters(t *testing.T) {
	ctx, pool, s := startStore(t)
	s.lis.idle = 100 * time.Millisecond
	k := store.Key{Prefix: "lockmw:", Name: "linger"}

	_, w := holdAndQueue(t, ctx, s, k)
	listening(t, s, "w")
	if n := listeners(t, ctx, pool); n != 1 {
		t.Fatalf("%d listening backends while w waits, want 1", n)
	}
	if _, _, fence := release(t, ctx, pool, s, k, "h"); fence == 0 {
		t.Fatal("h's release handed nothing to w")
	}
	if r, err := s.WaitTurn(ctx, k, "w", handTTL, w); err != nil || !r.Acquired {
		t.Fatalf("w's WaitTurn after h's release: %+v, %v; want the grant", r, err)
	}

	// No waiter left: the connection closes after an idle period.
	lockmwtest.Eventually(t, 50*s.lis.idle, "the Locker stops listening with no waiter left", func() bool {
		return listeners(t, ctx, pool) == 0
	})
	s.lis.mu.Lock()
	running := s.lis.running
	s.lis.mu.Unlock()
	if running {
		t.Fatal("the listener runs with its connection closed")
	}

	// The next waiter listens again, and hears its grant.
	x, err := s.Enqueue(ctx, k, "x", handTTL, true)
	if err != nil || x.Acquired {
		t.Fatalf("x's enqueue behind w: %+v, %v", x, err)
	}
	listening(t, s, "x")
	if _, _, fence := release(t, ctx, pool, s, k, "w"); fence == 0 {
		t.Fatal("w's release handed nothing to x")
	}
	if r, err := s.WaitTurn(ctx, k, "x", handTTL, x); err != nil || !r.Acquired {
		t.Fatalf("x's WaitTurn after w's release: %+v, %v; want the grant", r, err)
	}
}
