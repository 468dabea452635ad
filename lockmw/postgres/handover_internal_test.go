package postgres

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// The hand-over (doc.go, "Hand-over"): a release gives its row to the
// first queued waiter in its own transaction, and the waiter learns it
// from a grant notification, dated from its entry's last confirmed
// request, or from its next Enqueue, dated from what is left of the row.

const handTTL = 10 * time.Second

// leaseRow reads lock k's row.
func leaseRow(t *testing.T, ctx context.Context, pool *pgxpool.Pool, k store.Key) (token string, fence int64, expires time.Time) {
	t.Helper()
	if err := pool.QueryRow(ctx, "SELECT token, fence, expires_at FROM lockmw_locks WHERE name = $1", name(k)).Scan(&token, &fence, &expires); err != nil {
		t.Fatal(err)
	}
	return token, fence, expires
}

// entry reads token's queue entry of lock k.
func entry(t *testing.T, ctx context.Context, pool *pgxpool.Pool, k store.Key, token string) (seq int64, expires time.Time) {
	t.Helper()
	if err := pool.QueryRow(ctx, "SELECT seq, expires_at FROM lockmw_locks_queue WHERE name = $1 AND token = $2", name(k), token).Scan(&seq, &expires); err != nil {
		t.Fatal(err)
	}
	return seq, expires
}

// entries counts lock k's queue entries of token.
func entries(t *testing.T, ctx context.Context, pool *pgxpool.Pool, k store.Key, token string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM lockmw_locks_queue WHERE name = $1 AND token = $2", name(k), token).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// holdAndQueue has h take lock k and w queue behind it.
func holdAndQueue(t *testing.T, ctx context.Context, s *pgStore, k store.Key) (h, w store.Reply) {
	t.Helper()
	h, err := s.Acquire(ctx, k, "h", handTTL, true)
	if err != nil || !h.Acquired {
		t.Fatalf("h's acquisition: %+v, %v", h, err)
	}
	w, err = s.Enqueue(ctx, k, "w", handTTL, true)
	if err != nil || w.Acquired {
		t.Fatalf("w's enqueue behind h: %+v, %v", w, err)
	}
	return h, w
}

// release runs token's release batch, returning the fence it handed over.
func release(t *testing.T, ctx context.Context, pool *pgxpool.Pool, s *pgStore, k store.Key, token string) (store.Ownership, int64, uint64) {
	t.Helper()
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	o, woke, fence, err := releaseResult(c.SendBatch(ctx, s.releaseBatch(name(k), token)))
	if err != nil {
		t.Fatal(err)
	}
	return o, woke, fence
}

// listening waits until s's listener is connected, and drains token's
// wake-up (the connection's own wake of every waiter).
func listening(t *testing.T, s *pgStore, token string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		wake, connected := s.lis.waiter(token)
		if wake == nil {
			t.Fatalf("%s is not a waiter", token)
		}
		if connected {
			select {
			case <-wake:
			default:
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the listener does not connect")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// notifyRaw sends payload on the lock table's channel.
func notifyRaw(t *testing.T, ctx context.Context, pool *pgxpool.Pool, payload string) {
	t.Helper()
	if _, err := pool.Exec(ctx, "SELECT pg_notify('lockmw_locks', $1)", payload); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseHandsOver: h's release makes w, the first queued waiter, the
// holder in the release's own transaction: the row is w's, with a fence
// drawn there (above w's seq, h's fence and every earlier one) and w's
// entry's expiry, w's entry is gone, and w's WaitTurn reports the grant
// dated from w's Enqueue's send, not from the notification's arrival.
func TestReleaseHandsOver(t *testing.T) {
	ctx, pool, s := startStore(t)
	k := store.Key{Prefix: "lockmw:", Name: "handover"}
	beforeEnqueue := time.Now()
	h, w := holdAndQueue(t, ctx, s, k)
	listening(t, s, "w")
	seq, entryExpires := entry(t, ctx, pool, k, "w")
	if w.Counter != uint64(seq) {
		t.Fatalf("w's busy Enqueue reported Counter %d, want its entry's seq %d", w.Counter, seq)
	}
	beforeRelease := time.Now()
	o, woke, handed := release(t, ctx, pool, s, k, "h")
	if o != store.Owned || woke != 1 || handed == 0 {
		t.Fatalf("h's release: %v, woke %d, handed fence %d; want Owned, 1 grant", o, woke, handed)
	}
	tok, fence, expires := leaseRow(t, ctx, pool, k)
	if tok != "w" || uint64(fence) != handed || fence <= seq || uint64(fence) <= h.Fence {
		t.Fatalf("after h's release the row is %s's with fence %d (handed %d); want w's, above h's %d and w's seq %d", tok, fence, handed, h.Fence, seq)
	}
	if !expires.Equal(entryExpires) {
		t.Fatalf("the handed row expires at %v, want w's entry's expiry %v", expires, entryExpires)
	}
	if n := entries(t, ctx, pool, k, "w"); n != 0 {
		t.Fatalf("w's entry is still queued after the hand-over (%d)", n)
	}
	r, err := s.WaitTurn(ctx, k, "w", handTTL, w)
	if err != nil || !r.Acquired || r.Fence != handed {
		t.Fatalf("w's WaitTurn after the hand-over: %+v, %v; want Acquired with fence %d", r, err, handed)
	}
	if r.ValidFrom.Before(beforeEnqueue) || !r.ValidFrom.Before(beforeRelease) {
		t.Fatalf("the grant is dated %v after w's Enqueue was sent, %v after the release; want the Enqueue's send (before the release)",
			r.ValidFrom.Sub(beforeEnqueue), r.ValidFrom.Sub(beforeRelease))
	}
	if _, ok := s.lis.waiter("w"); ok && s.lis.byToken["w"] != nil {
		t.Fatal("w is still a waiter after its grant")
	}
}

// TestHandOverDatedFromLastRefresh: a refresh that confirmed w's entry
// dates the grant from its send, and the handed row takes the refreshed
// expiry; a refresh sent after the hand-over confirms nothing.
func TestHandOverDatedFromLastRefresh(t *testing.T) {
	ctx, pool, s := startStore(t)
	k := store.Key{Prefix: "lockmw:", Name: "refresh"}
	_, w := holdAndQueue(t, ctx, s, k)
	listening(t, s, "w")
	time.Sleep(20 * time.Millisecond)
	beforeRefresh := time.Now()
	if alive, err := s.refresh(ctx, name(k), "w", handTTL); err != nil || !alive {
		t.Fatalf("w's refresh: %v, %v", alive, err)
	}
	afterRefresh := time.Now()
	_, refreshed := entry(t, ctx, pool, k, "w")
	release(t, ctx, pool, s, k, "h")
	if _, _, expires := leaseRow(t, ctx, pool, k); !expires.Equal(refreshed) {
		t.Fatalf("the handed row expires at %v, want the refreshed entry's %v", expires, refreshed)
	}
	// A refresh after the hand-over finds the entry gone: it confirms
	// nothing, and the grant keeps the earlier date.
	if alive, err := s.refresh(ctx, name(k), "w", handTTL); err != nil || alive {
		t.Fatalf("w's refresh after the hand-over: %v, %v; want the entry gone", alive, err)
	}
	r, err := s.WaitTurn(ctx, k, "w", handTTL, w)
	if err != nil || !r.Acquired {
		t.Fatalf("w's WaitTurn: %+v, %v", r, err)
	}
	if r.ValidFrom.Before(beforeRefresh) || r.ValidFrom.After(afterRefresh) {
		t.Fatalf("the grant is dated %v from the refresh's send; want the refresh's send", r.ValidFrom.Sub(beforeRefresh))
	}
}

// TestGrantToldFromBlindWake: a blind wake-up (a release's plain wake
// naming the token, the listener's wake of every waiter) is not a grant;
// a grant is kept apart from the wake channel, so a blind wake-up after it
// neither stands for it nor hides it; a grant to an entry of another seq
// (an earlier queueing) is refused.
func TestGrantToldFromBlindWake(t *testing.T) {
	ctx, pool, s := startStore(t)
	k := store.Key{Prefix: "lockmw:", Name: "blind"}
	_, w := holdAndQueue(t, ctx, s, k)
	listening(t, s, "w")
	wake, _ := s.lis.waiter("w")
	waitWake := func() {
		t.Helper()
		select {
		case <-wake:
		case <-time.After(10 * time.Second):
			t.Fatal("no wake-up")
		}
	}

	notifyRaw(t, ctx, pool, "w")
	waitWake()
	if r := s.lis.granted("w"); r.Acquired {
		t.Fatalf("a blind wake-up reported %+v", r)
	}
	s.lis.wakeAll(true)
	waitWake()
	if r := s.lis.granted("w"); r.Acquired {
		t.Fatalf("the listener's wake of every waiter reported %+v", r)
	}

	seq := int64(w.Counter)
	notifyRaw(t, ctx, pool, "g w 999999 "+strconv.FormatInt(seq-1, 10))
	waitWake()
	if r := s.lis.granted("w"); r.Acquired {
		t.Fatalf("a grant to another queueing (seq %d, the entry's is %d) reported %+v", seq-1, seq, r)
	}

	notifyRaw(t, ctx, pool, "g w 999999 "+strconv.FormatInt(seq, 10))
	notifyRaw(t, ctx, pool, "w")
	time.Sleep(100 * time.Millisecond) // both arrive: one wake-up is kept
	r, err := s.WaitTurn(ctx, k, "w", handTTL, w)
	if err != nil || !r.Acquired || r.Fence != 999999 {
		t.Fatalf("WaitTurn after a grant and a blind wake-up: %+v, %v; want the grant", r, err)
	}
}

// TestOwnRowReportedAsItIs: an Enqueue (or a plain attempt) that finds its
// own token in the live row (a hand-over it did not hear of, a request
// whose answer was lost) reports the row's fence, draws none, extends
// nothing, and dates the lease from what is left of the row.
func TestOwnRowReportedAsItIs(t *testing.T) {
	ctx, pool, s := startStore(t)
	k := store.Key{Prefix: "lockmw:", Name: "own"}
	holdAndQueue(t, ctx, s, k)
	_, _, handed := release(t, ctx, pool, s, k, "h")
	if handed == 0 {
		t.Fatal("h's release handed nothing")
	}
	_, _, expires := leaseRow(t, ctx, pool, k)
	time.Sleep(50 * time.Millisecond)
	sent := time.Now()
	r, err := s.Enqueue(ctx, k, "w", handTTL, true)
	if err != nil || !r.Acquired || r.Fence != handed {
		t.Fatalf("w's Enqueue after the unheard hand-over: %+v, %v; want Acquired with the handed fence %d", r, err, handed)
	}
	if !r.ValidFrom.Before(sent.Add(-40 * time.Millisecond)) {
		t.Fatalf("the lease is dated %v after the Enqueue's send; want what is left of the row, minus the TTL (about 50ms before)", r.ValidFrom.Sub(sent))
	}
	if _, fence, after := leaseRow(t, ctx, pool, k); uint64(fence) != handed || !after.Equal(expires) {
		t.Fatalf("the row after w's Enqueue: fence %d, expiry moved %v; want %d, unchanged", fence, after.Sub(expires), handed)
	}

	// The plain attempt's path.
	k2 := store.Key{Prefix: "lockmw:", Name: "own-plain"}
	first, err := s.Acquire(ctx, k2, "p", handTTL, true)
	if err != nil || !first.Acquired {
		t.Fatalf("p's acquisition: %+v, %v", first, err)
	}
	_, _, expires = leaseRow(t, ctx, pool, k2)
	time.Sleep(50 * time.Millisecond)
	again, err := s.Acquire(ctx, k2, "p", handTTL, true)
	if err != nil || !again.Acquired || again.Fence != first.Fence {
		t.Fatalf("p's second attempt on its own row: %+v, %v; want its fence %d", again, err, first.Fence)
	}
	if again.ValidFrom.After(first.ValidFrom.Add(10 * time.Millisecond)) {
		t.Fatalf("p's second attempt is dated %v after the first; want no later than the row allows", again.ValidFrom.Sub(first.ValidFrom))
	}
	if _, _, after := leaseRow(t, ctx, pool, k2); !after.Equal(expires) {
		t.Fatalf("p's second attempt moved the row's expiry by %v", after.Sub(expires))
	}
}

// TestOldEntryWokenNotHanded: an entry written as Lockers before
// hand-overs write it (no handover column in their INSERT) is woken by a
// release, not handed the lock: such a waiter would not understand a
// grant. And a release as those Lockers send it (delete, then a plain
// wake) leaves a new waiter to take the lock itself.
func TestOldEntryWokenNotHanded(t *testing.T) {
	ctx, pool, s := startStore(t)
	k := store.Key{Prefix: "lockmw:", Name: "mixed"}
	if r, err := s.Acquire(ctx, k, "h", handTTL, true); err != nil || !r.Acquired {
		t.Fatalf("h's acquisition: %+v, %v", r, err)
	}
	// The old Enqueue's queue insert (e916f6c's enqueueFence).
	if _, err := pool.Exec(ctx, `INSERT INTO lockmw_locks_queue AS q (name, token, seq, expires_at)
		SELECT $1, 'old', nextval('"lockmw_locks_fence"'), clock_timestamp() + interval '10 seconds'`, name(k)); err != nil {
		t.Fatal(err)
	}
	o, woke, handed := release(t, ctx, pool, s, k, "h")
	if o != store.Owned || woke != 1 || handed != 0 {
		t.Fatalf("h's release before an old waiter: %v, woke %d, handed %d; want Owned, 1 wake, nothing handed", o, woke, handed)
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM lockmw_locks WHERE name = $1", name(k)).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d rows after the release before an old waiter (%v); want the lock free", rows, err)
	}
	if n := entries(t, ctx, pool, k, "old"); n != 1 {
		t.Fatalf("the old waiter's entry: %d, want it kept", n)
	}
	if _, err := pool.Exec(ctx, "DELETE FROM lockmw_locks_queue"); err != nil {
		t.Fatal(err)
	}

	// An old release before a new waiter: the waiter is woken, and takes.
	_, w := holdAndQueue(t, ctx, s, k)
	listening(t, s, "w")
	if _, err := pool.Exec(ctx, `DELETE FROM lockmw_locks WHERE name = $1 AND token = 'h'`, name(k)); err != nil {
		t.Fatal(err)
	}
	notifyRaw(t, ctx, pool, "w")
	r, err := s.WaitTurn(ctx, k, "w", handTTL, w)
	if err != nil || r.Acquired {
		t.Fatalf("WaitTurn after an old release's wake: %+v, %v; want a plain wake", r, err)
	}
	if r, err := s.Enqueue(ctx, k, "w", handTTL, true); err != nil || !r.Acquired {
		t.Fatalf("w's Enqueue after the old release: %+v, %v", r, err)
	}
}

// TestNewRefusesUnmigratedTable: a queue table without the handover column
// (made by a release before hand-overs) fails New with ErrNoTable, saying
// to migrate; CreateTable migrates it.
func TestNewRefusesUnmigratedTable(t *testing.T) {
	ctx, pool, _ := startStore(t)
	if _, err := pool.Exec(ctx, "ALTER TABLE lockmw_locks_queue DROP COLUMN handover"); err != nil {
		t.Fatal(err)
	}
	_, err := New(pool)
	if !errors.Is(err, ErrNoTable) || !errors.Is(err, lockmw.ErrStoreSetup) || !strings.Contains(err.Error(), "handover") || !strings.Contains(err.Error(), "CreateTable") {
		t.Fatalf("New on an unmigrated queue table: %v; want ErrNoTable saying to migrate with CreateTable", err)
	}
	if err := CreateTable(ctx, pool); err != nil {
		t.Fatal(err)
	}
	l, err := New(pool)
	if err != nil {
		t.Fatalf("New after CreateTable migrated: %v", err)
	}
	_ = l.Close()
}

// syncBuf is a log sink safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStaleGrantRefusedByLocker: a grant whose fence is not above the
// Counter of the waiter's last busy Enqueue (its entry's seq) was made to
// an earlier queueing: the Locker (package lockmw's queueWay.handed)
// refuses it, asks Enqueue again, and keeps waiting while the lock is
// held; the real hand-over later gives it the lock.
func TestStaleGrantRefusedByLocker(t *testing.T) {
	ctx, pool, _ := startStore(t)
	var logs syncBuf
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	la, err := New(pool, lockmw.WithTTL(handTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	lb, err := New(pool, lockmw.WithTTL(handTTL), lockmw.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	ha, err := la.Acquire(ctx, "stale")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *lockmw.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := lb.Acquire(ctx, "stale")
		got <- result{l, err}
	}()
	var token string
	var seq int64
	deadline := time.Now().Add(10 * time.Second)
	for pool.QueryRow(ctx, "SELECT token, seq FROM lockmw_locks_queue").Scan(&token, &seq) != nil {
		if time.Now().After(deadline) {
			t.Fatal("b never queued")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A grant naming b's entry (its seq) with a fence not above its seq,
	// sent until the Locker has logged its refusal.
	for !strings.Contains(logs.String(), "ignoring a stale hand-over") {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal logged; logs:\n%s", logs.String())
		}
		notifyRaw(t, ctx, pool, "g "+token+" "+strconv.FormatInt(seq, 10)+" "+strconv.FormatInt(seq, 10))
		select {
		case r := <-got:
			t.Fatalf("b acquired (%v, fence %v) from a stale grant while a holds", r.err, fenceOf(r.l))
		case <-time.After(100 * time.Millisecond):
		}
	}
	select {
	case r := <-got:
		t.Fatalf("b acquired (%v) while a holds", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := ha.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || r.l.Fence() <= uint64(seq) {
		t.Fatalf("b after a's release: %v, fence %v; want the lock, fence above %d", r.err, fenceOf(r.l), seq)
	}
	_ = r.l.Release(ctx)
}

func fenceOf(l *lockmw.Lease) any {
	if l == nil {
		return nil
	}
	return l.Fence()
}
