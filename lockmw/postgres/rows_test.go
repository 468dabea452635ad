package postgres_test

import (
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/sqlsuite"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/postgres"
)

// Two Lockers on one table, with prefixes "a" and "ab": the key "bc" of
// one and the key "c" of the other are two locks (prefix and key joined
// as they are would both be "abc"), and so are their jobs' fire claims;
// both releases leave no lease row.
func TestPrefixAndKeyNameTheirOwnRow(t *testing.T) {
	srv := startServer(t)
	newLockerOn := func(opts ...lockmw.Option) *lockmw.Locker { return newLocker(t, srv.URL(), opts...) }
	sqlsuite.PrefixAndKeyNameTheirOwnRow(t, bg(t), newLockerOn, func() {
		if out := srv.Exec(t, "SELECT count(*) FROM lockmw_locks"); out != "0" {
			t.Fatalf("%s lease rows after both releases, want 0", out)
		}
	})
}

// A Scheduler's claim rows are kept for the Locker's retention after each
// write (WithRetention; DefaultRetention without it), and at least for
// fireclaim.MinKeep.
func TestClaimKeepIsTheRetention(t *testing.T) {
	srv := startServer(t)
	newLockerOn := func(opts ...lockmw.Option) *lockmw.Locker { return newLocker(t, srv.URL(), opts...) }
	ctx := bg(t)
	sqlsuite.ClaimKeepIsTheRetention(t, ctx, testTTL, newLockerOn, postgres.ClaimKeepLeft(ctx, newPool(t, srv.URL())))
}
