package mysql

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
	"github.com/lockmw/lockmw/lockmw/mysql/internal/mariatest"
)

// newTestStore starts MariaDB with the tables and returns a store on it
// (its cleanup loop idle: the tests call cleanup) and an admin pool.
func newTestStore(t *testing.T) (*sqlStore, *sql.DB) {
	t.Helper()
	srv := mariatest.Start(t)
	admin := srv.DB(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := CreateTable(ctx, admin, ""); err != nil {
		t.Fatal(err)
	}
	n, _ := namesFor("")
	s := &sqlStore{db: srv.DB(t, ""), n: n, retention: Retention, stop: make(chan struct{}), done: make(chan struct{})}
	go s.cleanLoop(time.Hour)
	t.Cleanup(func() { _ = s.Close() })
	return s, admin
}

func tctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// oneConn is a connection of db's pool, for statements that must share
// one; the caller closes it.
func oneConn(t *testing.T, ctx context.Context, db *sql.DB) *sql.Conn {
	t.Helper()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rowOf is the row of k: token, fence and the microseconds it has left.
func rowOf(t *testing.T, admin *sql.DB, k store.Key) (token string, fence uint64, left int64, ok bool) {
	t.Helper()
	err := admin.QueryRowContext(tctx(t), "SELECT token, fence, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM lockmw_locks WHERE prefix = ? AND name = ?", k.Prefix, k.Name).Scan(&token, &fence, &left)
	if err == sql.ErrNoRows {
		return "", 0, 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return token, fence, left, true
}

// River issue 197's bug class: a renewal that upserts extends (or
// creates) a lease another holder took. Here the renewal of a holding that
// expired and was taken over finds it Taken and changes nothing; a renewal
// of a lock with no row, or a released one, creates or extends nothing.
func TestRenewNeverExtendsAnotherHolderNorInserts(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	k := store.Key{Prefix: "p:", Name: "river-197"}
	r, err := s.Acquire(ctx, k, "old", MinTTL, true)
	if err != nil || !r.Acquired {
		t.Fatalf("first acquisition: %+v, %v", r, err)
	}
	// Wait on the database's clock until the holding expired.
	for {
		if _, _, left, _ := rowOf(t, admin, k); left <= 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	r2, err := s.Acquire(ctx, k, "new", 2*time.Second, true)
	if err != nil || !r2.Acquired || r2.Fence <= r.Fence {
		t.Fatalf("takeover: %+v, %v (first fence %d)", r2, err, r.Fence)
	}
	_, _, before, _ := rowOf(t, admin, k)
	res := s.Renew(ctx, []store.RenewRequest{{Key: k, Token: "old", TTL: time.Hour}})
	if res[0].Err != nil || res[0].Ownership != store.Taken {
		t.Fatalf("renewal of the expired holding: %+v, want Taken", res[0])
	}
	token, fence, after, _ := rowOf(t, admin, k)
	if token != "new" || fence != r2.Fence || after > before || after > int64(2*time.Second/time.Microsecond) {
		t.Fatalf("after the old holder's renewal the row is %q, fence %d, %dµs left (before: %dµs): the renewal touched the new holder's row", token, fence, after, before)
	}

	// No row: the renewal creates none.
	ghost := store.Key{Prefix: "p:", Name: "never-held"}
	if res := s.Renew(ctx, []store.RenewRequest{{Key: ghost, Token: "t", TTL: time.Hour}}); res[0].Err != nil || res[0].Ownership != store.Missing {
		t.Fatalf("renewal of a lock never held: %+v, want Missing", res[0])
	}
	if _, _, _, ok := rowOf(t, admin, ghost); ok {
		t.Fatal("a renewal created a row")
	}

	// Released: the renewal extends nothing.
	if o, err := s.Release(ctx, k, "new"); err != nil || o != store.Owned {
		t.Fatalf("release: %v, %v", o, err)
	}
	if res := s.Renew(ctx, []store.RenewRequest{{Key: k, Token: "new", TTL: time.Hour}}); res[0].Err != nil || res[0].Ownership != store.Missing {
		t.Fatalf("renewal after release: %+v, want Missing", res[0])
	}
	if _, _, left, _ := rowOf(t, admin, k); left > 0 {
		t.Fatalf("the released row has %dµs left after a renewal", left)
	}
}

// One tick's renewals go in one statement, with a result per lease: owned,
// taken, missing.
func TestRenewBatch(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	var reqs []store.RenewRequest
	for i, name := range []string{"a", "b", "c", "d"} {
		k := store.Key{Prefix: "p:", Name: name}
		tok := "t-" + name
		if i < 3 {
			if r, err := s.Acquire(ctx, k, tok, time.Second, true); err != nil || !r.Acquired {
				t.Fatalf("acquire %s: %+v, %v", name, r, err)
			}
		}
		reqs = append(reqs, store.RenewRequest{Key: k, Token: tok, TTL: time.Duration(10+i) * time.Second})
	}
	// b is taken by another token (released, then acquired anew).
	if _, err := s.Release(ctx, reqs[1].Key, "t-b"); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Acquire(ctx, reqs[1].Key, "other", time.Second, true); err != nil || !r.Acquired {
		t.Fatalf("acquire b again: %+v, %v", r, err)
	}
	res := s.Renew(ctx, reqs)
	want := []store.Ownership{store.Owned, store.Taken, store.Owned, store.Missing}
	for i := range want {
		if res[i].Err != nil || res[i].Ownership != want[i] {
			t.Errorf("renewal %d (%s): %+v, want %v", i, reqs[i].Key.Name, res[i], want[i])
		}
	}
	// Each renewed row has its own TTL.
	for _, i := range []int{0, 2} {
		_, _, left, _ := rowOf(t, admin, reqs[i].Key)
		if ttl := reqs[i].TTL.Microseconds(); left > ttl || left < ttl-int64(5*time.Second/time.Microsecond) {
			t.Errorf("row %s has %dµs left, want about %dµs", reqs[i].Key.Name, left, ttl)
		}
	}
}

// Rows whose holding ended more than the retention ago are deleted, in
// bounded batches; live rows and recently ended ones stay. Acquisition
// reuses an ended row in the meantime.
func TestCleanupDeletesLongEndedRows(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	if _, err := admin.ExecContext(ctx, "INSERT INTO lockmw_locks (prefix, name, token, fence, expires_at) "+
		"SELECT 'p:', CONCAT('old-', seq), 'crashed', seq, UTC_TIMESTAMP(6) - INTERVAL 2 HOUR FROM seq_1_to_2500"); err != nil {
		t.Fatal(err)
	}
	recent := store.Key{Prefix: "p:", Name: "recent"}
	live := store.Key{Prefix: "p:", Name: "live"}
	for _, k := range []store.Key{recent, live} {
		if r, err := s.Acquire(ctx, k, "t", time.Minute, true); err != nil || !r.Acquired {
			t.Fatalf("acquire %v: %+v, %v", k, r, err)
		}
	}
	if _, err := s.Release(ctx, recent, "t"); err != nil {
		t.Fatal(err)
	}
	if n := s.cleanup(); n != 2500 {
		t.Fatalf("cleanup deleted %d rows, want the 2500 ended two hours ago", n)
	}
	var left []string
	rows, err := admin.QueryContext(ctx, "SELECT name FROM lockmw_locks ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		_ = rows.Scan(&n)
		left = append(left, n)
	}
	rows.Close()
	if len(left) != 2 || left[0] != "live" || left[1] != "recent" {
		t.Fatalf("rows left %q, want live and recent", left)
	}
}
