package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/cronsuite"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/ginsuite"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/mysql"
)

// ginlock's store-independent behaviour (internal/testkit/lockmwtest/ginsuite)
// on MariaDB: ginlock works unchanged on the store's Locker.
func TestGinlockSuiteMariaDB(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	admin := srv.DB(t, "")
	ginsuite.Run(t, ginsuite.Env{
		Name: "mariadb",
		NewLocker: func(t testing.TB, opts ...lockmw.Option) *lockmw.Locker {
			t.Helper()
			l, err := mysql.New(srv.DB(t, ""), opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			return l
		},
		Lose: func(prefix, key string) error { return loseRow(admin, prefix, key) },
		LeaseTTL: func(t testing.TB, prefix, key string) time.Duration {
			t.Helper()
			var us sql.NullInt64
			err := admin.QueryRowContext(bg(t), "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM lockmw_locks WHERE prefix = ? AND name = ? AND expires_at > UTC_TIMESTAMP(6)", prefix, key).Scan(&us)
			if err != nil {
				t.Fatalf("reading the row of %s%s: %v", prefix, key, err)
			}
			return time.Duration(us.Int64) * time.Microsecond
		},
		ShortTTL:       300 * time.Millisecond,
		KnowsHolderTTL: true,
	})
}

// cronlock's store-independent suite (internal/testkit/lockmwtest/cronsuite) on
// MariaDB: Singleton, and the Scheduler claiming its fires in the claims
// table (no Redis client).
func TestCronlockMariaDB(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	admin := srv.DB(t, "")
	cronsuite.Run(t, cronsuite.Env{
		NewLocker: func(t testing.TB, opts ...lockmw.Option) *lockmw.Locker {
			return newLocker(t, srv, opts...)
		},
		TTL: 300 * time.Millisecond,
		Lose: func(t testing.TB, key string) {
			if err := loseRow(admin, lockmw.DefaultPrefix, key); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// loseRow ends the holding of a lock behind its holder's back, as an
// expiry the holder missed would: the row keeps its place, with no token.
func loseRow(admin *sql.DB, prefix, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := admin.ExecContext(ctx, "UPDATE lockmw_locks SET token = '', expires_at = UTC_TIMESTAMP(6) WHERE prefix = ? AND name = ? AND expires_at > UTC_TIMESTAMP(6)", prefix, key)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("no live row for %s%s", prefix, key)
	}
	return nil
}
