package mysql_test

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
	t.Parallel()
	srv := startServer(t)
	la := newLocker(t, srv, lockmw.WithPrefix("a"))
	lb := newLocker(t, srv, lockmw.WithPrefix("ab"))
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
	t.Parallel()
	srv := startServer(t)
	admin := srv.DB(t, "")
	for _, c := range []struct {
		opts []lockmw.Option
		keep time.Duration
	}{
		{nil, lockmw.DefaultRetention},
		{[]lockmw.Option{lockmw.WithRetention(3 * time.Hour)}, 3 * time.Hour},
		{[]lockmw.Option{lockmw.WithRetention(2 * testTTL)}, fireclaim.MinKeep},
	} {
		l := newLocker(t, srv, c.opts...)
		job := "keep-" + c.keep.String()
		if got, err := lockmw.FireClaimsOf(l, fireclaim.Inside{}).Own().Claim(bg(t), job, time.UnixMilli(1_700_000_000_000), "host"); err != nil || !got.Won {
			t.Fatalf("claim: %+v, %v", got, err)
		}
		var us int64
		if err := admin.QueryRowContext(bg(t), "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), keep_until) FROM lockmw_locks_claims WHERE prefix = ? AND job = ?",
			lockmw.DefaultPrefix, job).Scan(&us); err != nil {
			t.Fatalf("the claim row of %q: %v", job, err)
		}
		if left := time.Duration(us) * time.Microsecond; left < c.keep-time.Minute || left > c.keep {
			t.Errorf("claim row of a Locker with %d options kept for %v, want %v", len(c.opts), left, c.keep)
		}
	}
}
