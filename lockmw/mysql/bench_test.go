package mysql_test

import (
	"context"
	"database/sql"
	mathrand "math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/mysql"
	"github.com/lockmw/lockmw/lockmw/mysql/internal/mariatest"
)

// Benchmarks of lockmw on MariaDB beside a ShedLock-style table lock (one
// row per lock, taken by UPDATE … WHERE lock_until <= NOW(6), polled), on
// the same server in the same run.

// mutexLike is one lock implementation under benchmark: lock returns an
// unlock function.
type mutexLike interface {
	lock(ctx context.Context, key string) (unlock func(), err error)
}

type lockmwLock struct{ l *lockmw.Locker }

func (m lockmwLock) lock(ctx context.Context, key string) (func(), error) {
	lease, err := m.l.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return func() { _ = lease.Release(ctx) }, nil
}

// lockmwFair is lockmw with lockmw.Fair(): waiters queue (T_queue).
type lockmwFair struct{ l *lockmw.Locker }

func (m lockmwFair) lock(ctx context.Context, key string) (func(), error) {
	lease, err := m.l.Acquire(ctx, key, lockmw.Fair())
	if err != nil {
		return nil, err
	}
	return func() { _ = lease.Release(ctx) }, nil
}

// shedLock is ShedLock's JDBC provider in Go: a row per lock (inserted
// once), locked by an UPDATE that matches only an expired lock_until,
// unlocked by setting lock_until to now; a waiter polls every 10ms (ShedLock
// itself skips the run instead of waiting).
type shedLock struct {
	db *sql.DB
	id string
}

const shedPoll = 10 * time.Millisecond

func (m shedLock) lock(ctx context.Context, key string) (func(), error) {
	_, _ = m.db.ExecContext(ctx, "INSERT IGNORE INTO shedlock (name, lock_until, locked_at, locked_by) VALUES (?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), '')", key)
	for {
		res, err := m.db.ExecContext(ctx, "UPDATE shedlock SET lock_until = UTC_TIMESTAMP(6) + INTERVAL 10 SECOND, locked_at = UTC_TIMESTAMP(6), locked_by = ? WHERE name = ? AND lock_until <= UTC_TIMESTAMP(6)", m.id, key)
		if err != nil {
			return nil, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return func() {
				_, _ = m.db.ExecContext(ctx, "UPDATE shedlock SET lock_until = UTC_TIMESTAMP(6) WHERE name = ? AND locked_by = ?", key, m.id)
			}, nil
		}
		time.Sleep(shedPoll)
	}
}

// kinds are the implementations compared, each contender on a pool of its
// own (as separate processes would be).
var kinds = []struct {
	name string
	make func(tb testing.TB, srv *mariatest.Server, i int) mutexLike
}{
	{"lockmw", func(tb testing.TB, srv *mariatest.Server, _ int) mutexLike {
		l, err := mysql.New(srv.DB(tb, "", "interpolateParams=true"))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = l.Close() })
		return lockmwLock{l}
	}},
	{"lockmw-fair", func(tb testing.TB, srv *mariatest.Server, _ int) mutexLike {
		l, err := mysql.New(srv.DB(tb, "", "interpolateParams=true"))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = l.Close() })
		return lockmwFair{l}
	}},
	{"shedlock-poll", func(tb testing.TB, srv *mariatest.Server, i int) mutexLike {
		return shedLock{db: srv.DB(tb, "", "interpolateParams=true"), id: "c" + strconv.Itoa(i)}
	}},
}

func startBenchServer(b *testing.B) *mariatest.Server {
	srv := startServer(b)
	srv.Exec(b, "CREATE TABLE shedlock (name VARCHAR(64) NOT NULL PRIMARY KEY, lock_until DATETIME(6) NOT NULL, locked_at DATETIME(6) NOT NULL, locked_by VARCHAR(255) NOT NULL)")
	return srv
}

// questions is how many statements the server has received.
func questions(tb testing.TB, db *sql.DB) int64 {
	var name string
	var n int64
	if err := db.QueryRowContext(context.Background(), "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// BenchmarkUncontended is one goroutine taking and releasing a free lock:
// ns/op is one lock and unlock; ops/s is reported too.
func BenchmarkUncontended(b *testing.B) {
	srv := startBenchServer(b)
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			m := k.make(b, srv, 0)
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				unlock, err := m.lock(ctx, "free")
				if err != nil {
					b.Fatal(err)
				}
				unlock()
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
		})
	}
}

// Contention: 16 independent contenders take turns on one key, each
// holding it 2 ms.
const (
	contenders = 16
	holdFor    = 2 * time.Millisecond
)

// BenchmarkContended reports, per implementation: acq/s across all
// contenders; util, the share of wall time some contender held the lock;
// wait-p99-ms, the 99th percentile of a lock call; and stmts/acq, the
// statements the server received per acquisition (renewals included).
// b.N is the number of acquisitions across all contenders.
func BenchmarkContended(b *testing.B) {
	srv := startBenchServer(b)
	admin := srv.DB(b, "")
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			var ms []mutexLike
			for i := range contenders {
				ms = append(ms, k.make(b, srv, i))
			}
			key := "contended-" + k.name
			runContended(b, ms, key, contenders)
			q := questions(b, admin)
			b.ResetTimer()
			r := runContended(b, ms, key, b.N)
			b.StopTimer()
			q = questions(b, admin) - q - 1
			b.ReportMetric(float64(r.n)/r.wall.Seconds(), "acq/s")
			b.ReportMetric(r.util, "util")
			b.ReportMetric(float64(r.p99)/float64(time.Millisecond), "wait-p99-ms")
			b.ReportMetric(float64(q)/float64(r.n), "stmts/acq")
		})
	}
}

type contendedRun struct {
	n    int
	wall time.Duration
	util float64
	p99  time.Duration
}

// runContended has every contender take key until n acquisitions are done
// in all.
func runContended(tb testing.TB, ms []mutexLike, key string, n int) contendedRun {
	ctx := context.Background()
	var (
		mu    sync.Mutex
		left  = n
		held  time.Duration
		waits []time.Duration
		wg    sync.WaitGroup
	)
	start := time.Now()
	for _, m := range ms {
		wg.Go(func() {
			time.Sleep(time.Duration(mathrand.N(int64(time.Millisecond))))
			for {
				mu.Lock()
				if left == 0 {
					mu.Unlock()
					return
				}
				left--
				mu.Unlock()
				t0 := time.Now()
				unlock, err := m.lock(ctx, key)
				if err != nil {
					tb.Error(err)
					return
				}
				t1 := time.Now()
				time.Sleep(holdFor)
				t2 := time.Now()
				unlock()
				mu.Lock()
				waits = append(waits, t1.Sub(t0))
				held += t2.Sub(t1)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	slices.Sort(waits)
	r := contendedRun{n: len(waits), wall: wall, util: held.Seconds() / wall.Seconds()}
	if len(waits) > 0 {
		r.p99 = waits[min(len(waits)-1, len(waits)*99/100)]
	}
	return r
}
