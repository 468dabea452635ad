package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// claimKeepLeft is how long the claim row of job is kept still; ok is
// false when there is none.
func claimKeepLeft(t *testing.T, ctx context.Context, pool *pgxpool.Pool, prefix, job string) (time.Duration, bool) {
	t.Helper()
	var ms int64
	err := pool.QueryRow(ctx, "SELECT (extract(epoch FROM keep_until - clock_timestamp()) * 1000)::bigint FROM lockmw_locks_claims WHERE prefix = $1 AND job = $2", prefix, job).Scan(&ms)
	if err == pgx.ErrNoRows {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ms) * time.Millisecond, true
}

// A claim row is kept for the keep after every claim and run recorded
// (never shortened), and after a won claim for twice the time since the
// fire claimed before it when that is longer (internal/fireclaim's
// Redis, Expiry).
func TestClaimRowKeep(t *testing.T) {
	ctx, pool, s := startStore(t)
	const keep = 2 * time.Hour
	s.claimKeep = keep
	c := s.FireClaims("p:", 10*time.Second)
	t0 := time.UnixMilli(1_700_000_000_000)
	kept := func(step string, want time.Duration) {
		t.Helper()
		left, ok := claimKeepLeft(t, ctx, pool, "p:", "j")
		if !ok || left < want-time.Minute || left > want {
			t.Errorf("after %s: the row is kept for %v (exists %v), want %v", step, left, ok, want)
		}
	}
	claim := func(at time.Time, want bool) {
		t.Helper()
		got, err := c.Claim(ctx, "j", at, "host")
		if err != nil || got.Won != want {
			t.Fatalf("claim of %v: %+v, %v; want won %v", at, got, err, want)
		}
	}
	if err := c.Running(ctx, "j", t0, "host"); err != nil {
		t.Fatal(err)
	}
	kept("a run recorded on no row", keep)
	claim(t0, true)
	kept("a won claim", keep)
	claim(t0.Add(3*time.Hour), true) // a job firing every 3 hours
	kept("a won claim 3h after the last", 6*time.Hour)
	claim(t0.Add(3*time.Hour), false)
	kept("a refused claim", 6*time.Hour)
	if err := c.Running(ctx, "j", t0.Add(3*time.Hour), "host"); err != nil {
		t.Fatal(err)
	}
	kept("a run recorded", 6*time.Hour)
}

// The sweeper deletes the claim row of a job idle for longer than the
// keep; the row of a job that goes on firing stays, and its fires are
// refused to a second claimant as before.
func TestSweepDeletesIdleClaimRows(t *testing.T) {
	ctx, pool, s := startStore(t)
	const keep = 3 * time.Second
	s.claimKeep = keep
	c := s.FireClaims("p:", 10*time.Second)
	t0 := time.UnixMilli(1_700_000_000_000)
	if got, err := c.Claim(ctx, "idle", t0, "host-a"); err != nil || !got.Won {
		t.Fatalf("claim of the idle job: %+v, %v", got, err)
	}
	if err := c.Running(ctx, "idle", t0, "host-a"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for i := 1; ; i++ {
		// The busy job fires every millisecond of fire time, and its
		// run is recorded.
		at := t0.Add(time.Duration(i) * time.Millisecond)
		if got, err := c.Claim(ctx, "busy", at, "host-a"); err != nil || !got.Won {
			t.Fatalf("claim %d of the busy job: %+v, %v", i, got, err)
		}
		if err := c.Running(ctx, "busy", at, "host-a"); err != nil {
			t.Fatal(err)
		}
		s.sweepOnce(ctx)
		if _, ok := claimKeepLeft(t, ctx, pool, "p:", "busy"); !ok {
			t.Fatalf("sweep %d deleted the claim row of the busy job", i)
		}
		if got, err := c.Claim(ctx, "busy", at, "host-b"); err != nil || got.Won {
			t.Fatalf("second claim of the busy job's fire %d: %+v, %v; want refused", i, got, err)
		}
		if _, ok := claimKeepLeft(t, ctx, pool, "p:", "idle"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle job's claim row is still there after %d sweeps", i)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Gone: nothing of the idle job is left, and its next claim starts
	// anew.
	if fire, by, err := c.Runner(ctx, "idle"); err != nil || by != "" {
		t.Fatalf("the idle job's run after its row went: %v %q, %v", fire, by, err)
	}
	if got, err := c.Claim(ctx, "idle", t0.Add(time.Hour), "host-b"); err != nil || !got.Won || got.By != "" {
		t.Fatalf("claim of the idle job after its row went: %+v, %v", got, err)
	}
}

// Rows of locks whose prefix and key join to the same text are two rows:
// a lease of prefix "a", key "bc" does not hold prefix "ab", key "c", and
// a waiter queued for one is not before the other's acquisitions.
func TestRowNamesOfPrefixAndKey(t *testing.T) {
	ctx, _, s := startStore(t)
	a, b := store.Key{Prefix: "a", Name: "bc"}, store.Key{Prefix: "ab", Name: "c"}
	if r, err := s.Acquire(ctx, a, "ta", time.Minute, true); err != nil || !r.Acquired {
		t.Fatalf("acquire %+v: %+v, %v", a, r, err)
	}
	if r, err := s.Enqueue(ctx, a, "waiter", time.Minute, false); err != nil || r.Acquired {
		t.Fatalf("enqueue behind %+v: %+v, %v; want queued", a, r, err)
	}
	if r, err := s.Acquire(ctx, b, "tb", time.Minute, true); err != nil || !r.Acquired {
		t.Fatalf("acquire %+v while %+v is held and has a waiter: %+v, %v; want acquired", b, a, r, err)
	}
	if o, err := s.Release(ctx, b, "tb"); err != nil || o != store.Owned {
		t.Fatalf("release %+v: %v, %v", b, o, err)
	}
	if o, err := s.Release(ctx, a, "ta"); err != nil || o != store.Owned {
		t.Fatalf("release %+v: %v, %v", a, o, err)
	}
}
