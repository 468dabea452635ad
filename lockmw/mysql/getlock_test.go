package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
)

// Why lockmw does not build leases on GET_LOCK: the lock belongs to one
// connection. A killed connection (KILL, a pool recycling it, a failover
// proxy) frees it without telling the holder, and a stalled holder that
// stays connected keeps it forever. (Galera refuses GET_LOCK outright; not
// tested here.) A lockmw lease does neither: a holder learns of a loss
// through its lease context, and a stalled holder's lease expires.

func getLock(t *testing.T, conn *sql.Conn, name string) bool {
	t.Helper()
	return getLockWithin(t, conn, name, 0)
}

// getLockWithin is GET_LOCK waiting up to seconds for the lock.
func getLockWithin(t *testing.T, conn *sql.Conn, name string, seconds int) bool {
	t.Helper()
	var got sql.NullInt64
	if err := conn.QueryRowContext(bg(t), "SELECT GET_LOCK(?, ?)", name, seconds).Scan(&got); err != nil {
		t.Fatal(err)
	}
	return got.Int64 == 1
}

func TestGetLockKilledConnectionFreesItSilently(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	holderDB, otherDB := srv.DB(t, ""), srv.DB(t, "")
	holder, err := holderDB.Conn(bg(t))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	other, err := otherDB.Conn(bg(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if !getLock(t, holder, "job") {
		t.Fatal("GET_LOCK on a free lock failed")
	}
	var id int64
	if err := holder.QueryRowContext(bg(t), "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	srv.KillConnection(t, id)
	// The other connection takes the lock (once the server has ended the
	// killed connection: KILL returns before that, so GET_LOCK waits up to
	// 10s); nothing told the holder, which learns only if it happens to use
	// its connection again.
	if !getLockWithin(t, other, "job", 10) {
		t.Fatal("GET_LOCK within 10s after the holder's connection was killed: still held")
	}
	t.Log("GET_LOCK: the holder's connection was killed; another connection took the lock, and the holder was not told")

	// lockmw: a lock is a row, not a connection. Killing every connection
	// ends no holding; the lease stays live and its renewals dial anew.
	l := newLocker(t, srv, lockmw.WithTTL(time.Second))
	lease, err := l.TryAcquire(bg(t), "job")
	if err != nil {
		t.Fatal(err)
	}
	srv.KillConnections(t)
	if _, err := newLocker(t, srv).TryAcquire(bg(t), "job"); !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("another Locker after the holder's connections were killed: %v, want ErrNotAcquired", err)
	}
	time.Sleep(2 * time.Second) // two TTLs: renewals on new connections keep it
	if err := lease.Context().Err(); err != nil {
		t.Fatalf("lease ended after its connections were killed: %v", context.Cause(lease.Context()))
	}
	if err := lease.Release(bg(t)); err != nil {
		t.Fatal(err)
	}
}

func TestGetLockStalledHolderKeepsItForever(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	holder, err := srv.DB(t, "").Conn(bg(t))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	other, err := srv.DB(t, "").Conn(bg(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if !getLock(t, holder, "job") {
		t.Fatal("GET_LOCK on a free lock failed")
	}
	// The holder stalls (a stuck goroutine, a long GC, a hung call): it
	// stays connected and does nothing. However long it stalls, the lock
	// stays its own.
	time.Sleep(2 * time.Second)
	if getLock(t, other, "job") {
		t.Fatal("GET_LOCK was free while its holder stalled")
	}

	// lockmw: a stalled holder renews nothing, so its lease expires after
	// its TTL and another Locker takes the lock (with a higher fence, which
	// a store checking fences uses to refuse the stalled holder's late
	// writes).
	l := newLocker(t, srv, lockmw.WithTTL(300*time.Millisecond))
	stalled, err := l.TryAcquire(bg(t), "job", lockmw.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	next, err := newLocker(t, srv).Acquire(bg(t), "job", lockmw.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("another Locker while the holder stalled: %v", err)
	}
	if next.Fence() <= stalled.Fence() {
		t.Fatalf("fence %d after the stalled holder's %d", next.Fence(), stalled.Fence())
	}
	_ = next.Release(bg(t))
}
