package mysql

import (
	"context"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw/internal/store"
)

// A give-back ends a stalled prepared statement of its token, whose text
// holds no token but its connection's mark (prepared.go, stalled.go):
// endStalled kills it, and returns once its connection is gone, well
// before the statement would end by itself.
func TestEndStalledKillsPreparedStatementByMark(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	ctx := tctx(t)
	c := oneConn(t, ctx, s.db)
	defer c.Close()
	st, err := s.connState(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	// A prepared statement that runs for a minute, unless killed.
	q := query{text: "DO SLEEP(60 + LENGTH(" + placeholder + "))", args: []any{"00"}}
	ran := make(chan error, 1)
	go func() {
		_, err := s.run(ctx, c, q)
		ran <- err
	}()
	for {
		var n int
		if err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%"+st.mark+"%' AND ID <> CONNECTION_ID()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.stalls.Note("tok", stalled{st.id, st.mark}, time.Hour)
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.endStalled(ectx, "tok"); err != nil {
		t.Fatalf("endStalled with the token's prepared statement running: %v, want it killed and nil", err)
	}
	if err := <-ran; err == nil {
		t.Fatal("the stalled statement ended without an error: not killed")
	}
	if left := s.stalls.Of("tok"); len(left) != 0 {
		t.Fatalf("noted connections left after endStalled: %v", left)
	}
}

// The prepared acquisition and release read the lock's row by its key
// (UNHEX of a parameter is a constant to the optimizer): no scan of the
// table, whose rows an UPDATE would lock.
func TestPreparedStatementsReadTheRowByKey(t *testing.T) {
	t.Parallel()
	s, admin := newTestStore(t)
	ctx := tctx(t)
	if _, err := admin.ExecContext(ctx, "INSERT INTO lockmw_locks (prefix, name, token, fence, expires_at, queue_seen) SELECT 'p:', CONCAT('k', seq), '', 1, UTC_TIMESTAMP(6), 0 FROM seq_1_to_500"); err != nil {
		t.Fatal(err)
	}
	k := store.Key{Prefix: "p:", Name: "k250"}
	c := oneConn(t, ctx, s.db)
	defer c.Close()
	for _, q := range []query{s.takeRowStmt(k, "tok", time.Second, false), s.releasePlainStmt(k, "tok"), s.takeRowStmt(k, "tok", time.Second, true)} {
		if _, err := c.ExecContext(ctx, "FLUSH STATUS"); err != nil {
			t.Fatal(err)
		}
		res, err := s.run(ctx, c, q)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("%s: %d rows affected, want 1", q.text, n)
		}
		var name string
		var scanned, keyed int64
		if err := c.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Handler_read_rnd_next'").Scan(&name, &scanned); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Handler_read_key'").Scan(&name, &keyed); err != nil {
			t.Fatal(err)
		}
		// NEXTVAL reads the sequence's one row; a scan of the locks
		// would read 500.
		if scanned > 1 || keyed == 0 {
			t.Fatalf("%s: read %d rows by scan, %d by key; want at most the sequence's by scan", q.text, scanned, keyed)
		}
	}
}
