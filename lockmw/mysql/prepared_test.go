package mysql_test

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/mysql"
)

// This file tests that a lock's every acquisition and release run as
// statements the server prepared once per connection (prepared.go), and
// that the strings they carry as parameters are the caller's bytes, on
// any connection character set.

// status is the server's global status variable name.
func status(t *testing.T, db *sql.DB, name string) int64 {
	t.Helper()
	var n int64
	var v string
	if err := db.QueryRowContext(bg(t), "SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&v, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// lockUnlock takes and releases key on l n times, each uncontended.
func lockUnlock(t *testing.T, l *lockmw.Locker, key string, n int) {
	t.Helper()
	for range n {
		lease, err := l.TryAcquire(bg(t), key)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(bg(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// A lock and unlock of a lock whose row the Locker knows is two
// executions of statements prepared on the connection before: no
// statement is parsed again.
func TestLockAndUnlockArePrepared(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	admin := srv.DB(t, "")
	l := newLocker(t, srv)
	lockUnlock(t, l, "prepared", 2) // the row inserted, then known
	prepares, executes := status(t, admin, "Com_stmt_prepare"), status(t, admin, "Com_stmt_execute")
	const n = 20
	lockUnlock(t, l, "prepared", n)
	if got := status(t, admin, "Com_stmt_execute") - executes; got != 2*n {
		t.Errorf("%d lock+unlock cycles ran %d prepared statements, want %d (an acquisition and a release each)", n, got, 2*n)
	}
	// One connection serves a single caller; a second may open, and
	// prepares its statements once.
	if got := status(t, admin, "Com_stmt_prepare") - prepares; got > 2 {
		t.Errorf("%d lock+unlock cycles prepared %d statements, want none after the first on a connection", n, got)
	}
}

// Keys and prefixes of any bytes (NUL, bytes that are no UTF-8) name
// their own rows, byte for byte, on a connection of another character
// set: their values travel as hex.
func TestPreparedKeysKeepTheirBytes(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	admin := srv.DB(t, "")
	const key = "k\x00\xff\xfe\xc3("
	const prefix = "p\xe9\x80:"
	for _, charset := range []string{"charset=utf8mb4", "charset=latin1"} {
		l, err := mysql.New(srv.DB(t, "", charset), lockmw.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		lockUnlock(t, l, key, 3)
		lease, err := l.TryAcquire(bg(t), key)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		var live bool
		if err := admin.QueryRowContext(bg(t), "SELECT COUNT(*), MAX(expires_at > UTC_TIMESTAMP(6) AND token <> '') FROM lockmw_locks WHERE prefix = ? AND name = ?", prefix, key).Scan(&n, &live); err != nil {
			t.Fatal(err)
		}
		if n != 1 || !live {
			t.Fatalf("%s: %d rows of the key's exact bytes, held %v; want 1, held", charset, n, live)
		}
		if err := lease.Release(bg(t)); err != nil {
			t.Fatal(err)
		}
	}
	var rows int
	if err := admin.QueryRowContext(bg(t), "SELECT COUNT(*) FROM lockmw_locks").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Fatalf("the table holds %d rows, want 1: both character sets name the same row", rows)
	}
}

// A server that keeps no more prepared statements (max_prepared_stmt_count)
// gets the same statements as text: locks work as before.
func TestPreparedStatementLimitFallsBackToText(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	admin := srv.DB(t, "")
	srv.Exec(t, "SET GLOBAL max_prepared_stmt_count = 0")
	l := newLocker(t, srv)
	executes := status(t, admin, "Com_stmt_execute")
	lockUnlock(t, l, "unprepared", 5)
	other := newLocker(t, srv)
	lease, err := l.TryAcquire(bg(t), "unprepared")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryAcquire(bg(t), "unprepared"); !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("a second Locker's TryAcquire of a held lock: %v, want ErrNotAcquired", err)
	}
	if err := lease.Release(bg(t)); err != nil {
		t.Fatal(err)
	}
	if got := status(t, admin, "Com_stmt_execute") - executes; got != 0 {
		t.Fatalf("%d prepared statements ran on a server that prepares none", got)
	}
}
