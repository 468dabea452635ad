package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockmw/lockmw/internal/testkit/pgtest"
	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// Fences drawn in the upsert (takeFresh, "Fences drawn in the upsert" in
// doc.go): a new row's fence is drawn before the row's index entry is in,
// so a value drawn between the two must make the attempt draw again.

// blockedOnLock waits until some backend waits for a lock, or fails t
// when done (the attempt's reply) comes first or 30 s pass.
func blockedOnLock(t *testing.T, ctx context.Context, pool *pgxpool.Pool, done <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		select {
		case <-done:
			t.Fatal("the attempt ended without waiting for the uncommitted row")
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the attempt neither waits nor ends")
		}
	}
}

// TestFreshFenceDrawnAgainAfterARace: an attempt draws its fence, then
// waits for another transaction's uncommitted row of the same name (its
// index entry); meanwhile a value is drawn from the sequence (as a whole
// lease of the name could have been, between the draw and the row's
// insertion, had the other row come and gone); when the other transaction
// rolls back, the attempt takes the row. Its fence must be above the value
// drawn meanwhile: the upsert refuses its own draw and the fence is drawn
// again under the row's lock. Without the check in takeFresh's RETURNING,
// the lease would carry the fence drawn first, below the one drawn
// meanwhile.
func TestFreshFenceDrawnAgainAfterARace(t *testing.T) {
	for _, kind := range []attempt{firstAttempt, plainAttempt} {
		tr := &batches{}
		ctx, pool, s := startStoreWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = tr })
		k := store.Key{Prefix: "lockmw:", Name: "fresh-race"}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO lockmw_locks (name, token, fence, expires_at) VALUES ($1, 'other', 1, clock_timestamp() + interval '1 minute')`, name(k)); err != nil {
			t.Fatal(err)
		}
		tr.statements(s)
		type reply struct {
			r   store.Reply
			err error
		}
		done := make(chan struct{})
		var got reply
		go func() {
			defer close(done)
			got.r, _, got.err = s.take(ctx, name(k), "h", time.Minute, kind)
		}()
		blockedOnLock(t, ctx, pool, done)
		var between int64
		if err := pool.QueryRow(ctx, `SELECT nextval('lockmw_locks_fence')`).Scan(&between); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		<-done
		if got.err != nil || !got.r.Acquired {
			t.Fatalf("kind %d: h's attempt after the rollback: %+v, %v; want acquired", kind, got.r, got.err)
		}
		if got.r.Fence <= uint64(between) {
			t.Fatalf("kind %d: h's fence %d, not above %d, drawn after h's first draw and before h's row was in: a lease of the name could have held it", kind, got.r.Fence, between)
		}
		var rowFence int64
		if err := pool.QueryRow(ctx, `SELECT fence FROM lockmw_locks WHERE name = $1 AND token = 'h'`, name(k)).Scan(&rowFence); err != nil {
			t.Fatal(err)
		}
		if uint64(rowFence) != got.r.Fence {
			t.Fatalf("kind %d: the row's fence %d, the reply's %d", kind, rowFence, got.r.Fence)
		}
		sent := strings.Join(tr.statements(s), ",")
		want := "takeFresh,insertLease,fence"
		if kind == plainAttempt {
			want = "takeFresh,insertLease,fence,readRow"
		}
		if sent != want {
			t.Fatalf("kind %d: sent %s, want %s (the upsert's own draw refused, then drawn under the row's lock)", kind, sent, want)
		}
		// After a refusal the store draws after the upsert for a while
		// (laterAfterRefusal): no more refusals, and no more ERROR lines
		// in the server's log, where draws are that frequent.
		if o, err := s.Release(ctx, k, "h"); err != nil || o != store.Owned {
			t.Fatalf("kind %d: release: %v, %v", kind, o, err)
		}
		tr.statements(s)
		if r, _, err := s.take(ctx, name(k), "h2", time.Minute, kind); err != nil || !r.Acquired || r.Fence <= got.r.Fence {
			t.Fatalf("kind %d: the next attempt: %+v, %v; want acquired with a fence above %d", kind, r, err, got.r.Fence)
		}
		want = strings.TrimPrefix(want, "takeFresh,")
		if sent := strings.Join(tr.statements(s), ","); sent != want {
			t.Fatalf("kind %d: the attempt after a refusal sent %s, want %s", kind, sent, want)
		}
	}
}

// TestFreshFenceKeptWithoutARace: with nothing drawn meanwhile, an
// attempt's upsert keeps its own draw, both into a missing row and over an
// expired one, and the fences rise.
func TestFreshFenceKeptWithoutARace(t *testing.T) {
	tr := &batches{}
	ctx, pool, s := startStoreWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = tr })
	k := store.Key{Prefix: "lockmw:", Name: "fresh"}
	var last uint64
	for i, kind := range []attempt{firstAttempt, plainAttempt, firstAttempt} {
		if i == 2 {
			// An expired row of another token: the upsert writes over it.
			if _, err := pool.Exec(ctx, `INSERT INTO lockmw_locks (name, token, fence, expires_at) VALUES ($1, 'old', 1, clock_timestamp() - interval '1 second')`, name(k)); err != nil {
				t.Fatal(err)
			}
		}
		tr.statements(s)
		r, _, err := s.take(ctx, name(k), "h", time.Minute, kind)
		if err != nil || !r.Acquired || r.Fence <= last {
			t.Fatalf("round %d: %+v, %v; want acquired with a fence above %d", i, r, err, last)
		}
		last = r.Fence
		want := "takeFresh"
		if kind == plainAttempt {
			want = "takeFresh,readRow"
		}
		if sent := strings.Join(tr.statements(s), ","); sent != want {
			t.Fatalf("round %d: sent %s, want %s", i, sent, want)
		}
		var rowFence int64
		if err := pool.QueryRow(ctx, `SELECT fence FROM lockmw_locks WHERE name = $1 AND token = 'h'`, name(k)).Scan(&rowFence); err != nil {
			t.Fatal(err)
		}
		if uint64(rowFence) != r.Fence {
			t.Fatalf("round %d: the row's fence %d, the reply's %d", i, rowFence, r.Fence)
		}
		if i < 2 {
			if o, err := s.Release(ctx, k, "h"); err != nil || o != store.Owned {
				t.Fatalf("round %d: release: %v, %v", i, o, err)
			}
		}
	}
}

// TestRoleThatCannotReadTheSequence: a role that may draw from the fence
// sequence (UPDATE on it) but not read it (no SELECT or USAGE:
// pg_sequence_last_value refuses it) still takes locks: its first attempt's
// own draw is refused, the upsert and the fence statement follow, and from
// then on its store sends those at once.
func TestRoleThatCannotReadTheSequence(t *testing.T) {
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgxpool.New(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := CreateTable(ctx, admin); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE ROLE drawonly LOGIN`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON lockmw_locks, lockmw_locks_queue, lockmw_locks_claims TO drawonly`,
		`GRANT UPDATE ON SEQUENCE lockmw_locks_fence TO drawonly`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	tr := &batches{}
	cfg, err := pgxpool.ParseConfig(strings.Replace(srv.URL(), "postgres@", "drawonly@", 1))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	n, _ := Schema{}.names()
	s := newStore(pool, n)
	defer s.Close()
	k := store.Key{Prefix: "lockmw:", Name: "drawonly"}
	var last uint64
	for i, want := range []string{"takeFresh,insertLease,fence", "insertLease,fence"} {
		tr.statements(s)
		r, _, err := s.take(ctx, name(k), "h", time.Minute, firstAttempt)
		if err != nil || !r.Acquired || r.Fence <= last {
			t.Fatalf("round %d: %+v, %v; want acquired with a fence above %d", i, r, err, last)
		}
		last = r.Fence
		if sent := strings.Join(tr.statements(s), ","); sent != want {
			t.Fatalf("round %d: sent %s, want %s", i, sent, want)
		}
		if o, err := s.Release(ctx, k, "h"); err != nil || o != store.Owned {
			t.Fatalf("round %d: release: %v, %v", i, o, err)
		}
	}
}
