package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/postgres"
)

// The advisory-lock shortcuts, and why lockmw does not build leases on
// them: pg_advisory_lock belongs to one connection.

// TestAdvisoryLockVanishesWithBackend: an advisory lock's backend killed
// (pg_terminate_backend, as an administrator, a pooler or a failover
// would) frees the lock for another session at once, and its holder is
// told nothing: its connection object still looks fine until it is used.
// A lockmw lease whose pool's backends are killed keeps the lock (the row
// is not the connection's): the next renewal takes a new connection.
func TestAdvisoryLockVanishesWithBackend(t *testing.T) {
	srv := startServer(t)
	ctx := bg(t)
	holderPool := newPool(t, srv.URL(), "advisory-holder")
	holder, err := holderPool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock(42)"); err != nil {
		t.Fatal(err)
	}
	other := newPool(t, srv.URL())
	var got bool
	if err := other.QueryRow(ctx, "SELECT pg_try_advisory_lock(42)").Scan(&got); err != nil || got {
		t.Fatalf("advisory lock taken by another while held: %v, %v", got, err)
	}
	if n := srv.TerminateBackends(t, "advisory-holder"); n != 1 {
		t.Fatalf("terminated %d backends, want 1", n)
	}
	lockmwtest.Eventually(t, 5*time.Second, "another session takes the advisory lock", func() bool {
		var got bool
		err := other.QueryRow(ctx, "SELECT pg_try_advisory_lock(42)").Scan(&got)
		return err == nil && got
	})
	if holder.Conn().IsClosed() {
		t.Fatal("the holder's connection says it is closed: it was told (the point of the test is that it is not)")
	}

	// lockmw on this store: the lease survives its pool's backends being
	// killed, and no one else gets the lock.
	locker, err := postgres.New(newPool(t, srv.URL(), "lockmw-holder"), lockmw.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	lease, err := locker.Acquire(ctx, "advisory")
	if err != nil {
		t.Fatal(err)
	}
	if n := srv.TerminateBackends(t, "lockmw-holder"); n == 0 {
		t.Fatal("no backend of the lockmw pool to terminate")
	}
	rival := newLocker(t, srv.URL())
	deadline := time.Now().Add(3 * time.Second) // three TTLs: renewals must have run
	for time.Now().Before(deadline) {
		if l, err := rival.TryAcquire(ctx, "advisory"); err == nil {
			_ = l.Release(ctx)
			t.Fatal("another Locker took the lock after the holder's backends were killed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := lease.Context().Err(); err != nil {
		t.Fatalf("the lease ended (%v): its renewals should have taken new connections", context.Cause(lease.Context()))
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAdvisoryLockHeldForeverByStalledHolder: a holder that stalls (a
// stuck goroutine, a paused process) but keeps its connection keeps an
// advisory lock forever. A lockmw holder that stops renewing (here a
// lease WithoutWatchdog) loses the lock at its TTL, and its lease context
// says so.
func TestAdvisoryLockHeldForeverByStalledHolder(t *testing.T) {
	srv := startServer(t)
	ctx := bg(t)
	stalled, err := newPool(t, srv.URL()).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Release()
	if _, err := stalled.Exec(ctx, "SELECT pg_advisory_lock(43)"); err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, srv.URL())
	lease, err := l.Acquire(ctx, "stalled", lockmw.WithLeaseTTL(time.Second), lockmw.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	// The holder does nothing for three seconds.
	other := newPool(t, srv.URL())
	rival := newLocker(t, srv.URL())
	start := time.Now()
	var took time.Duration
	for time.Since(start) < 3*time.Second {
		var got bool
		if err := other.QueryRow(ctx, "SELECT pg_try_advisory_lock(43)").Scan(&got); err != nil || got {
			t.Fatalf("advisory lock of a stalled holder taken: %v, %v", got, err)
		}
		if took == 0 {
			if rl, err := rival.TryAcquire(ctx, "stalled"); err == nil {
				took = time.Since(start)
				_ = rl.Release(ctx)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if took == 0 {
		t.Fatal("the lockmw lock of a holder that stopped renewing was never free")
	}
	select {
	case <-lease.Context().Done():
		if !errors.Is(context.Cause(lease.Context()), lockmw.ErrLost) {
			t.Fatalf("lease ended with %v, want ErrLost", context.Cause(lease.Context()))
		}
	default:
		t.Fatal("the stalled holder's lease context has not ended though another holder took the lock")
	}
	t.Logf("lockmw: taken by another %v after the stalled holder's acquisition; advisory lock: still held after 3s", took.Round(time.Millisecond))
}

// TestErrors: each bad condition gives its typed error, wrapped in
// lockmw.ErrUnavailable (a missing table in lockmw.ErrStoreSetup:
// TestStartupChecks), and a held lease still ends at its deadline.
func TestErrors(t *testing.T) {
	srv := startServer(t)
	ctx := bg(t)

	t.Run("bad table name", func(t *testing.T) {
		_, err := postgres.Schema{Table: "no; drop"}.New(newPool(t, srv.URL()))
		if !errors.Is(err, lockmw.ErrInvalidOption) {
			t.Fatalf("New with a bad table name: %v; want ErrInvalidOption", err)
		}
	})

	t.Run("nil pool", func(t *testing.T) {
		if _, err := postgres.New(nil); !errors.Is(err, lockmw.ErrNilClient) {
			t.Fatalf("New(nil): %v; want ErrNilClient", err)
		}
	})

	t.Run("statement timeout", func(t *testing.T) {
		// Another transaction locks an expired row of the lock; the
		// acquisition's upsert waits for it past statement_timeout.
		admin := newPool(t, srv.URL())
		row := postgres.RowName(lockmw.DefaultPrefix, "timeout")
		if _, err := admin.Exec(ctx, "INSERT INTO lockmw_locks VALUES ($1, 'x', 1, clock_timestamp() - interval '1 hour')", row); err != nil {
			t.Fatal(err)
		}
		tx, err := admin.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, "SELECT 1 FROM lockmw_locks WHERE name = $1 FOR UPDATE", row); err != nil {
			t.Fatal(err)
		}
		cfg, _ := pgxpool.ParseConfig(srv.URL())
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = "100"
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		l, err := postgres.New(pool, lockmw.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, err = l.TryAcquire(ctx, "timeout")
		if !errors.Is(err, postgres.ErrStatementTimeout) || !errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("TryAcquire blocked past statement_timeout: %v; want ErrStatementTimeout", err)
		}
		t.Log(err)
	})

	t.Run("pool exhausted", func(t *testing.T) {
		cfg, _ := pgxpool.ParseConfig(srv.URL())
		cfg.MaxConns = 1
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		l, err := postgres.New(pool, lockmw.WithTTL(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, err = l.TryAcquire(ctx, "exhausted")
		if !errors.Is(err, postgres.ErrPoolExhausted) || !errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("TryAcquire with every connection taken: %v; want ErrPoolExhausted", err)
		}
		t.Log(err)
	})

	t.Run("killed backend", func(t *testing.T) {
		l, err := postgres.New(newPool(t, srv.URL(), "killed-backend"), lockmw.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		lease, err := l.TryAcquire(ctx, "killed")
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		srv.TerminateBackends(t, "killed-backend")
		// The pool's idle connection is dead; the next statement on it
		// fails, and the one after uses a new connection.
		var sawTyped bool
		for range 3 {
			lease, err := l.TryAcquire(ctx, "killed")
			if err == nil {
				_ = lease.Release(ctx)
				break
			}
			if !errors.Is(err, postgres.ErrBackendTerminated) || !errors.Is(err, lockmw.ErrUnavailable) {
				t.Fatalf("TryAcquire on a killed backend: %v; want ErrBackendTerminated", err)
			}
			sawTyped = true
			t.Log(err)
		}
		t.Logf("typed error seen: %v (the pool may have noticed the dead connection first)", sawTyped)
	})

	t.Run("read-only", func(t *testing.T) {
		l := newLocker(t, srv.URL(), lockmw.WithTTL(time.Second))
		lease, err := l.Acquire(ctx, "readonly")
		if err != nil {
			t.Fatal(err)
		}
		srv.Exec(t, "ALTER SYSTEM SET default_transaction_read_only = on")
		srv.Exec(t, "SELECT pg_reload_conf()")
		t.Cleanup(func() {
			srv.Exec(t, "ALTER SYSTEM RESET default_transaction_read_only")
			srv.Exec(t, "SELECT pg_reload_conf()")
		})
		// Renewals fail from now on: the lease ends at its deadline.
		select {
		case <-lease.Context().Done():
			if !errors.Is(context.Cause(lease.Context()), lockmw.ErrLost) {
				t.Fatalf("lease ended with %v, want ErrLost", context.Cause(lease.Context()))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the lease outlived its deadline on a read-only server")
		}
		_, err = newLocker(t, srv.URL()).TryAcquire(ctx, "readonly2")
		if !errors.Is(err, postgres.ErrReadOnly) || !errors.Is(err, lockmw.ErrUnavailable) {
			t.Fatalf("TryAcquire on a read-only server: %v; want ErrReadOnly", err)
		}
		t.Log(err)
	})
}
