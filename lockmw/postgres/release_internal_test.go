package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// A release of a lock its store has not found busy lately (Release): a
// cheap batch that deletes the row when nobody else is queued, followed by
// the hand-over's batch when someone is.

// releases returns the kinds of release batches sent since the last
// call: "free" (the cheap one) or "handover".
func (b *batches) releases(s *pgStore) []string {
	return b.sent(map[string]string{s.sql.lockOwn: "free", s.sql.release: "handover"})
}

// TestFreeLockReleasedCheaply: the release of a lock nobody waits for
// sends the cheap batch alone, and leaves nothing behind.
func TestFreeLockReleasedCheaply(t *testing.T) {
	ctx, pool, s, tr := tracedStore(t)
	k := store.Key{Prefix: "lockmw:", Name: "cheap"}
	if r, err := s.Acquire(ctx, k, "h", handTTL, true); err != nil || !r.Acquired {
		t.Fatalf("h's acquisition: %+v, %v", r, err)
	}
	tr.releases(s)
	o, err := s.Release(ctx, k, "h")
	if err != nil || o != store.Owned {
		t.Fatalf("h's release: %v, %v; want Owned", o, err)
	}
	if got := tr.releases(s); strings.Join(got, ",") != "free" {
		t.Fatalf("the release of a lock nobody waits for sent %v, want the cheap batch alone", got)
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM lockmw_locks) + (SELECT count(*) FROM lockmw_locks_queue)").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("%d rows left after the release", rows)
	}
	// Released again (or never held): Missing. The cheap batch finds no
	// row of h's, and the hand-over's batch follows, which would wake the
	// first waiter if one were queued and tells Taken from Missing.
	if o, err := s.Release(ctx, k, "h"); err != nil || o != store.Missing {
		t.Fatalf("h's second release: %v, %v; want Missing", o, err)
	}
	if got := tr.releases(s); strings.Join(got, ",") != "free,handover" {
		t.Fatalf("the release of a token without a row sent %v, want the cheap batch, then the hand-over's", got)
	}
}

// TestUncontendedLockAndUnlockStatements: a waiting acquisition of a free
// lock and its release send three plain statements: the upsert, which
// draws the fence itself (the first attempt reads nothing more: a queued
// attempt would follow at once), and the row's lock and delete (a token
// that never queued has no entry to delete).
func TestUncontendedLockAndUnlockStatements(t *testing.T) {
	ctx, _, s, tr := tracedStore(t)
	k := store.Key{Prefix: "lockmw:", Name: "four"}
	for i := range 3 {
		tr.statements(s)
		r, err := s.Enqueue(ctx, k, "h", handTTL, true)
		if err != nil || !r.Acquired || r.Fence == 0 {
			t.Fatalf("round %d: h's enqueue of a free lock: %+v, %v", i, r, err)
		}
		if got := strings.Join(tr.statements(s), ","); got != "takeFresh" {
			t.Fatalf("round %d: a free lock's waiting acquisition sent %s, want takeFresh", i, got)
		}
		if o, err := s.Release(ctx, k, "h"); err != nil || o != store.Owned {
			t.Fatalf("round %d: h's release: %v, %v; want Owned", i, o, err)
		}
		if got := strings.Join(tr.statements(s), ","); got != "lockOwn,freeIfUnqueued" {
			t.Fatalf("round %d: the release of a lock nobody waits for, by a token that never queued, sent %s, want lockOwn,freeIfUnqueued", i, got)
		}
	}
}

// TestCheapReleaseDeletesQueuedTokensEntry: a token that queued has its
// entry deleted by its cheap release (or its departure), so that no
// waiter queued after it waits for an entry nobody refreshes; and, once
// released, the token is forgotten.
func TestCheapReleaseDeletesQueuedTokensEntry(t *testing.T) {
	ctx, pool, s := startStore(t)
	k := store.Key{Prefix: "lockmw:", Name: "queued-entry"}
	if r, err := s.Acquire(ctx, k, "h", handTTL, true); err != nil || !r.Acquired {
		t.Fatalf("h's acquisition: %+v, %v", r, err)
	}
	w, err := s.Enqueue(ctx, k, "w", handTTL, true)
	if err != nil || w.Acquired {
		t.Fatalf("w's enqueue behind h: %+v, %v", w, err)
	}
	if n := entries(t, ctx, pool, k, "w"); n != 1 {
		t.Fatalf("w has %d entries, want 1", n)
	}
	s.hot = store.Hot{} // not busy lately: the cheap batch
	if err := s.Leave(ctx, k, "w"); err != nil {
		t.Fatal(err)
	}
	if n := entries(t, ctx, pool, k, "w"); n != 0 {
		t.Fatalf("w's departure by the cheap batch left %d entries", n)
	}
	if _, ok := s.queued.Load("w"); ok {
		t.Fatal("w is still remembered as queued after its departure committed")
	}
}

// TestCheapReleaseHandsOver: a holder whose store has not found the lock
// busy (another Locker's waiter queued behind it) finds the waiter with
// the cheap batch, which leaves the row as it was, and hands it the lock
// with the hand-over's batch.
func TestCheapReleaseHandsOver(t *testing.T) {
	ctx, pool, a, tr := tracedStore(t)
	b := newStore(pool, a.n)
	t.Cleanup(func() { _ = b.Close() })
	k := store.Key{Prefix: "lockmw:", Name: "cheap-handover"}
	if r, err := a.Acquire(ctx, k, "h", handTTL, true); err != nil || !r.Acquired {
		t.Fatalf("h's acquisition: %+v, %v", r, err)
	}
	w, err := b.Enqueue(ctx, k, "w", handTTL, true)
	if err != nil || w.Acquired {
		t.Fatalf("w's enqueue behind h: %+v, %v", w, err)
	}
	listening(t, b, "w")
	tr.releases(a)
	if o, err := a.Release(ctx, k, "h"); err != nil || o != store.Owned {
		t.Fatalf("h's release: %v, %v; want Owned", o, err)
	}
	if got := tr.releases(a); strings.Join(got, ",") != "free,handover" {
		t.Fatalf("h's release with w queued sent %v, want the cheap batch and then the hand-over's", got)
	}
	r, err := b.WaitTurn(ctx, k, "w", handTTL, w)
	if err != nil || !r.Acquired {
		t.Fatalf("w's WaitTurn after h's release: %+v, %v; want the grant", r, err)
	}
	if token, fence, _ := leaseRow(t, ctx, pool, k); token != "w" || uint64(fence) != r.Fence {
		t.Fatalf("the row after h's release: %q with fence %d, want w's with the granted fence %d", token, fence, r.Fence)
	}
}

// TestCheapReleaseSeesWaiterEnqueuedMeanwhile: the holder's cheap release
// runs while the first waiter's enqueue is under way (the release race in
// Enqueue); it sees the waiter, and the lock is handed to it.
func TestCheapReleaseSeesWaiterEnqueuedMeanwhile(t *testing.T) {
	ctx, pool, s := startStore(t)
	k := store.Key{Prefix: "lockmw:", Name: "cheap-race"}
	if r, err := s.Acquire(ctx, k, "h", 10*time.Second, true); err != nil || !r.Acquired {
		t.Fatalf("h's acquisition: %+v, %v", r, err)
	}
	r, commit := openEnqueue(t, ctx, pool, s, k, "w")
	if r.Acquired {
		t.Fatalf("w's enqueue behind h: %+v, want busy", r)
	}
	releaseDuringWith(t, ctx, pool, func() error {
		o, err := s.Release(ctx, k, "h")
		if err == nil && o != store.Owned {
			t.Errorf("h's release: %v, want Owned", o)
		}
		return err
	}, commit)
	var tok string
	if err := pool.QueryRow(ctx, "SELECT coalesce((SELECT token FROM lockmw_locks WHERE name = $1), '')", name(k)).Scan(&tok); err != nil {
		t.Fatal(err)
	}
	if tok != "w" {
		t.Fatalf("after h's release the lock is held by %q, want w (first in the queue, handed the lock): w would wait for h's TTL", tok)
	}
}
