package postgres_test

import (
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/lockmw"
)

// Two Lockers on one table, with prefixes "a" and "ab": the key "bc" of
// one and the key "c" of the other are two locks (prefix and key joined
// as they are would both be "abc"), and so are their jobs' fire claims.
func TestPrefixAndKeyNameTheirOwnRow(t *testing.T) {
	srv := startServer(t)
	la := newLocker(t, srv.URL(), lockmw.WithPrefix("a"))
	lb := newLocker(t, srv.URL(), lockmw.WithPrefix("ab"))
	ctx := bg(t)
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
	if out := srv.Exec(t, "SELECT count(*) FROM lockmw_locks"); out != "0" {
		t.Fatalf("%s lease rows after both releases, want 0", out)
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

// A Scheduler's claim rows are kept for the Locker's retention after each
// write (WithRetention; DefaultRetention without it), and at least for
// fireclaim.MinKeep.
func TestClaimKeepIsTheRetention(t *testing.T) {
	srv := startServer(t)
	for _, c := range []struct {
		opts []lockmw.Option
		keep time.Duration
	}{
		{nil, lockmw.DefaultRetention},
		{[]lockmw.Option{lockmw.WithRetention(3 * time.Hour)}, 3 * time.Hour},
		{[]lockmw.Option{lockmw.WithRetention(2 * testTTL)}, fireclaim.MinKeep},
	} {
		l := newLocker(t, srv.URL(), c.opts...)
		job := "keep-" + c.keep.String()
		if got, err := lockmw.FireClaimsOf(l, fireclaim.Inside{}).Own().Claim(bg(t), job, time.UnixMilli(1_700_000_000_000), "host"); err != nil || !got.Won {
			t.Fatalf("claim: %+v, %v", got, err)
		}
		left := keepLeft(t, srv, job)
		if left < c.keep-time.Minute || left > c.keep {
			t.Errorf("claim row of a Locker with %d options kept for %v, want %v", len(c.opts), left, c.keep)
		}
	}
}

// keepLeft is how long the claim row of job (default prefix) is kept still.
func keepLeft(t testing.TB, srv interface {
	Exec(testing.TB, string) string
}, job string) time.Duration {
	t.Helper()
	out := srv.Exec(t, "SELECT (extract(epoch FROM keep_until - clock_timestamp()) * 1000)::bigint FROM lockmw_locks_claims WHERE prefix = "+
		quote(lockmw.DefaultPrefix)+" AND job = "+quote(job))
	d, err := time.ParseDuration(out + "ms")
	if err != nil {
		t.Fatalf("no claim row for %q: %q", job, out)
	}
	return d
}
