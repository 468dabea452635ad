package mysql

import (
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// A busy attempt's reply tells holdings apart (Seen, from the holder's
// fence) and still says what the holder has left: the same holding gives
// the same Seen, a new one another.
func TestBusyReplyTellsHoldingsApart(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	ctx := tctx(t)
	k := store.Key{Prefix: "p:", Name: "seen"}
	busy := func() store.Reply {
		t.Helper()
		r, err := s.Acquire(ctx, k, "waiter", time.Minute, true)
		if err != nil || r.Acquired {
			t.Fatalf("attempt on a held lock: %+v, %v", r, err)
		}
		if r.HolderTTL <= 0 || r.HolderTTL > time.Minute {
			t.Fatalf("busy reply %+v: HolderTTL not within (0, 1m]", r)
		}
		return r
	}
	if r, err := s.Acquire(ctx, k, "first", time.Minute, true); err != nil || !r.Acquired {
		t.Fatalf("first holder: %+v, %v", r, err)
	}
	a, b := busy(), busy()
	if a.Seen == 0 || a.Seen != b.Seen {
		t.Fatalf("two attempts during one holding saw Seen %d and %d; want the same, not 0", a.Seen, b.Seen)
	}
	if o, err := s.Release(ctx, k, "first"); err != nil || o != store.Owned {
		t.Fatalf("release: %v, %v", o, err)
	}
	if r, err := s.Acquire(ctx, k, "second", time.Minute, true); err != nil || !r.Acquired {
		t.Fatalf("second holder: %+v, %v", r, err)
	}
	if c := busy(); c.Seen == 0 || c.Seen == a.Seen {
		t.Fatalf("an attempt during the next holding saw Seen %d, the first holding's was %d; want another, not 0", c.Seen, a.Seen)
	}
}

// WaitFree's pause follows what the attempts saw: at most churnPause while
// each attempt finds a new holding, doubling up to BackoffMax while one
// holding lasts, and short again once the lock changes hands.
func TestPauseFollowsHoldings(t *testing.T) {
	var p pacer
	k := store.Key{Prefix: "p:", Name: "pace"}
	for i := range 20 {
		if d := p.next(k, int64(i+1)); d > churnPause {
			t.Fatalf("pause %d, after a new holding: %v, want at most %v", i, d, churnPause)
		}
	}
	var d time.Duration
	for range 20 {
		d = p.next(k, 99)
	}
	if d < BackoffMax/2 || d > BackoffMax {
		t.Fatalf("pause while one holding lasts: %v, want within [%v, %v]", d, BackoffMax/2, BackoffMax)
	}
	if d := p.next(k, 100); d > churnPause {
		t.Fatalf("pause after the lock changed hands: %v, want at most %v", d, churnPause)
	}
	// A busy reply that tells nothing (the queue held the attempt back:
	// Seen 0) is not a new holding.
	p.next(k, 0)
	if d := p.next(k, 0); d <= churnPause {
		t.Fatalf("pause after two replies that told nothing: %v, want above %v (backing off)", d, churnPause)
	}
}

// The Fair pace is biased low: a shorter wait pulls it halfway down, a
// longer one lifts it by at most an eighth of twice the pace. (Lifted as
// fast as it fell, a pace inflated by one late hand-over made the next
// waiters first in line sleep through theirs.)
func TestFairPaceBiasedLow(t *testing.T) {
	from := time.Now()
	w := poller{from: from, per: 4 * time.Millisecond}
	if got := w.sample(from.Add(time.Millisecond)); got > 5*time.Millisecond/2 {
		t.Errorf("pace 4ms after a 1ms wait: %v, want at most 2.5ms", got)
	}
	if got := w.sample(from.Add(time.Second)); got > 9*time.Millisecond/2 {
		t.Errorf("pace 4ms after a 1s wait: %v, want at most 4.5ms", got)
	}
}

// A Fair waiter first in line whose hand-over is late, but within eight
// times the pace, keeps polling at least every quarter of the pace; later,
// it backs off to BackoffMax.
func TestFirstInLineLateKeepsPolling(t *testing.T) {
	per := 4 * time.Millisecond
	w := poller{from: time.Now(), per: per, backoff: pollFast, firstAt: time.Now().Add(-3 * per)}
	for i := range 30 {
		if d := w.next(); d > per/4 {
			t.Fatalf("poll %d, 3 paces after becoming first: pause %v, want at most %v", i, d, per/4)
		}
	}
	w.firstAt = time.Now().Add(-9 * per)
	var d time.Duration
	for range 30 {
		d = w.next()
	}
	if d < BackoffMax/2 {
		t.Fatalf("9 paces after becoming first: pause %v, want backed off to [%v, %v]", d, BackoffMax/2, BackoffMax)
	}
}

// A plain attempt on a lock that no Fair waiter queued for does not read
// the queue: it is not held up by a queue entry another transaction is
// writing (a subquery of a write reads with locks: it waited for that
// transaction, and cost every acquisition a third of its server time).
// Once a Fair waiter queued for the lock, attempts read the queue again.
func TestPlainAttemptSkipsAnUnusedQueue(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	k := store.Key{Prefix: "p:", Name: "unused-queue"}
	if r, err := s.Acquire(ctx, k, "first", time.Minute, true); err != nil || !r.Acquired {
		t.Fatalf("first holder: %+v, %v", r, err)
	}
	if o, err := s.Release(ctx, k, "first"); err != nil || o != store.Owned {
		t.Fatalf("release: %v, %v", o, err)
	}
	tx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "INSERT INTO lockmw_locks_queue (prefix, name, token, seq, expires_at, handover) VALUES (?, ?, 'writing', 1, UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE, 1)", k.Prefix, k.Name); err != nil {
		t.Fatal(err)
	}
	// Bounded by the server at 4/5 of the TTL: an attempt held up by the
	// uncommitted entry fails with ErrStatementTimeout.
	r, err := s.Acquire(ctx, k, "plain", MinTTL, true)
	if err != nil || !r.Acquired {
		t.Fatalf("plain attempt beside an uncommitted queue entry: %+v, %v; want the lock", r, err)
	}
}

// oldTake is the acquisition statement of the version before queue_seen
// (it names only the columns it knows, and reads the queue in its WHERE),
// for token on k.
func oldTake(k store.Key, token string) string {
	expired := "expires_at <= UTC_TIMESTAMP(6)"
	return "INSERT INTO lockmw_locks (prefix, name, token, fence, expires_at) SELECT " + hexLit(k.Prefix) + ", " + hexLit(k.Name) + ", " + hexLit(token) +
		", LAST_INSERT_ID(NEXTVAL(lockmw_locks_fence)), UTC_TIMESTAMP(6) + INTERVAL 60000000 MICROSECOND FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM lockmw_locks_queue q WHERE " +
		keyWhere("q", k) + " AND q.expires_at > UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE token = IF(" + expired + ", VALUES(token), token), fence = IF(" + expired +
		", LAST_INSERT_ID(NEXTVAL(lockmw_locks_fence)), fence), expires_at = IF(" + expired + ", VALUES(expires_at), IF(LAST_INSERT_ID(4611686018427387904 + " +
		"TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)) IS NULL, NULL, expires_at))"
}

// Lockers of the version before queue_seen and of this one exclude each
// other on a migrated table, fences rising across them: each takes the
// row only when it is free, and the earlier version's row (queue_seen 1,
// its default) makes this version's attempts read the queue.
func TestEarlierVersionExcludedOnMigratedTable(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	k := store.Key{Prefix: "p:", Name: "mixed"}
	old := func(token string) (fence int64, took bool) {
		t.Helper()
		res, err := admin.ExecContext(ctx, oldTake(k, token))
		if err != nil {
			t.Fatal(err)
		}
		id, _ := res.LastInsertId()
		n, _ := res.RowsAffected()
		return id, n > 0 && id&busyFlag == 0
	}
	oldRelease := func(token string) {
		t.Helper()
		if _, err := admin.ExecContext(ctx, "UPDATE lockmw_locks SET token = X'', expires_at = UTC_TIMESTAMP(6) WHERE prefix = ? AND name = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)", k.Prefix, k.Name, token); err != nil {
			t.Fatal(err)
		}
	}
	f1, took := old("old-1")
	if !took {
		t.Fatal("the earlier version's statement did not take a free lock")
	}
	var seen int
	if err := admin.QueryRowContext(ctx, "SELECT queue_seen FROM lockmw_locks WHERE prefix = ? AND name = ?", k.Prefix, k.Name).Scan(&seen); err != nil || seen != 1 {
		t.Fatalf("queue_seen of the earlier version's row: %d, %v; want 1", seen, err)
	}
	if r, err := s.Acquire(ctx, k, "new-1", time.Minute, true); err != nil || r.Acquired {
		t.Fatalf("this version's attempt while the earlier one holds: %+v, %v; want busy", r, err)
	}
	oldRelease("old-1")
	r, err := s.Acquire(ctx, k, "new-1", time.Minute, true)
	if err != nil || !r.Acquired || r.Fence <= uint64(f1) {
		t.Fatalf("this version's attempt after the release: %+v, %v; want the lock with a fence above %d", r, err, f1)
	}
	if _, took := old("old-2"); took {
		t.Fatal("the earlier version's statement took the lock this version holds")
	}
	if o, err := s.Release(ctx, k, "new-1"); err != nil || o != store.Owned {
		t.Fatalf("release: %v, %v", o, err)
	}
	f2, took := old("old-2")
	if !took || f2 <= int64(r.Fence) {
		t.Fatalf("the earlier version after this one's release: took %v, fence %d; want the lock with a fence above %d", took, f2, r.Fence)
	}
}
