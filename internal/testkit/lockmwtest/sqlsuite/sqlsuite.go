// Package sqlsuite holds the tests of what a SQL store keeps in its tables
// that read the same on every SQL store (PostgreSQL, MariaDB): the rows of
// prefix and key, and the fire-claim rows' keep and clean-up. Each store's
// tests call these functions with how to read its own tables (KeepLeft);
// the table reads and the store set-up stay in the store's tests, as their
// SQL differs.
package sqlsuite

import (
	"context"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw"
)

// KeepLeft is how long the claim row of job under prefix is kept still;
// ok is false when there is none.
type KeepLeft func(t testing.TB, prefix, job string) (left time.Duration, ok bool)

// PrefixAndKeyNameTheirOwnRow checks two Lockers on one table, with
// prefixes "a" and "ab" (newLocker returns a Locker on the store with
// opts): the key "bc" of one and the key "c" of the other are two locks
// (prefix and key joined as they are would both be "abc"), and so are
// their jobs' fire claims. released runs after both leases are released
// and before the claims, for what a store checks of its rows then; nil for
// nothing.
func PrefixAndKeyNameTheirOwnRow(t *testing.T, ctx context.Context, newLocker func(opts ...lockmw.Option) *lockmw.Locker, released func()) {
	t.Helper()
	la := newLocker(lockmw.WithPrefix("a"))
	lb := newLocker(lockmw.WithPrefix("ab"))
	a, err := la.TryAcquire(ctx, "bc")
	if err != nil {
		t.Fatalf("prefix a, key bc: %v", err)
	}
	b, err := lb.TryAcquire(ctx, "c")
	if err != nil {
		t.Fatalf("prefix ab, key c, while prefix a holds key bc: %v; want a lock of its own", err)
	}
	if a.Fence() == b.Fence() {
		t.Fatalf("both leases have fence %d", a.Fence())
	}
	for _, l := range []*lockmw.Lease{a, b} {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release of %s: %v", l.Key(), err)
		}
	}
	if released != nil {
		released()
	}
	at := time.UnixMilli(1_700_000_000_000)
	for _, c := range []struct {
		l   *lockmw.Locker
		job string
	}{{la, "bc"}, {lb, "c"}} {
		if got, err := lockmw.FireClaimsOf(c.l, fireclaim.Inside{}).Own().Claim(ctx, c.job, at, "host"); err != nil || !got.Won {
			t.Fatalf("claim of job %q: %+v, %v; want won", c.job, got, err)
		}
	}
}

// ClaimKeepIsTheRetention checks that a Scheduler's claim rows are kept
// for the Locker's retention after each write (WithRetention;
// DefaultRetention without it), and at least for fireclaim.MinKeep.
// newLocker returns a Locker on the store with opts, whose TTL is ttl.
func ClaimKeepIsTheRetention(t *testing.T, ctx context.Context, ttl time.Duration, newLocker func(opts ...lockmw.Option) *lockmw.Locker, keepLeft KeepLeft) {
	t.Helper()
	for _, c := range []struct {
		opts []lockmw.Option
		keep time.Duration
	}{
		{nil, lockmw.DefaultRetention},
		{[]lockmw.Option{lockmw.WithRetention(3 * time.Hour)}, 3 * time.Hour},
		{[]lockmw.Option{lockmw.WithRetention(2 * ttl)}, fireclaim.MinKeep},
	} {
		l := newLocker(c.opts...)
		job := "keep-" + c.keep.String()
		if got, err := lockmw.FireClaimsOf(l, fireclaim.Inside{}).Own().Claim(ctx, job, time.UnixMilli(1_700_000_000_000), "host"); err != nil || !got.Won {
			t.Fatalf("claim: %+v, %v", got, err)
		}
		left, ok := keepLeft(t, lockmw.DefaultPrefix, job)
		if !ok {
			t.Fatalf("no claim row for %q", job)
		}
		if left < c.keep-time.Minute || left > c.keep {
			t.Errorf("claim row of a Locker with %d options kept for %v, want %v", len(c.opts), left, c.keep)
		}
	}
}

// What the store-level claim tests expect of the claims they are given:
// Prefix is their prefix; RowKeep is the claim keep of ClaimRowKeep's,
// IdleKeep that of IdleClaimRowsDeleted's.
const (
	Prefix   = "p:"
	RowKeep  = 2 * time.Hour
	IdleKeep = 3 * time.Second
)

// ClaimRowKeep checks that a claim row is kept for RowKeep after every claim
// and run recorded (never shortened), and after a won claim for twice the
// time since the fire claimed before it when that is longer
// (internal/fireclaim's Redis, Expiry). c are the store's claims under
// Prefix, made with the claim keep RowKeep.
func ClaimRowKeep(t *testing.T, ctx context.Context, c fireclaim.Claims, keepLeft KeepLeft) {
	const keep = RowKeep
	t.Helper()
	t0 := time.UnixMilli(1_700_000_000_000)
	kept := func(step string, want time.Duration) {
		t.Helper()
		left, ok := keepLeft(t, Prefix, "j")
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

// IdleClaimRowsDeleted checks that the store's clean-up deletes the claim
// row of a job idle for longer than the keep; the row of a job that goes
// on firing stays, and its fires are refused to a second claimant as
// before. c are the store's claims under Prefix, made with the claim keep
// IdleKeep; sweep runs the store's clean-up once, between claims
// (nil when the store's own clean-up runs often on its own).
func IdleClaimRowsDeleted(t *testing.T, ctx context.Context, c fireclaim.Claims, keepLeft KeepLeft, sweep func()) {
	t.Helper()
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
		if sweep != nil {
			sweep()
		}
		if _, ok := keepLeft(t, Prefix, "busy"); !ok {
			t.Fatalf("the clean-up deleted the claim row of the busy job (claim %d)", i)
		}
		if got, err := c.Claim(ctx, "busy", at, "host-b"); err != nil || got.Won {
			t.Fatalf("second claim of the busy job's fire %d: %+v, %v; want refused", i, got, err)
		}
		if _, ok := keepLeft(t, Prefix, "idle"); !ok {
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
