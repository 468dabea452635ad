package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// The release race (see Enqueue): a waiter whose enqueue transaction is
// under way while the lock is released, or while the waiter before it
// leaves, must be named by that release's notification (or take the lock
// itself). These tests hold the waiter's transaction open at the point
// where it was missed, run the release, and commit.

// openEnqueue runs token's queued acquisition on k in a transaction it
// leaves open, and returns the reply and the commit.
func openEnqueue(t *testing.T, ctx context.Context, pool *pgxpool.Pool, s *pgStore, k store.Key, token string) (store.Reply, func()) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	s.queued.Store(token, struct{}{}) // as take does for a queued attempt
	r, _, err := s.takeResult(tx.SendBatch(ctx, s.takeBatch(name(k), token, 10*time.Second, queuedAttempt, false)), time.Now(), 10*time.Second, queuedAttempt, false)
	if err != nil {
		t.Fatal(err)
	}
	return r, func() {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// releaseDuring runs token's release batch on k while the transaction commit
// ends is open: it waits until the release either waits for a lock or is
// done, commits, and returns how many waiters the release woke.
func releaseDuring(t *testing.T, ctx context.Context, pool *pgxpool.Pool, s *pgStore, k store.Key, token string, commit func()) int64 {
	t.Helper()
	var woke int64
	releaseDuringWith(t, ctx, pool, func() error {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		_, woke, _, err = releaseResult(c.SendBatch(ctx, s.releaseBatch(name(k), token)))
		return err
	}, commit)
	return woke
}

// releaseDuringWith runs release while the transaction commit ends is
// open, as releaseDuring does.
func releaseDuringWith(t *testing.T, ctx context.Context, pool *pgxpool.Pool, release func() error, commit func()) {
	t.Helper()
	type result struct{ err error }
	done := make(chan result, 1)
	go func() { done <- result{release()} }()
	var r *result
	deadline := time.Now().Add(30 * time.Second)
	for r == nil {
		var waiting int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case res := <-done:
			r = &res
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the release neither waits nor ends")
		}
	}
	commit()
	if r == nil {
		res := <-done
		r = &res
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
}

// TestReleaseWakesWaiterEnqueuedMeanwhile: the holder releases while the
// first waiter's enqueue is under way; the release names it.
func TestReleaseWakesWaiterEnqueuedMeanwhile(t *testing.T) {
	ctx, pool, s := startStore(t)
	k := store.Key{Prefix: "lockmw:", Name: "race"}
	if r, err := s.Acquire(ctx, k, "h", 10*time.Second, true); err != nil || !r.Acquired {
		t.Fatalf("h's acquisition: %+v, %v", r, err)
	}
	r, commit := openEnqueue(t, ctx, pool, s, k, "w")
	if r.Acquired || r.HolderTTL < time.Second {
		t.Fatalf("w's enqueue behind h: %+v, want busy for h's TTL", r)
	}
	if woke := releaseDuring(t, ctx, pool, s, k, "h", commit); woke != 1 {
		t.Fatalf("h's release woke %d waiters, want 1 (w, first in the queue): w would wait for h's TTL", woke)
	}
	// The release's second statement saw w's entry, and handed w the lock.
	if tok, _, _ := leaseRow(t, ctx, pool, k); tok != "w" {
		t.Fatalf("after h's release the row is %q's, want w's (handed in the release's transaction)", tok)
	}
}

// TestLeaveWakesWaiterEnqueuedMeanwhile: the first waiter leaves a free
// lock's queue while the next one's enqueue is under way; the leaving
// waiter's release names it.
func TestLeaveWakesWaiterEnqueuedMeanwhile(t *testing.T) {
	ctx, pool, s := startStore(t)
	k := store.Key{Prefix: "lockmw:", Name: "race"}
	if r, err := s.Acquire(ctx, k, "h", 10*time.Second, true); err != nil || !r.Acquired {
		t.Fatalf("h's acquisition: %+v, %v", r, err)
	}
	if r, err := s.Enqueue(ctx, k, "e", 10*time.Second, true); err != nil || r.Acquired {
		t.Fatalf("e's enqueue: %+v, %v", r, err)
	}
	// e's entry as a Locker before hand-overs writes it, so that h's
	// release leaves the lock free, e first (a release hands the lock to
	// an entry that takes hand-overs).
	if _, err := pool.Exec(ctx, "UPDATE lockmw_locks_queue SET handover = NULL WHERE token = 'e'"); err != nil {
		t.Fatal(err)
	}
	r, commit := openEnqueue(t, ctx, pool, s, k, "w")
	if r.Acquired {
		t.Fatalf("w's enqueue behind e: %+v, want busy", r)
	}
	if _, err := s.Release(ctx, k, "h"); err != nil {
		t.Fatal(err)
	}
	if woke := releaseDuring(t, ctx, pool, s, k, "e", commit); woke != 1 {
		t.Fatalf("e's leaving woke %d waiters, want 1 (w, now first in the queue of a free lock): w would wait for e's TTL", woke)
	}
}
