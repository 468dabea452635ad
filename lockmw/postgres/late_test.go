package postgres_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/postgres"
)

// An acquisition whose caller gave up while its batch waited behind a row
// lock in the server, and whose cancel request never reached the server
// (a paused server or a broken link; here, the pool's dials fail from
// then on), runs once that lock is released, after every give-back of the failed acquisition was
// answered (a release that finds no row of its token does not wait for
// the batch). It must not leave its lock held, by a token nobody holds,
// for a TTL: once the row lock is released, another Locker acquires the
// key well before the (long) TTL. A liveness check, not a timing one: the
// wait bound is a sixth of the TTL.
func TestStalledAcquisitionLeavesNoLock(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	const ttl = 30 * time.Second
	const key = "stalled"
	cfg, err := pgxpool.ParseConfig(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "stalled"
	var noDials atomic.Bool
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if noDials.Load() {
			return nil, errors.New("test: no dial")
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Two idle connections, for the give-backs.
	c1, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c2, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c1.Release()
	c2.Release()
	a, err := postgres.New(pool, lockmw.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	b := newLocker(t, srv.URL(), lockmw.WithTTL(ttl))
	ctx := bg(t)

	// The key's row, expired, locked by an administrator's transaction.
	admin := newPool(t, srv.URL())
	name := postgres.RowName(lockmw.DefaultPrefix, key)
	if _, err := admin.Exec(ctx, "INSERT INTO lockmw_locks (name, token, fence, expires_at) VALUES ($1, 'old', 0, clock_timestamp() - interval '1 hour')", name); err != nil {
		t.Fatal(err)
	}
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "SELECT 1 FROM lockmw_locks WHERE name = $1 FOR UPDATE", name); err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := a.TryAcquire(actx, key)
		failed <- err
	}()
	// Once the batch waits for the row lock, pgx's cancel request (a dial
	// of its own) will not reach the server.
	lockmwtest.Eventually(t, ttl/6, "the batch waits for the row lock", func() bool {
		return srv.Exec(t, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'stalled' AND wait_event_type = 'Lock'") == "1"
	})
	noDials.Store(true)
	if err := <-failed; err == nil {
		t.Fatal("TryAcquire took a row another transaction has locked")
	}
	// Close makes the Locker's last give-back tries, and returns once they
	// are answered or over.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Once a's backends are gone, the batch ran, or never will.
	pool.Close()
	noDials.Store(false)
	lockmwtest.Eventually(t, ttl/6, "a's backends end", func() bool {
		return srv.Exec(t, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'stalled'") == "0"
	})
	l, err := b.Acquire(ctx, key, lockmw.WithWait(ttl/6))
	if errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("the key stayed held after the failed acquisition's give-back (rows: %v): %v", rows(t, srv, key), err)
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
}
