package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/sqlsuite"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// claimKeepLeft reads, on pool within ctx, how long the claim row of job
// is kept still (sqlsuite.KeepLeft).
func claimKeepLeft(ctx context.Context, pool *pgxpool.Pool) sqlsuite.KeepLeft {
	return func(t testing.TB, prefix, job string) (time.Duration, bool) {
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
}

// A claim row is kept for the keep after every claim and run recorded
// (never shortened), and after a won claim for twice the time since the
// fire claimed before it when that is longer (sqlsuite.ClaimRowKeep).
func TestClaimRowKeep(t *testing.T) {
	ctx, pool, s := startStore(t)
	sqlsuite.ClaimRowKeep(t, ctx, s.FireClaims(sqlsuite.Prefix, 10*time.Second, sqlsuite.RowKeep), claimKeepLeft(ctx, pool))
}

// The sweeper deletes the claim row of a job idle for longer than the
// keep; the row of a job that goes on firing stays, and its fires are
// refused to a second claimant as before (sqlsuite.IdleClaimRowsDeleted).
func TestSweepDeletesIdleClaimRows(t *testing.T) {
	ctx, pool, s := startStore(t)
	sqlsuite.IdleClaimRowsDeleted(t, ctx, s.FireClaims(sqlsuite.Prefix, 10*time.Second, sqlsuite.IdleKeep), claimKeepLeft(ctx, pool), func() { s.sweepOnce(ctx) })
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
