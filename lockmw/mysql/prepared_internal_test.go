package mysql

import (
	"context"
	"testing"
	"time"
)

// A give-back ends a stalled prepared statement of its token, whose text
// holds no token but its connection's mark (prepared.go, stalled.go):
// endStalled kills it, and returns once its connection is gone, well
// before the statement would end by itself.
func TestEndStalledKillsPreparedStatementByMark(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	ctx := tctx(t)
	c, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
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
