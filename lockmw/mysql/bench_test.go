package mysql_test

import (
	"context"
	"database/sql"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/benchsuite"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/mysql"
	"github.com/lockmw/lockmw/lockmw/mysql/internal/mariatest"
)

// Benchmarks of lockmw on MariaDB beside two loops a team would write
// instead: a ShedLock-style table lock (one row per lock, taken by UPDATE
// … WHERE lock_until <= NOW(6), polled) and GET_LOCK polled (a lock held
// by a connection: each contender keeps one), on the same server in the
// same run (make bench), with the harness of
// internal/testkit/lockmwtest/benchsuite.

// shedPoll is how often the ShedLock-style loop tries again (ShedLock
// itself skips the run instead of waiting).
const shedPoll = 10 * time.Millisecond

// shedLock is ShedLock's JDBC provider in Go: a row per lock (inserted
// if missing at each lock call), locked by an UPDATE that matches only an
// expired lock_until, unlocked by setting lock_until to now; id is the
// contender. With bound set, each statement runs under a context with
// that deadline, as a lockmw request does (see the package
// documentation, "Compared with a ShedLock-style loop"); without, under
// the caller's context.
type shedLock struct {
	db    *sql.DB
	id    string
	bound time.Duration
}

// exec runs q under ctx, bounded by m.bound when set.
func (m shedLock) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if m.bound > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.bound)
		defer cancel()
	}
	return m.db.ExecContext(ctx, q, args...)
}

func (m shedLock) Lock(ctx context.Context, key string) (func(), error) {
	_, _ = m.exec(ctx, "INSERT IGNORE INTO shedlock (name, lock_until, locked_at, locked_by) VALUES (?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), '')", key)
	return benchsuite.Poll{
		Try: func(ctx context.Context, key string) (bool, error) {
			res, err := m.exec(ctx, "UPDATE shedlock SET lock_until = UTC_TIMESTAMP(6) + INTERVAL 10 SECOND, locked_at = UTC_TIMESTAMP(6), locked_by = ? WHERE name = ? AND lock_until <= UTC_TIMESTAMP(6)", m.id, key)
			if err != nil {
				return false, err
			}
			n, _ := res.RowsAffected()
			return n == 1, nil
		},
		Unlock: func(ctx context.Context, key string) {
			_, _ = m.exec(ctx, "UPDATE shedlock SET lock_until = UTC_TIMESTAMP(6) WHERE name = ? AND locked_by = ?", key, m.id)
		},
		Every: shedPoll,
	}.Lock(ctx, key)
}

// getLockPoll is GET_LOCK polled as the ShedLock-style loop polls its
// row: a lock held by one connection, so every contender keeps its own.
type getLockPoll struct{ conn *sql.Conn }

func (m getLockPoll) Lock(ctx context.Context, key string) (func(), error) {
	return benchsuite.Poll{
		Try: func(ctx context.Context, key string) (bool, error) {
			var got sql.NullInt64
			if err := m.conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", key).Scan(&got); err != nil {
				return false, err
			}
			return got.Int64 == 1, nil
		},
		Unlock: func(ctx context.Context, key string) {
			_, _ = m.conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", key)
		},
		Every: shedPoll,
	}.Lock(ctx, key)
}

// kinds are the implementations compared, each contender on a pool of its
// own (as separate processes would be).
func kinds(srv *mariatest.Server) []benchsuite.Kind {
	var contender atomic.Int64
	return []benchsuite.Kind{
		{Name: "lockmw", New: func(tb testing.TB) benchsuite.Mutex {
			l, err := mysql.New(srv.DB(tb, "", "interpolateParams=true"))
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { _ = l.Close() })
			return benchsuite.Locker{L: l}
		}},
		{Name: "lockmw-fair", New: func(tb testing.TB) benchsuite.Mutex {
			l, err := mysql.New(srv.DB(tb, "", "interpolateParams=true"))
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { _ = l.Close() })
			return benchsuite.Locker{L: l, Opts: []lockmw.AcquireOption{lockmw.Fair()}}
		}},
		{Name: "shedlock-poll", New: func(tb testing.TB) benchsuite.Mutex {
			return shedLock{db: srv.DB(tb, "", "interpolateParams=true"), id: "c" + strconv.FormatInt(contender.Add(1), 10)}
		}},
		{Name: "getlock-poll", New: func(tb testing.TB) benchsuite.Mutex {
			conn, err := srv.DB(tb, "", "interpolateParams=true").Conn(context.Background())
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { _ = conn.Close() })
			return getLockPoll{conn: conn}
		}},
	}
}

func startBenchServer(b *testing.B) *mariatest.Server {
	srv := startServer(b)
	srv.Exec(b, "CREATE TABLE shedlock (name VARCHAR(64) NOT NULL PRIMARY KEY, lock_until DATETIME(6) NOT NULL, locked_at DATETIME(6) NOT NULL, locked_by VARCHAR(255) NOT NULL)")
	return srv
}

// statements counts the statements the server has received (its Questions
// status), less the ones it sent itself to read them.
func statements(db *sql.DB) benchsuite.Counter {
	var reads int64
	return benchsuite.Counter{Unit: "stmts", Count: func(tb testing.TB) int64 {
		var name string
		var n int64
		if err := db.QueryRowContext(context.Background(), "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
			tb.Fatal(err)
		}
		n -= reads
		reads++
		return n
	}}
}

// BenchmarkUncontended is one goroutine taking and releasing a free lock:
// ns/op is one lock and unlock; ops/s is reported too. Beside the kinds of
// BenchmarkContended, shedlock-poll-bounded is the ShedLock-style loop
// with each statement bounded as lockmw bounds its requests (a 10s
// deadline, lockmw's default TTL): go-sql-driver then watches each
// statement's context, which the unbounded loop does not pay for.
func BenchmarkUncontended(b *testing.B) {
	srv := startBenchServer(b)
	var contender atomic.Int64
	benchsuite.Uncontended(b, append(kinds(srv), benchsuite.Kind{Name: "shedlock-poll-bounded", New: func(tb testing.TB) benchsuite.Mutex {
		return shedLock{db: srv.DB(tb, "", "interpolateParams=true"), id: "b" + strconv.FormatInt(contender.Add(1), 10), bound: lockmw.DefaultTTL}
	}}))
}

// BenchmarkContended is 16 independent contenders taking turns on one
// key, each holding it 2 ms: acq/s across all contenders; util, the share
// of wall time some contender held the lock; wait-p99-ms, the 99th
// percentile of a lock call; and stmts/acq, the statements the server
// received per acquisition (renewals included). b.N is the number of
// acquisitions across all contenders (see benchsuite.Measure).
func BenchmarkContended(b *testing.B) {
	srv := startBenchServer(b)
	benchsuite.ContendedCounted(b, kinds(srv), statements(srv.DB(b, "")))
}
