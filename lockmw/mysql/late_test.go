package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/lockmw"
)

// An acquisition whose caller gave up while its statement waited behind a
// lock in the server (here, a Fair waiter's queue entry being inserted)
// may run once that lock is released, after every give-back of the
// failed acquisition was answered (MariaDB runs each connection in a
// thread of its own, so a give-back answered twice says nothing about a
// statement still waiting). It must not leave its lock held, by a token
// nobody holds, for a TTL: once the lock in the server is released,
// another Locker acquires the key well before the (long) TTL. A liveness
// check, not a timing one: the wait bound is a sixth of the TTL.
func TestStalledAcquisitionLeavesNoLock(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	const ttl = 30 * time.Second
	a := newLocker(t, srv, lockmw.WithTTL(ttl))
	b := newLocker(t, srv, lockmw.WithTTL(ttl))
	ctx := bg(t)
	const key = "stalled"
	// The key's row, free, and marked as one a Fair waiter queued for (a
	// Fair waiter's busy attempt marks it before its entry is queued):
	// plain attempts read its queue.
	l0, err := b.Acquire(ctx, key, lockmw.Fair())
	if err != nil {
		t.Fatal(err)
	}
	if err := l0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Exec(t, "UPDATE lockmw_locks SET queue_seen = 1 WHERE prefix = ? AND name = ?", lockmw.DefaultPrefix, key)

	// An administrator's transaction holds an uncommitted queue entry of
	// the key: the acquisition's check of the queue waits for it. (The
	// statement holds the row's lock meanwhile, so a give-back of its
	// token waits behind it; TestPausedAcquisitionLeavesNoLock is the
	// stall a give-back does not wait behind.)
	admin, err := srv.DB(t, "").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, "INSERT INTO lockmw_locks_queue (prefix, name, token, seq, expires_at) VALUES (?, ?, 'blocker', 1, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)",
		lockmw.DefaultPrefix, key); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = a.TryAcquire(actx, key)
	cancel()
	if err == nil {
		t.Fatal("TryAcquire took the lock past an uncommitted queue entry")
	}
	// Close makes the Locker's last give-back tries, and returns once they
	// are answered or over.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	// Once no acquisition statement is left in the server, it ran, or
	// never will.
	lockmwtest.Eventually(t, ttl/6, "no acquisition statement left in the server", func() bool {
		var n int
		err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%FOR INSERT INTO `lockmw_locks` %' AND ID <> CONNECTION_ID()").Scan(&n)
		return err == nil && n == 0
	})
	l, err := b.Acquire(ctx, key, lockmw.WithWait(ttl/6))
	if errors.Is(err, lockmw.ErrNotAcquired) {
		r, _ := readRow(t, srv.DB(t, ""), key)
		t.Fatalf("the key stayed held after the failed acquisition's give-back (its row: %+v): %v", r, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
}

// An acquisition whose statement waits before it locks the lock's row
// (here, for the fence sequence's metadata lock, which an administrator's
// LOCK TABLES holds), and whose caller gave up, may run after every
// give-back of its token was answered: unlike a statement waiting behind
// the row, it does not hold the give-back back. The give-back must end it
// first (stalled.go); otherwise, once the sequence is unlocked, it takes
// the lock for a token nobody holds, for the whole (long) TTL. A liveness
// check, not a timing one: the wait bound is a sixth of the TTL.
func TestStalledBeforeRowLockLeavesNoLock(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	const ttl = 30 * time.Second
	a := newLocker(t, srv, lockmw.WithTTL(ttl))
	b := newLocker(t, srv, lockmw.WithTTL(ttl))
	ctx := bg(t)
	const key = "stalled-open"
	// The key's row, free, seen by a (its next attempt is one UPDATE),
	// whose statement a's connection prepared (taking the known row
	// once): the stalled statement is an execution, whose text holds no
	// token (prepared.go).
	for range 2 {
		l0, err := a.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l0.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := srv.DB(t, "").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "LOCK TABLES lockmw_locks_fence WRITE"); err != nil {
		t.Fatal(err)
	}
	unlocked := false
	defer func() {
		if !unlocked {
			_, _ = admin.ExecContext(ctx, "UNLOCK TABLES")
		}
	}()
	actx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = a.TryAcquire(actx, key)
	cancel()
	if err == nil {
		t.Fatal("TryAcquire took the lock while its fence sequence was locked")
	}
	// Close makes the Locker's last give-back tries, and returns once they
	// are answered or over: a plain release, which the sequence's lock
	// does not hold back.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	unlocked = true
	watch := srv.DB(t, "")
	lockmwtest.Eventually(t, ttl/6, "no acquisition statement left in the server", func() bool {
		var n int
		err := watch.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%lockmw_locks_fence%' AND ID <> CONNECTION_ID()").Scan(&n)
		return err == nil && n == 0
	})
	l, err := b.Acquire(ctx, key, lockmw.WithWait(ttl/6))
	if errors.Is(err, lockmw.ErrNotAcquired) {
		r, _ := readRow(t, watch, key)
		t.Fatalf("the key stayed held after the failed acquisition's give-back (its row: %+v): %v", r, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
}

// An acquisition sent while mariadbd is paused (SIGSTOP), whose caller
// gave up before the server answered, runs when the server resumes: the
// Locker's give-back must end it before releasing, so that after the
// resume every such key is acquirable by another Locker well before the
// (long) TTL, and no give-back is warned about. Outcomes are counted; the
// wait bound (a sixth of the TTL) is a liveness bound, not a timing one.
func TestPausedAcquisitionLeavesNoLock(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	const ttl = 30 * time.Second
	logs := &lockmwtest.Logs{}
	a := newLocker(t, srv, lockmw.WithTTL(ttl), lockmw.WithLogger(slog.New(logs)))
	b := newLocker(t, srv, lockmw.WithTTL(ttl))
	ctx := bg(t)
	const keys = 16
	// Each key's row, and a connection of a's pool for each, made before
	// the pause.
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			if l, err := a.TryAcquire(ctx, fmt.Sprintf("paused-%d", i)); err == nil {
				_ = l.Release(ctx)
			}
		})
	}
	wg.Wait()
	srv.Pause(t)
	for i := range keys {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			if _, err := a.TryAcquire(actx, fmt.Sprintf("paused-%d", i)); err == nil {
				t.Error("TryAcquire on a paused server succeeded")
			}
		})
	}
	wg.Wait()
	srv.Resume(t)
	var stuck atomic.Int32
	for i := range keys {
		wg.Go(func() {
			l, err := b.Acquire(ctx, fmt.Sprintf("paused-%d", i), lockmw.WithWait(ttl/6))
			switch {
			case errors.Is(err, lockmw.ErrNotAcquired):
				stuck.Add(1)
			case err != nil:
				t.Errorf("Acquire after the resume: %v", err)
			default:
				_ = l.Release(ctx)
			}
		})
	}
	wg.Wait()
	if n := stuck.Load(); n > 0 {
		t.Errorf("%d of %d keys whose acquisition was sent during the pause stayed held after the resume", n, keys)
	}
	if got := logs.Find(slog.LevelWarn, "could not give back"); len(got) > 0 {
		t.Errorf("give-backs warned about: %q", lockmwtest.Texts(got))
	}
}
