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
