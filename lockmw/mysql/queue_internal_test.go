package mysql

import (
	"database/sql"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// queueRows counts k's queue entries: all, and the unexpired ones.
func queueRows(t *testing.T, admin *sql.DB, k store.Key) (all, live int) {
	t.Helper()
	err := admin.QueryRowContext(tctx(t), "SELECT COUNT(*), COALESCE(SUM(expires_at > UTC_TIMESTAMP(6)), 0) FROM lockmw_locks_queue WHERE prefix = ? AND name = ?",
		k.Prefix, k.Name).Scan(&all, &live)
	if err != nil {
		t.Fatal(err)
	}
	return all, live
}

// A Fair waiter whose process died (its entry is queued, and nobody keeps
// it alive) holds back plain attempts on the free lock only until the
// entry expires; the sweep then deletes it. A live entry before a queued
// waiter holds that waiter back the same way, and a waiter whose own entry
// expired queues anew, last.
func TestDeadFairWaiterBlocksAtMostItsTTL(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	k := store.Key{Prefix: "p:", Name: "dead-waiter"}
	h, err := s.Acquire(ctx, k, "holder", time.Minute, true)
	if err != nil || !h.Acquired {
		t.Fatalf("holder: %+v, %v", h, err)
	}
	r, err := s.Enqueue(ctx, k, "dead", time.Minute, true)
	if err != nil || r.Acquired || r.Predecessor != holderMark || r.HolderTTL <= 0 {
		t.Fatalf("enqueue behind the holder: %+v, %v; want to wait for the holder", r, err)
	}
	r2, err := s.Enqueue(ctx, k, "second", time.Minute, true)
	if err != nil || r2.Acquired || r2.Predecessor != "dead" {
		t.Fatalf("second waiter: %+v, %v; want to wait for the first", r2, err)
	}
	// Its waiter never renews it: the entry expires (its expiry is cut
	// to 2s from now, as if its last renewal was long ago).
	if _, err := admin.ExecContext(ctx, "UPDATE lockmw_locks_queue SET expires_at = UTC_TIMESTAMP(6) + INTERVAL 2 SECOND WHERE token = 'dead'"); err != nil {
		t.Fatal(err)
	}
	if o, err := s.Release(ctx, k, "holder"); err != nil || o != store.Owned {
		t.Fatalf("release: %v, %v", o, err)
	}
	// The release handed the lock to "dead", first in line, until its
	// entry's expiry and no later: neither a plain attempt nor the second
	// waiter may take it meanwhile.
	var handed string
	var sameExpiry bool
	if err := admin.QueryRowContext(ctx, "SELECT l.token, l.expires_at = q.expires_at FROM lockmw_locks l JOIN lockmw_locks_queue q ON q.prefix = l.prefix AND q.name = l.name AND q.token = 'dead' WHERE l.prefix = ? AND l.name = ?",
		k.Prefix, k.Name).Scan(&handed, &sameExpiry); err != nil {
		t.Fatal(err)
	}
	if handed != "dead" || !sameExpiry {
		t.Fatalf("after the release the row holds %q (expiring with the entry: %v), want the dead waiter's token, with its entry's expiry", handed, sameExpiry)
	}
	if r, err := s.Acquire(ctx, k, "plain", time.Second, true); err != nil || r.Acquired {
		t.Fatalf("plain attempt with the lock handed to a queued waiter: %+v, %v; want busy", r, err)
	}
	if r, err := s.Enqueue(ctx, k, "second", time.Minute, true); err != nil || r.Acquired {
		t.Fatalf("second waiter while the first holds the handed lock: %+v, %v; want busy", r, err)
	}
	// Once "dead"'s entry expired, the second waiter is first.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, live := queueRows(t, admin, k); live == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead waiter's entry did not expire")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r, err := s.Acquire(ctx, k, "plain", time.Second, true); err != nil || r.Acquired {
		t.Fatalf("plain attempt with the second waiter queued: %+v, %v; want busy", r, err)
	}
	got, err := s.Enqueue(ctx, k, "second", time.Minute, true)
	if err != nil || !got.Acquired || got.Fence <= h.Fence {
		t.Fatalf("second waiter after the dead one's entry expired: %+v, %v; want the lock, fence above %d", got, err, h.Fence)
	}
	s.dequeuing.Wait()
	if all, _ := queueRows(t, admin, k); all != 1 {
		t.Fatalf("%d entries after the hand-over, want the dead one's only (the winner's is deleted)", all)
	}
	if o, err := s.Release(ctx, k, "second"); err != nil || o != store.Owned {
		t.Fatalf("release: %v, %v", o, err)
	}
	// Nobody queued: the plain attempt takes it.
	if r, err := s.Acquire(ctx, k, "plain", time.Second, true); err != nil || !r.Acquired {
		t.Fatalf("plain attempt on a free lock, queue expired: %+v, %v", r, err)
	}
	s.cleanup()
	if all, _ := queueRows(t, admin, k); all != 0 {
		t.Fatalf("%d queue entries after the sweep, want none", all)
	}
}

// A waiter's WaitTurn ends when it may take the lock (first in line, and
// the lock free): not when a later entry leaves, nor when the entry before
// it leaves while the lock is held; then when the holder releases. A
// waiter that leaves takes its entry (and, if it had taken the lock, its
// holding) with it.
func TestWaitTurnEndsWhenFirstAndFree(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	k := store.Key{Prefix: "p:", Name: "turns"}
	ttl := 5 * time.Second
	if r, err := s.Acquire(ctx, k, "holder", time.Minute, true); err != nil || !r.Acquired {
		t.Fatalf("holder: %+v, %v", r, err)
	}
	var replies []store.Reply
	for _, tok := range []string{"a", "b", "c"} {
		r, err := s.Enqueue(ctx, k, tok, ttl, true)
		if err != nil || r.Acquired {
			t.Fatalf("enqueue %s: %+v, %v", tok, r, err)
		}
		replies = append(replies, r)
	}
	if replies[0].Predecessor != holderMark || replies[1].Predecessor != "a" || replies[2].Predecessor != "b" {
		t.Fatalf("predecessors %q %q %q, want holder, a, b", replies[0].Predecessor, replies[1].Predecessor, replies[2].Predecessor)
	}
	if replies[1].Seen != 1 || replies[2].Seen != 2 {
		t.Fatalf("places %d %d, want 1 2", replies[1].Seen, replies[2].Seen)
	}
	done := make(chan error, 1)
	go func() { _, err := s.WaitTurn(ctx, k, "b", ttl, replies[1]); done <- err }()
	notYet := func(what string) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("b's wait ended (%v) when %s", err, what)
		case <-time.After(3 * BackoffMax):
		}
	}
	if err := s.Leave(ctx, k, "c"); err != nil {
		t.Fatal(err)
	}
	notYet("c, queued after it, left")
	if err := s.Leave(ctx, k, "a"); err != nil {
		t.Fatal(err)
	}
	notYet("a left, with the lock still held")
	if all, _ := queueRows(t, admin, k); all != 1 {
		t.Fatalf("%d entries, want b's only", all)
	}
	if _, err := s.Release(ctx, k, "holder"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("b's wait: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b's wait did not end when the holder released")
	}
	if r, err := s.Enqueue(ctx, k, "b", ttl, true); err != nil || !r.Acquired {
		t.Fatalf("b after the release: %+v, %v", r, err)
	}
	if err := s.Leave(ctx, k, "b"); err != nil {
		t.Fatal(err)
	}
	if tok, _, left, _ := rowOf(t, admin, k); left > 0 {
		t.Fatalf("row held by %q after b left", tok)
	}
	if err := s.Close(); err != nil { // waits for the winner's entry delete
		t.Fatal(err)
	}
	if all, _ := queueRows(t, admin, k); all != 0 {
		t.Fatalf("%d entries left", all)
	}
}
