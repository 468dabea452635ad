package postgres_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/internal/pgtest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/postgres"
)

// Benchmarks of lockmw on PostgreSQL beside the two shortcuts teams use
// instead, on the same server in the same run: a pg_try_advisory_lock
// polling loop (each contender on a connection of its own: the lock is the
// session's) and a ShedLock-style table (UPDATE … SET lock_until =
// now() + ttl WHERE name = $1 AND lock_until <= now(), polled). Both
// pollers retry every pollEvery.

const pollEvery = time.Millisecond

// statements counts the statements and batches (round trips) sent on the
// pools it traces.
type statements struct{ n atomic.Int64 }

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}
func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.n.Add(1)
	return ctx
}
func (s *statements) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (s *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// benchPool is a pool of up to max connections on srv, traced by st.
func benchPool(tb testing.TB, srv *pgtest.Server, st *statements, max int32) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(srv.URL())
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = max
	cfg.ConnConfig.Tracer = st
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

type mutexLike interface {
	lock(ctx context.Context, key string) (unlock func(), err error)
}

type lockmwLock struct {
	l    *lockmw.Locker
	opts []lockmw.AcquireOption
}

func (m lockmwLock) lock(ctx context.Context, key string) (func(), error) {
	lease, err := m.l.Acquire(ctx, key, m.opts...)
	if err != nil {
		return nil, err
	}
	return func() { _ = lease.Release(ctx) }, nil
}

// advisory holds one connection: pg_advisory locks are the session's.
type advisory struct{ c *pgxpool.Conn }

func (m advisory) lock(ctx context.Context, key string) (func(), error) {
	for {
		var got bool
		if err := m.c.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext($1))", key).Scan(&got); err != nil {
			return nil, err
		}
		if got {
			return func() { _, _ = m.c.Exec(ctx, "SELECT pg_advisory_unlock(hashtext($1))", key) }, nil
		}
		time.Sleep(pollEvery)
	}
}

// shedlock is ShedLock's JdbcTemplateLockProvider shape: a row per name,
// taken by an UPDATE when its lock_until has passed.
type shedlock struct {
	pool *pgxpool.Pool
	name string // this contender
}

func (m shedlock) lock(ctx context.Context, key string) (func(), error) {
	for {
		tag, err := m.pool.Exec(ctx, "UPDATE shedlock SET lock_until = now() + interval '10 seconds', locked_at = now(), locked_by = $2 WHERE name = $1 AND lock_until <= now()", key, m.name)
		if err != nil {
			return nil, err
		}
		if tag.RowsAffected() == 1 {
			return func() {
				_, _ = m.pool.Exec(ctx, "UPDATE shedlock SET lock_until = now() WHERE name = $1 AND locked_by = $2", key, m.name)
			}, nil
		}
		time.Sleep(pollEvery)
	}
}

// kinds are the implementations compared; each contender gets its own.
var kinds = []struct {
	name string
	make func(tb testing.TB, srv *pgtest.Server, st *statements, i int) mutexLike
}{
	{"lockmw", func(tb testing.TB, srv *pgtest.Server, st *statements, _ int) mutexLike {
		return lockmwLock{l: newBenchLocker(tb, benchPool(tb, srv, st, 4))}
	}},
	{"lockmw-fair", func(tb testing.TB, srv *pgtest.Server, st *statements, _ int) mutexLike {
		return lockmwLock{l: newBenchLocker(tb, benchPool(tb, srv, st, 4)), opts: []lockmw.AcquireOption{lockmw.Fair()}}
	}},
	{"advisory-poll", func(tb testing.TB, srv *pgtest.Server, st *statements, _ int) mutexLike {
		c, err := benchPool(tb, srv, st, 1).Acquire(context.Background())
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(c.Release)
		return advisory{c}
	}},
	{"shedlock-poll", func(tb testing.TB, srv *pgtest.Server, st *statements, i int) mutexLike {
		return shedlock{pool: benchPool(tb, srv, st, 4), name: "contender-" + string(rune('a'+i))}
	}},
}

func newBenchLocker(tb testing.TB, pool *pgxpool.Pool) *lockmw.Locker {
	l, err := postgres.New(pool)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// startBenchServer starts a server with lockmw's tables and ShedLock's.
func startBenchServer(b *testing.B) *pgtest.Server {
	srv := startServer(b)
	srv.Exec(b, `CREATE TABLE shedlock (name varchar(64) PRIMARY KEY, lock_until timestamp NOT NULL,
		locked_at timestamp NOT NULL, locked_by varchar(255) NOT NULL);
		INSERT INTO shedlock VALUES ('free', now(), now(), ''), ('contended-shedlock-poll', now(), now(), '')`)
	return srv
}

// BenchmarkUncontended is one goroutine taking and releasing a free lock:
// ns/op is one lock and unlock; ops/s and round trips per lock+unlock are
// reported too.
func BenchmarkUncontended(b *testing.B) {
	srv := startBenchServer(b)
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			var st statements
			m := k.make(b, srv, &st, 0)
			ctx := context.Background()
			b.ResetTimer()
			before := st.n.Load()
			start := time.Now()
			for range b.N {
				unlock, err := m.lock(ctx, "free")
				if err != nil {
					b.Fatal(err)
				}
				unlock()
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
			b.ReportMetric(float64(st.n.Load()-before)/float64(b.N), "reqs/op")
		})
	}
}

// Contention: 16 independent contenders (each its own pool and Locker, as
// 16 processes would have) take turns on one key, each holding it 2 ms.
const (
	contenders = 16
	holdFor    = 2 * time.Millisecond
)

// BenchmarkContended reports, per implementation: acq/s across all
// contenders; util, the share of wall time some contender was inside the
// critical section; wait-p99-ms, the 99th percentile of a lock call; and
// reqs/acq, statements (or batches: round trips) sent per acquisition,
// renewals and LISTEN included. b.N is the number of acquisitions.
func BenchmarkContended(b *testing.B) {
	srv := startBenchServer(b)
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			var st statements
			var ms []mutexLike
			for i := range contenders {
				ms = append(ms, k.make(b, srv, &st, i))
			}
			key := "contended-" + k.name
			runContended(b, ms, key, contenders)
			before := st.n.Load()
			b.ResetTimer()
			r := runContended(b, ms, key, b.N)
			b.StopTimer()
			b.ReportMetric(float64(r.n)/r.wall.Seconds(), "acq/s")
			b.ReportMetric(r.util, "util")
			b.ReportMetric(float64(r.p99)/float64(time.Millisecond), "wait-p99-ms")
			b.ReportMetric(float64(st.n.Load()-before)/float64(r.n), "reqs/acq")
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
					if !errors.Is(err, context.Canceled) {
						tb.Error(err)
					}
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
