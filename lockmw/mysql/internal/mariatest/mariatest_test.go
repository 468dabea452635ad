package mariatest_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw/mysql/internal/mariatest"
)

// A server starts, answers, survives a pause, a kill and a restart with
// its data, and kills its clients' connections on demand.
func TestServer(t *testing.T) {
	srv := mariatest.Start(t)
	srv.Exec(t, "CREATE TABLE t (v INT PRIMARY KEY)")
	srv.Exec(t, "INSERT INTO t VALUES (1)")
	db := srv.DB(t, "")
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var before int64
	if err := db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&before); err != nil {
		t.Fatal(err)
	}
	if n := srv.KillConnections(t); n < 1 {
		t.Fatalf("KillConnections killed %d connections, want the pool's", n)
	}
	var after int64
	for range 3 { // the pool finds its connection dead, then dials anew
		if err := db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&after); err == nil {
			break
		}
	}
	if after == before || after == 0 {
		t.Fatalf("connection id %d before the kill, %d after: not a new connection", before, after)
	}
	srv.Pause(t)
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := db.ExecContext(short, "SELECT 1")
	cancelShort()
	if err == nil {
		t.Fatal("a paused server answered")
	}
	srv.Resume(t)
	srv.Kill(t)
	srv.Restart(t)
	var v int
	if err := srv.DB(t, "").QueryRowContext(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != 1 {
		t.Fatalf("after a restart: v=%d, %v; want the row written before the kill", v, err)
	}
}
