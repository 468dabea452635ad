package postgres_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/cronsuite"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/ginsuite"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/postgres"
)

// ginlock's store-independent behaviour (internal/testkit/lockmwtest/ginsuite)
// on PostgreSQL: ginlock works unchanged on the store's Locker.
func TestGinlockSuitePostgres(t *testing.T) {
	srv := startServer(t)
	ginsuite.Run(t, ginsuite.Env{
		Name: "postgres",
		NewLocker: func(t testing.TB, opts ...lockmw.Option) *lockmw.Locker {
			t.Helper()
			l, err := postgres.New(newPool(t, srv.URL()), opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			return l
		},
		Lose: func(prefix, key string) error {
			_, err := srv.TryExec("DELETE FROM lockmw_locks WHERE name = " + quote(postgres.RowName(prefix, key)))
			return err
		},
		LeaseTTL: func(t testing.TB, prefix, key string) time.Duration {
			t.Helper()
			out := srv.Exec(t, "SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint FROM lockmw_locks WHERE name = "+quote(postgres.RowName(prefix, key)))
			ms, err := strconv.ParseInt(out, 10, 64)
			if err != nil {
				t.Fatalf("no lease row for %s%s: %q", prefix, key, out)
			}
			return time.Duration(ms) * time.Millisecond
		},
		ShortTTL:       time.Second,
		KnowsHolderTTL: true,
	})
}

// cronlock's store-independent suite (internal/testkit/lockmwtest/cronsuite) on
// PostgreSQL: Singleton, and the Scheduler claiming its fires in the
// claims table (no Redis client).
func TestCronlockPostgres(t *testing.T) {
	srv := startServer(t)
	cronsuite.Run(t, cronsuite.Env{
		NewLocker: func(t testing.TB, opts ...lockmw.Option) *lockmw.Locker {
			return newLocker(t, srv.URL(), opts...)
		},
		TTL: 2 * time.Second,
		Lose: func(t testing.TB, key string) {
			srv.Exec(t, "DELETE FROM lockmw_locks WHERE name = "+quote(postgres.RowName(lockmw.DefaultPrefix, key)))
		},
	})
}

// With the server down, a claim fails within the Locker's TTL instead of
// hanging: the fire is skipped, never run unguarded.
func TestFireClaimPostgresDown(t *testing.T) {
	srv := startServer(t)
	l := newLocker(t, srv.URL())
	claims := lockmw.FireClaimsOf(l, fireclaim.Inside{}).Own()
	at := time.UnixMilli(1_700_000_000_000)
	if c, err := claims.Claim(bg(t), "job", at, "host-a"); err != nil || !c.Won {
		t.Fatalf("first claim: %+v, %v", c, err)
	}
	if c, err := claims.Claim(bg(t), "job", at, "host-b"); err != nil || c.Won || c.By != "host-a" || !c.Fire.Equal(at) {
		t.Fatalf("second claim of the fire: %+v, %v; want refused by host-a", c, err)
	}
	srv.Kill(t)
	start := time.Now()
	if _, err := claims.Claim(context.Background(), "job", at.Add(time.Minute), "host-a"); err == nil {
		t.Fatal("a claim with the server down succeeded")
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the claim took %v", d)
	}
}
