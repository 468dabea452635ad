package mysql

import (
	"database/sql"
	"errors"
	"testing"
	"time"
)

// claimKeepLeft is how long the claim row of job is kept still; ok is
// false when there is none.
func claimKeepLeft(t *testing.T, admin *sql.DB, prefix, job string) (time.Duration, bool) {
	t.Helper()
	var us int64
	err := admin.QueryRowContext(tctx(t), "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), keep_until) FROM lockmw_locks_claims WHERE prefix = ? AND job = ?", prefix, job).Scan(&us)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(us) * time.Microsecond, true
}

// A claim row is kept for the keep after every claim and run recorded
// (never shortened), and after a won claim for twice the time since the
// fire claimed before it when that is longer (internal/fireclaim's
// Redis, Expiry).
func TestClaimRowKeep(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	const keep = 2 * time.Hour
	s.claimKeep = keep
	c := s.FireClaims("p:", 10*time.Second)
	t0 := time.UnixMilli(1_700_000_000_000)
	kept := func(step string, want time.Duration) {
		t.Helper()
		left, ok := claimKeepLeft(t, admin, "p:", "j")
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

// The cleanup loop deletes the claim row of a job idle for longer than
// the keep; the row of a job that goes on firing stays, and its fires are
// refused to a second claimant as before.
func TestCleanupDeletesIdleClaimRows(t *testing.T) {
	t.Parallel()
	s0, admin := newTestStore(t)
	ctx := tctx(t)
	const keep = 3 * time.Second
	// A store on the same database whose cleanup runs every 100ms.
	s := &sqlStore{db: s0.db, n: s0.n, retention: Retention, claimKeep: keep, stop: make(chan struct{}), done: make(chan struct{})}
	go s.cleanLoop(100 * time.Millisecond)
	t.Cleanup(func() { _ = s.Close() })
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
		if _, ok := claimKeepLeft(t, admin, "p:", "busy"); !ok {
			t.Fatalf("the cleanup deleted the claim row of the busy job (claim %d)", i)
		}
		if got, err := c.Claim(ctx, "busy", at, "host-b"); err != nil || got.Won {
			t.Fatalf("second claim of the busy job's fire %d: %+v, %v; want refused", i, got, err)
		}
		if _, ok := claimKeepLeft(t, admin, "p:", "idle"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle job's claim row is still there after %d claims of the busy job", i)
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
