package mysql_test

import (
	"testing"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/sqlsuite"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/mysql"
)

// Two Lockers on one table, with prefixes "a" and "ab": the key "bc" of
// one and the key "c" of the other are two locks (prefix and key joined
// as they are would both be "abc"), and so are their jobs' fire claims.
func TestPrefixAndKeyNameTheirOwnRow(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	newLockerOn := func(opts ...lockmw.Option) *lockmw.Locker { return newLocker(t, srv, opts...) }
	sqlsuite.PrefixAndKeyNameTheirOwnRow(t, bg(t), newLockerOn, nil)
}

// A Scheduler's claim rows are kept for the Locker's retention after each
// write (WithRetention; DefaultRetention without it), and at least for
// fireclaim.MinKeep.
func TestClaimKeepIsTheRetention(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	newLockerOn := func(opts ...lockmw.Option) *lockmw.Locker { return newLocker(t, srv, opts...) }
	sqlsuite.ClaimKeepIsTheRetention(t, bg(t), testTTL, newLockerOn, mysql.ClaimKeepLeft(srv.DB(t, "")))
}
