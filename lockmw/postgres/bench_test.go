package postgres_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/benchsuite"
	"github.com/lockmw/lockmw/internal/testkit/pgtest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/postgres"
)

// Benchmarks of lockmw on PostgreSQL beside the two shortcuts teams use
// instead, on the same server in the same run (make bench), with the
// harness of internal/testkit/lockmwtest/benchsuite: a pg_try_advisory_lock
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

// counter reports st's count as round trips ("reqs").
func (s *statements) counter() benchsuite.Counter {
	return benchsuite.Counter{Unit: "reqs", Count: func(testing.TB) int64 { return s.n.Load() }}
}

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

// advisory is a pg_try_advisory_lock loop on one connection: pg_advisory
// locks are the session's.
func advisory(c *pgxpool.Conn) benchsuite.Poll {
	return benchsuite.Poll{
		Try: func(ctx context.Context, key string) (bool, error) {
			var got bool
			err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext($1))", key).Scan(&got)
			return got, err
		},
		Unlock: func(ctx context.Context, key string) {
			_, _ = c.Exec(ctx, "SELECT pg_advisory_unlock(hashtext($1))", key)
		},
		Every: pollEvery,
	}
}

// shedlock is ShedLock's JdbcTemplateLockProvider shape: a row per name,
// taken by an UPDATE when its lock_until has passed; by is the contender.
func shedlock(pool *pgxpool.Pool, by string) benchsuite.Poll {
	return benchsuite.Poll{
		Try: func(ctx context.Context, key string) (bool, error) {
			tag, err := pool.Exec(ctx, "UPDATE shedlock SET lock_until = now() + interval '10 seconds', locked_at = now(), locked_by = $2 WHERE name = $1 AND lock_until <= now()", key, by)
			return tag.RowsAffected() == 1, err
		},
		Unlock: func(ctx context.Context, key string) {
			_, _ = pool.Exec(ctx, "UPDATE shedlock SET lock_until = now() WHERE name = $1 AND locked_by = $2", key, by)
		},
		Every: pollEvery,
	}
}

// rowFloor is not a lock to use: it is the least a lease row costs on a
// table shaped as lockmw's (a name primary key, an index of expiries for
// the sweep, the row deleted on release), an upsert that takes the row
// when it is missing or expired and a delete, with no fence and no look at
// a queue. Beside lockmw and the ShedLock-style loop (whose row is never
// deleted, and whose update touches no index) in Uncontended, it shows
// where lockmw's time goes.
func rowFloor(pool *pgxpool.Pool, by string) benchsuite.Poll {
	return benchsuite.Poll{
		Try: func(ctx context.Context, key string) (bool, error) {
			tag, err := pool.Exec(ctx, `INSERT INTO rowfloor AS l (name, token, expires_at) VALUES ($1, $2, clock_timestamp() + interval '10 seconds')
ON CONFLICT (name) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at WHERE l.expires_at <= clock_timestamp()`, key, by)
			return tag.RowsAffected() == 1, err
		},
		Unlock: func(ctx context.Context, key string) {
			_, _ = pool.Exec(ctx, "DELETE FROM rowfloor WHERE name = $1 AND token = $2", key, by)
		},
		Every: pollEvery,
	}
}

// kinds are the implementations compared on srv, their pools traced by
// st; each contender gets its own pool (as a process of its own would).
func kinds(srv *pgtest.Server, st *statements) []benchsuite.Kind {
	var contender atomic.Int64
	return []benchsuite.Kind{
		{Name: "lockmw", New: func(tb testing.TB) benchsuite.Mutex {
			return benchsuite.Locker{L: newBenchLocker(tb, benchPool(tb, srv, st, 4))}
		}},
		{Name: "lockmw-fair", New: func(tb testing.TB) benchsuite.Mutex {
			return benchsuite.Locker{L: newBenchLocker(tb, benchPool(tb, srv, st, 4)), Opts: []lockmw.AcquireOption{lockmw.Fair()}}
		}},
		{Name: "advisory-poll", New: func(tb testing.TB) benchsuite.Mutex {
			c, err := benchPool(tb, srv, st, 1).Acquire(context.Background())
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(c.Release)
			return advisory(c)
		}},
		{Name: "shedlock-poll", New: func(tb testing.TB) benchsuite.Mutex {
			return shedlock(benchPool(tb, srv, st, 4), "contender-"+strconv.FormatInt(contender.Add(1), 10))
		}},
	}
}

func newBenchLocker(tb testing.TB, pool *pgxpool.Pool) *lockmw.Locker {
	l, err := postgres.New(pool)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// startBenchServer starts a server with lockmw's tables, ShedLock's,
// rowFloor's and preparedHandOver's.
func startBenchServer(b *testing.B) *pgtest.Server {
	srv := startServer(b)
	srv.Exec(b, `CREATE TABLE shedlock (name varchar(64) PRIMARY KEY, lock_until timestamp NOT NULL,
		locked_at timestamp NOT NULL, locked_by varchar(255) NOT NULL);
		INSERT INTO shedlock VALUES ('free', now(), now(), ''), ('contended-shedlock-poll', now(), now(), '');
		CREATE TABLE rowfloor (name text COLLATE "C" PRIMARY KEY, token text NOT NULL, expires_at timestamptz NOT NULL);
		CREATE INDEX ON rowfloor (expires_at)`)
	preparedTables(b, srv)
	return srv
}

// BenchmarkUncontended is one goroutine taking and releasing a free lock:
// ns/op is one lock and unlock; ops/s and round trips per lock+unlock
// (reqs/op) are reported too. Beside the kinds of kinds, row-floor
// (rowFloor) shows what a lease row costs before lockmw's fence and queue.
func BenchmarkUncontended(b *testing.B) {
	srv := startBenchServer(b)
	var st statements
	floor := benchsuite.Kind{Name: "row-floor", New: func(tb testing.TB) benchsuite.Mutex {
		return rowFloor(benchPool(tb, srv, &st, 4), "floor")
	}}
	benchsuite.UncontendedCounted(b, append(kinds(srv, &st), floor), st.counter())
}

// BenchmarkContended is 16 independent contenders (each its own pool and
// Locker, as 16 processes would have) taking turns on one key, each
// holding it 2 ms: acq/s across all contenders; util, the share of wall
// time some contender was inside the critical section; wait-p99-ms, the
// 99th percentile of a lock call; and reqs/acq, statements (or batches:
// round trips) sent per acquisition, renewals and LISTEN included. b.N is
// the number of acquisitions (see benchsuite.Measure). Beside the kinds of
// kinds, ceiling-prepared-handover (preparedHandOver) shows about the most a
// hand-over through a lease row can reach.
func BenchmarkContended(b *testing.B) {
	srv := startBenchServer(b)
	var st statements
	var contender atomic.Int64
	ceiling := benchsuite.Kind{Name: "ceiling-prepared-handover", New: func(tb testing.TB) benchsuite.Mutex {
		return newPreparedHandOver(tb, srv, &st, "contender-"+strconv.FormatInt(contender.Add(1), 10))
	}}
	benchsuite.ContendedCounted(b, append(kinds(srv, &st), ceiling), st.counter())
}
