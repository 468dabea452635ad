package mysql

import (
	"database/sql"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// This file tests takeRow: a plain attempt on a row the store saw, one
// UPDATE with neither the queue's subquery nor an insert attempt, and its
// ways back to the full statement.

// comInserts is how many INSERT statements the server has run.
func comInserts(t *testing.T, admin *sql.DB) int64 {
	t.Helper()
	var name string
	var n int64
	if err := admin.QueryRowContext(tctx(t), "SHOW GLOBAL STATUS LIKE 'Com_insert'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A plain acquisition of a lock whose row the store saw (queue_seen = 0)
// is one UPDATE: no INSERT reaches the server, and the fences still rise,
// drawn in that UPDATE.
func TestPlainAttemptOnKnownRowInsertsNothing(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	k := store.Key{Prefix: "p:", Name: "known"}
	r, err := s.Acquire(ctx, k, "t0", time.Minute, true)
	if err != nil || !r.Acquired {
		t.Fatalf("first acquisition: %+v, %v", r, err)
	}
	if _, err := s.Release(ctx, k, "t0"); err != nil {
		t.Fatal(err)
	}
	before := comInserts(t, admin)
	last := r.Fence
	for _, tok := range []string{"t1", "t2", "t3"} {
		r, err := s.Acquire(ctx, k, tok, time.Minute, true)
		if err != nil || !r.Acquired || r.Fence <= last {
			t.Fatalf("acquisition by %s: %+v, %v; want Acquired with a fence above %d", tok, r, err, last)
		}
		if got, f, _, _ := rowOf(t, admin, k); got != tok || f != r.Fence {
			t.Fatalf("the row holds %q with fence %d, want %s with %d", got, f, tok, r.Fence)
		}
		last = r.Fence
		if _, err := s.Release(ctx, k, tok); err != nil {
			t.Fatal(err)
		}
	}
	if n := comInserts(t, admin) - before; n != 0 {
		t.Fatalf("%d INSERT statements for three plain acquisitions of a known row, want 0 (one UPDATE each)", n)
	}
}

// takeRow answers busy, and the caller's own live row, as the full
// statement does: busy with the holder's time left and fence bits, own
// with the row's fence and expiry untouched.
func TestPlainAttemptOnKnownRowBusyAndOwn(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	k := store.Key{Prefix: "p:", Name: "known-busy"}
	h, err := s.Acquire(ctx, k, "holder", time.Minute, true)
	if err != nil || !h.Acquired {
		t.Fatalf("holder: %+v, %v", h, err)
	}
	if s.rows.of(k) != rowPlain {
		t.Fatal("the store did not note the row it inserted")
	}
	b, err := s.Acquire(ctx, k, "other", time.Minute, true)
	if err != nil || b.Acquired || b.HolderTTL <= 0 || b.Seen != int64(1+h.Fence&seenMask) {
		t.Fatalf("attempt on the held row: %+v, %v; want busy with time left and Seen %d", b, err, 1+h.Fence&seenMask)
	}
	expiry := expiryOf(t, admin, k)
	own, err := s.Acquire(ctx, k, "holder", time.Minute, true)
	if err != nil || !own.Acquired || own.Fence != h.Fence {
		t.Fatalf("attempt of the holder's own token: %+v, %v; want Acquired with fence %d", own, err, h.Fence)
	}
	if e := expiryOf(t, admin, k); e != expiry {
		t.Fatalf("the attempt moved the row's expiry from %s to %s", expiry, e)
	}
	checkDated(t, admin, k, own.ValidFrom, time.Minute)
}

// A row the store saw plain may change behind it: a Fair waiter of another
// Locker queues for it (queue_seen = 1), or the cleanup deletes it. The
// plain attempt then still passes no live entry, and still inserts the
// missing row.
func TestPlainAttemptOnKnownRowFallsBack(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	k := store.Key{Prefix: "p:", Name: "known-changed"}
	r, err := s.Acquire(ctx, k, "t0", time.Minute, true)
	if err != nil || !r.Acquired {
		t.Fatalf("first acquisition: %+v, %v", r, err)
	}
	if _, err := s.Release(ctx, k, "t0"); err != nil {
		t.Fatal(err)
	}
	// Another Locker's Fair waiter: it marks the row, then queues.
	if _, err := admin.ExecContext(ctx, "UPDATE lockmw_locks SET queue_seen = 1 WHERE prefix = ? AND name = ?", k.Prefix, k.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, "INSERT INTO lockmw_locks_queue (prefix, name, token, seq, expires_at, handover) VALUES (?, ?, 'fair', 1, UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE, 1)", k.Prefix, k.Name); err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, k, "t1", time.Minute, true)
	if err != nil || b.Acquired {
		t.Fatalf("plain attempt on a free row with a live Fair entry: %+v, %v; want busy (the entry is first)", b, err)
	}
	if s.rows.of(k) != rowQueued {
		t.Fatal("the store did not note that the row's queue is read")
	}
	if _, err := admin.ExecContext(ctx, "DELETE FROM lockmw_locks_queue"); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Acquire(ctx, k, "t2", time.Minute, true); err != nil || !r.Acquired {
		t.Fatalf("plain attempt once the entry left: %+v, %v", r, err)
	}
	if s.rows.of(k) != rowQueued {
		t.Fatal("a takeover of a row with queue_seen = 1 was noted as plain")
	}
	if _, err := s.Release(ctx, k, "t2"); err != nil {
		t.Fatal(err)
	}

	// The cleanup deleted the row: the attempt inserts it anew.
	g := store.Key{Prefix: "p:", Name: "known-deleted"}
	if r, err := s.Acquire(ctx, g, "t0", time.Minute, true); err != nil || !r.Acquired {
		t.Fatalf("first acquisition: %+v, %v", r, err)
	}
	if _, err := s.Release(ctx, g, "t0"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, "DELETE FROM lockmw_locks WHERE prefix = ? AND name = ?", g.Prefix, g.Name); err != nil {
		t.Fatal(err)
	}
	r, err = s.Acquire(ctx, g, "t1", time.Minute, true)
	if err != nil || !r.Acquired {
		t.Fatalf("attempt on a deleted row: %+v, %v; want Acquired (inserted)", r, err)
	}
	if got, _, _, ok := rowOf(t, admin, g); !ok || got != "t1" {
		t.Fatalf("the row after the attempt: %q (exists %v), want t1's", got, ok)
	}
}

// queueSeen is k's row's queue_seen.
func queueSeen(t *testing.T, admin *sql.DB, k store.Key) int {
	t.Helper()
	var n int
	if err := admin.QueryRowContext(tctx(t), "SELECT queue_seen FROM lockmw_locks WHERE prefix = ? AND name = ?", k.Prefix, k.Name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A Fair attempt that takes a free lock marks nothing (it queues no
// entry), so an uncontended Fair acquisition leaves plain attempts their
// one UPDATE, and is one UPDATE itself; a Fair attempt found busy marks
// the row before its waiter queues, so that a plain attempt of another
// Locker, sure the row was plain, still does not pass the waiter.
func TestFairAttemptMarksRowOnlyWhenBusy(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	other := &sqlStore{db: s.db, n: s.n, retention: Retention}
	k := store.Key{Prefix: "p:", Name: "fair-mark"}
	for i, tok := range []string{"f0", "f1"} {
		before := comInserts(t, admin)
		r, err := s.Enqueue(ctx, k, tok, time.Minute, true)
		if err != nil || !r.Acquired {
			t.Fatalf("Fair attempt %s on the free lock: %+v, %v", tok, r, err)
		}
		if q := queueSeen(t, admin, k); q != 0 {
			t.Fatalf("after Fair attempt %s took the free lock, queue_seen = %d, want 0: no entry was queued", tok, q)
		}
		if n := comInserts(t, admin) - before; i > 0 && n != 0 {
			t.Fatalf("a Fair acquisition of a known free row ran %d INSERT statements, want 0", n)
		}
		if _, err := s.Release(ctx, k, tok); err != nil {
			t.Fatal(err)
		}
	}
	// A Locker that never saw the row takes it over with the full
	// statement: no mark either.
	fresh := &sqlStore{db: s.db, n: s.n, retention: Retention}
	if r, err := fresh.Enqueue(ctx, k, "f2", time.Minute, true); err != nil || !r.Acquired {
		t.Fatalf("Fair attempt of another Locker on the free lock: %+v, %v", r, err)
	}
	if q := queueSeen(t, admin, k); q != 0 {
		t.Fatalf("after another Locker's Fair attempt took the free lock, queue_seen = %d, want 0", q)
	}
	if _, err := fresh.Release(ctx, k, "f2"); err != nil {
		t.Fatal(err)
	}
	if r, err := other.Acquire(ctx, k, "h", time.Minute, true); err != nil || !r.Acquired {
		t.Fatalf("holder: %+v, %v", r, err)
	}
	w, err := s.Enqueue(ctx, k, "w", time.Minute, true)
	if err != nil || w.Acquired || w.Predecessor != holderMark {
		t.Fatalf("Fair attempt on the held lock: %+v, %v; want to wait for the holder", w, err)
	}
	if q := queueSeen(t, admin, k); q != 1 {
		t.Fatalf("after a busy Fair attempt queued, queue_seen = %d, want 1", q)
	}
	if _, err := other.Release(ctx, k, "h"); err != nil {
		t.Fatal(err)
	}
	if other.rows.of(k) != rowPlain {
		t.Fatal("the other store did not note the row as plain")
	}
	if p, err := other.Acquire(ctx, k, "p", time.Minute, true); err != nil || p.Acquired {
		t.Fatalf("plain attempt of another Locker past a queued Fair waiter: %+v, %v; want busy", p, err)
	}
	if r, err := s.Enqueue(ctx, k, "w", time.Minute, true); err != nil || !r.Acquired {
		t.Fatalf("the Fair waiter's attempt: %+v, %v", r, err)
	}
	s.dequeuing.Wait()
}

// The full statement keeps its decision in @lockmw_take, a variable of its
// connection, which a pool shares with the application's own statements:
// it leaves the variable NULL, as if never set, whatever it decided.
func TestFullStatementLeavesNoSessionVariable(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	s.db.SetMaxOpenConns(1) // the statements and the check share one connection
	k := store.Key{Prefix: "p:", Name: "session-var"}
	check := func(what string) {
		t.Helper()
		var v sql.NullString
		if err := s.db.QueryRowContext(ctx, "SELECT @lockmw_take").Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v.Valid {
			t.Fatalf("after %s, @lockmw_take = %q on the pool's connection, want NULL", what, v.String)
		}
	}
	if r, err := s.Enqueue(ctx, k, "a", time.Minute, true); err != nil || !r.Acquired {
		t.Fatalf("first acquisition: %+v, %v", r, err)
	}
	if _, err := s.Release(ctx, k, "a"); err != nil {
		t.Fatal(err)
	}
	// The row marked (a Fair waiter queued once): every attempt is the
	// full statement.
	if _, err := admin.ExecContext(ctx, "UPDATE lockmw_locks SET queue_seen = 1"); err != nil {
		t.Fatal(err)
	}
	s.rows.saw(k, rowQueued, false)
	if r, err := s.Enqueue(ctx, k, "b", time.Minute, true); err != nil || !r.Acquired {
		t.Fatalf("takeover: %+v, %v", r, err)
	}
	check("a takeover")
	if r, err := s.Acquire(ctx, k, "c", time.Minute, true); err != nil || r.Acquired {
		t.Fatalf("attempt on the held lock: %+v, %v", r, err)
	}
	check("a busy attempt")
}

// A Locker that first meets a lock by a Fair attempt taking its existing,
// free row notes the row too: its next attempts are one UPDATE.
func TestFairTakeoverNotesRow(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	k := store.Key{Prefix: "p:", Name: "fair-takeover"}
	if _, err := admin.ExecContext(ctx, "INSERT INTO lockmw_locks (prefix, name, token, fence, expires_at, queue_seen) VALUES (?, ?, '', 1, UTC_TIMESTAMP(6), 0)", k.Prefix, k.Name); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"f0", "f1", "f2"} {
		if r, err := s.Enqueue(ctx, k, tok, time.Minute, true); err != nil || !r.Acquired {
			t.Fatalf("Fair attempt %s: %+v, %v", tok, r, err)
		}
		if _, err := s.Release(ctx, k, tok); err != nil {
			t.Fatal(err)
		}
	}
	if s.rows.of(k) != rowPlain {
		t.Fatalf("after Fair takeovers of a plain row the store notes %d, want rowPlain (%d)", s.rows.of(k), rowPlain)
	}
}
