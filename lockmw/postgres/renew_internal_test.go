package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/internal/testkit/pgtest"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// startStore starts a server with lockmw's tables and returns a context
// bounded for the test, a pool and a store on it, closed at cleanup.
func startStore(t *testing.T) (context.Context, *pgxpool.Pool, *pgStore) {
	return startStoreWith(t, nil)
}

// startStoreWith is startStore with the pool's config given to set first
// (nil: as parsed from the server's URL).
func startStoreWith(t *testing.T, set func(*pgxpool.Config)) (context.Context, *pgxpool.Pool, *pgStore) {
	t.Helper()
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cfg, err := pgxpool.ParseConfig(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := CreateTable(ctx, pool); err != nil {
		t.Fatal(err)
	}
	n, _ := Schema{}.names()
	s := newStore(pool, n)
	t.Cleanup(func() { _ = s.Close() })
	return ctx, pool, s
}

// TestRenewalNeverExtendsAnother: a renewal that reaches the database
// after its lease expired and another holder took the row extends nothing
// (River issue 197: an upsert renewal extended the next holder's lease),
// and a renewal after a release inserts no row. The same late renewal
// written as River's upsert does extend the other holder: the statement
// shape is what this test is about.
func TestRenewalNeverExtendsAnother(t *testing.T) {
	ctx, pool, s := startStore(t)
	k := store.Key{Prefix: "lockmw:", Name: "river197"}
	expiry := func() (string, time.Time) {
		var tok string
		var at time.Time
		if err := pool.QueryRow(ctx, "SELECT token, expires_at FROM lockmw_locks WHERE name = $1", name(k)).Scan(&tok, &at); err != nil {
			t.Fatal(err)
		}
		return tok, at
	}

	// A TTL of a second: the store bounds each statement by a share of the
	// TTL, which for a shorter one can time out on a loaded machine.
	if r, err := s.Acquire(ctx, k, "a", time.Second, true); err != nil || !r.Acquired {
		t.Fatalf("a's acquisition: %+v, %v", r, err)
	}
	waitExpired(t, pool, 1, 0) // a's row expires by the database's clock
	rb, err := s.Acquire(ctx, k, "b", 10*time.Second, true)
	if err != nil || !rb.Acquired {
		t.Fatalf("b's acquisition after a's expiry: %+v, %v", rb, err)
	}
	_, before := expiry()
	res := s.Renew(ctx, []store.RenewRequest{{Key: k, Token: "a", TTL: time.Hour}})
	if res[0].Err != nil || res[0].Ownership != store.Taken {
		t.Fatalf("a's late renewal: %+v, want Taken", res[0])
	}
	if tok, after := expiry(); tok != "b" || !after.Equal(before) {
		t.Fatalf("after a's late renewal the row is %s's, expiring at %v; want b's, unchanged at %v", tok, after, before)
	}

	// River's shape: an upsert keyed by name, setting the expiry whoever
	// holds the row. It extends b's lease by a's hand.
	if _, err := pool.Exec(ctx, `INSERT INTO lockmw_locks (name, token, fence, expires_at) VALUES ($1, 'a', 0, clock_timestamp() + interval '1 hour')
		ON CONFLICT (name) DO UPDATE SET expires_at = excluded.expires_at`, name(k)); err != nil {
		t.Fatal(err)
	}
	if tok, after := expiry(); tok != "b" || !after.After(before.Add(30*time.Minute)) {
		t.Fatalf("the upsert renewal left b's row at %v (token %s): the bug class did not show", after, tok)
	}

	// After a release, a renewal inserts nothing.
	if o, err := s.Release(ctx, k, "b"); err != nil || o != store.Owned {
		t.Fatalf("b's release: %v, %v", o, err)
	}
	res = s.Renew(ctx, []store.RenewRequest{{Key: k, Token: "b", TTL: time.Hour}, {Key: k, Token: "a", TTL: time.Hour}})
	for i, r := range res {
		if r.Err != nil || r.Ownership != store.Missing {
			t.Fatalf("renewal %d after the release: %+v, want Missing", i, r)
		}
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM lockmw_locks").Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d rows after renewals of a released lock (%v), want 0", rows, err)
	}
}

// TestSweepDeletesExpiredRows: the rows of holders and waiters that never
// released go at the next sweep; live rows stay.
func TestSweepDeletesExpiredRows(t *testing.T) {
	ctx, pool, s := startStore(t)
	// The short TTL is a second, not less: the store bounds each statement
	// by a share of the TTL, and a 100 ms TTL's bound (80 ms) timed the
	// acquisition out on a loaded machine.
	for i, ttl := range []time.Duration{time.Second, time.Minute} {
		k := store.Key{Prefix: "p:", Name: string(rune('a' + i))}
		if r, err := s.Acquire(ctx, k, "t", ttl, false); err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
		if r, err := s.Enqueue(ctx, k, "w", ttl, false); err != nil || r.Acquired {
			t.Fatal(r, err)
		}
	}
	waitExpired(t, pool, 1, 1)
	s.sweepOnce(ctx)
	var leases, queued int
	if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM lockmw_locks), (SELECT count(*) FROM lockmw_locks_queue)").Scan(&leases, &queued); err != nil {
		t.Fatal(err)
	}
	if leases != 1 || queued != 1 {
		t.Fatalf("after the sweep: %d lease rows, %d queue rows; want the live one of each", leases, queued)
	}
}

// waitExpired waits until leases rows of lockmw_locks and queued rows of
// lockmw_locks_queue have expired by the database's clock (a bound for a
// stuck database, not a speed check).
func waitExpired(t *testing.T, pool *pgxpool.Pool, leases, queued int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var l, q int
		err := pool.QueryRow(context.Background(), `SELECT
	(SELECT count(*) FROM lockmw_locks WHERE expires_at <= clock_timestamp()),
	(SELECT count(*) FROM lockmw_locks_queue WHERE expires_at <= clock_timestamp())`).Scan(&l, &q)
		if err == nil && l >= leases && q >= queued {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %d lease rows and %d queue rows expired (%v); want %d and %d", l, q, err, leases, queued)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
