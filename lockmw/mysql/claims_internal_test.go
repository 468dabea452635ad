package mysql

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/sqlsuite"
)

// claimKeepLeft reads, with admin, how long the claim row of job is kept
// still (sqlsuite.KeepLeft).
func claimKeepLeft(admin *sql.DB) sqlsuite.KeepLeft {
	return func(t testing.TB, prefix, job string) (time.Duration, bool) {
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
}

// A claim row is kept for the keep after every claim and run recorded
// (never shortened), and after a won claim for twice the time since the
// fire claimed before it when that is longer (sqlsuite.ClaimRowKeep).
func TestClaimRowKeep(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	sqlsuite.ClaimRowKeep(t, tctx(t), s.FireClaims(sqlsuite.Prefix, 10*time.Second, sqlsuite.RowKeep), claimKeepLeft(admin))
}

// The cleanup loop deletes the claim row of a job idle for longer than
// the keep; the row of a job that goes on firing stays, and its fires are
// refused to a second claimant as before (sqlsuite.IdleClaimRowsDeleted).
func TestCleanupDeletesIdleClaimRows(t *testing.T) {
	t.Parallel()
	s0, admin := newTestStore(t)
	// A store on the same database whose cleanup runs every 100ms.
	s := &sqlStore{db: s0.db, n: s0.n, retention: Retention, stop: make(chan struct{}), done: make(chan struct{})}
	go s.cleanLoop(100 * time.Millisecond)
	t.Cleanup(func() { _ = s.Close() })
	sqlsuite.IdleClaimRowsDeleted(t, tctx(t), s.FireClaims(sqlsuite.Prefix, 10*time.Second, sqlsuite.IdleKeep), claimKeepLeft(admin), nil)
}
