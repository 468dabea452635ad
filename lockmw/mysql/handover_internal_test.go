package mysql

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file tests the hand-over of a release to the first queued waiter
// (releaseStmt), and how the waiter learns it: by its poll (WaitTurn) or
// by its next attempt (take's own-row branch).

// handedSetup has "holder" take k, "w" queue behind it with ttl, and the
// holder release: the release hands the lock to "w". It returns the
// holder's fence and the row's expiry as the server prints it.
func handedSetup(t *testing.T, s *sqlStore, admin *sql.DB, k store.Key, ttl time.Duration) (store.Reply, uint64, string) {
	t.Helper()
	ctx := tctx(t)
	h, err := s.Acquire(ctx, k, "holder", time.Minute, true)
	if err != nil || !h.Acquired {
		t.Fatalf("holder: %+v, %v", h, err)
	}
	r, err := s.Enqueue(ctx, k, "w", ttl, true)
	if err != nil || r.Acquired || r.Predecessor != holderMark {
		t.Fatalf("enqueue behind the holder: %+v, %v; want to wait for the holder", r, err)
	}
	if o, err := s.Release(ctx, k, "holder"); err != nil || o != store.Owned {
		t.Fatalf("release: %v, %v", o, err)
	}
	tok, fence, _, _ := rowOf(t, admin, k)
	if tok != "w" || fence <= h.Fence {
		t.Fatalf("after the release the row holds %q with fence %d, want the waiter's token with a fence above the holder's %d: the release did not hand the lock over", tok, fence, h.Fence)
	}
	return r, fence, expiryOf(t, admin, k)
}

// expiryOf is k's row's expires_at, as the server prints it.
func expiryOf(t *testing.T, admin *sql.DB, k store.Key) string {
	t.Helper()
	var e string
	if err := admin.QueryRowContext(tctx(t), "SELECT CAST(expires_at AS CHAR) FROM lockmw_locks WHERE prefix = ? AND name = ?", k.Prefix, k.Name).Scan(&e); err != nil {
		t.Fatal(err)
	}
	return e
}

// checkDated checks that a lease valid from v for ttl ends no later than
// k's row: v + ttl is at most the moment after a later read plus what the
// row had left at that read.
func checkDated(t *testing.T, admin *sql.DB, k store.Key, v time.Time, ttl time.Duration) {
	t.Helper()
	_, _, leftUs, _ := rowOf(t, admin, k)
	after := time.Now()
	if end, rowEnd := v.Add(ttl), after.Add(time.Duration(leftUs)*time.Microsecond); end.After(rowEnd) {
		t.Fatalf("the handed lease ends %v after the row expires", end.Sub(rowEnd))
	}
	if v.After(time.Now()) {
		t.Fatal("the handed lease is valid from a time after it was reported")
	}
}

// A release hands the lock to the first queued waiter in its own
// statement; the waiter's poll learns it and reports it (Acquired, with
// the fence the release drew), dated from the poll so that the lease ends
// no later than the row.
func TestHandOverLearnedByPoll(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	k := store.Key{Prefix: "p:", Name: "handed-poll"}
	ttl := 5 * time.Second
	r, fence, _ := handedSetup(t, s, admin, k, ttl)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := s.WaitTurn(wctx, k, "w", ttl, r)
	if err != nil || !got.Acquired || got.Fence != fence {
		t.Fatalf("WaitTurn after the hand-over: %+v, %v; want Acquired with the release's fence %d", got, err, fence)
	}
	checkDated(t, admin, k, got.ValidFrom, ttl)
	s.dequeuing.Wait()
	if all, _ := queueRows(t, admin, k); all != 0 {
		t.Fatalf("%d entries once the hand-over was learned, want none (the winner's is deleted)", all)
	}
	if o, err := s.Release(ctx, k, "w"); err != nil || o != store.Owned {
		t.Fatalf("release of the handed lock: %v, %v", o, err)
	}
}

// A waiter that did not learn its hand-over from a poll (its wait ran out
// first) learns it from its next attempt: take finds its own token in the
// live row and reports the holding as it is, with the release's fence and
// the row's expiry, never a new fence nor a later expiry (which would
// revive a lease past the hand-over).
func TestTakeReportsOwnHandedRow(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	k := store.Key{Prefix: "p:", Name: "handed-take"}
	ttl := 5 * time.Second
	_, fence, expiry := handedSetup(t, s, admin, k, ttl)
	got, err := s.Enqueue(ctx, k, "w", ttl, true)
	if err != nil || !got.Acquired || got.Fence != fence {
		t.Fatalf("Enqueue after the hand-over: %+v, %v; want Acquired with the release's fence %d", got, err, fence)
	}
	if e := expiryOf(t, admin, k); e != expiry {
		t.Fatalf("the attempt moved the handed row's expiry from %s to %s", expiry, e)
	}
	if _, f, _, _ := rowOf(t, admin, k); f != fence {
		t.Fatalf("the attempt drew fence %d over the release's %d", f, fence)
	}
	checkDated(t, admin, k, got.ValidFrom, ttl)
	// A plain attempt of the same token (Acquire) reports it the same way.
	again, err := s.Acquire(ctx, k, "w", ttl, true)
	if err != nil || !again.Acquired || again.Fence != fence {
		t.Fatalf("Acquire of the holder's own token: %+v, %v; want Acquired with fence %d", again, err, fence)
	}
	if e := expiryOf(t, admin, k); e != expiry {
		t.Fatalf("the attempt moved the handed row's expiry from %s to %s", expiry, e)
	}
}

// Rolling upgrade: a Locker made before hand-overs queues entries without
// the column handover (0), and its waiter learns nothing from a handed
// row: a release never hands it the lock, but leaves the row free, and the
// old waiter's attempt takes it. The old Locker's release (no hand-over)
// leaves the row free for a new waiter queued behind, whose wait ends
// and whose attempt takes it.
func TestReleaseSkipsOldWaiters(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	k := store.Key{Prefix: "p:", Name: "old-waiter"}
	ttl := 5 * time.Second
	if h, err := s.Acquire(ctx, k, "holder", time.Minute, true); err != nil || !h.Acquired {
		t.Fatalf("holder: %+v, %v", h, err)
	}
	// The old Locker's Enqueue: its statement names no handover column.
	if _, err := admin.ExecContext(ctx, "INSERT INTO lockmw_locks_queue (prefix, name, token, seq, expires_at) VALUES (?, ?, 'old', NEXTVAL(lockmw_locks_fence), UTC_TIMESTAMP(6) + INTERVAL 5 SECOND)", k.Prefix, k.Name); err != nil {
		t.Fatal(err)
	}
	r, err := s.Enqueue(ctx, k, "new", ttl, true)
	if err != nil || r.Acquired || r.Predecessor != "old" {
		t.Fatalf("new waiter behind the old one: %+v, %v", r, err)
	}
	if o, err := s.Release(ctx, k, "holder"); err != nil || o != store.Owned {
		t.Fatalf("release: %v, %v", o, err)
	}
	if tok, _, left, _ := rowOf(t, admin, k); tok != "" || left > 0 {
		t.Fatalf("after the release the row holds %q for %dµs, want it free: the old waiter, first, learns nothing of a hand-over", tok, left)
	}
	// The old waiter's attempt (the same statement in both versions).
	old, err := s.take(ctx, k, "old", ttl, true)
	if err != nil || !old.Acquired {
		t.Fatalf("the old waiter's attempt on the free lock: %+v, %v", old, err)
	}
	if _, err := admin.ExecContext(ctx, "DELETE FROM lockmw_locks_queue WHERE token = 'old'"); err != nil {
		t.Fatal(err)
	}
	// The old Locker's release: no hand-over.
	if _, err := admin.ExecContext(ctx, "UPDATE lockmw_locks SET token = X'', expires_at = UTC_TIMESTAMP(6) WHERE prefix = ? AND name = ? AND token = 'old' AND expires_at > UTC_TIMESTAMP(6)", k.Prefix, k.Name); err != nil {
		t.Fatal(err)
	}
	done, err := s.WaitTurn(ctx, k, "new", ttl, r)
	if err != nil || done.Acquired {
		t.Fatalf("the new waiter's wait after the old release: %+v, %v; want it to end, free", done, err)
	}
	got, err := s.Enqueue(ctx, k, "new", ttl, true)
	if err != nil || !got.Acquired || got.Fence <= old.Fence {
		t.Fatalf("the new waiter's attempt: %+v, %v; want the lock, fence above %d", got, err, old.Fence)
	}
}
