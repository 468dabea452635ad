package mysql_test

import (
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
)

// questions is the number of statements the server has received.
func questions(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var name string
	var n int64
	if err := db.QueryRowContext(bg(t), "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Default-mode waiters of one Locker share one poll of a key: while
// another Locker holds it, eight goroutines waiting a second cost about
// what one does (attempts backing off from 5 to 100ms: some 15), not eight
// times that.
func TestDefaultWaitersOfOneLockerShareOnePoll(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	admin := srv.DB(t, "")
	holder := newLocker(t, srv, lockmw.WithTTL(10*time.Second))
	waiting := newLocker(t, srv, lockmw.WithTTL(10*time.Second))
	ctx := bg(t)
	lease, err := holder.Acquire(ctx, "shared-poll")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(ctx) }()
	const goroutines = 8
	before := questions(t, admin)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			_, err := waiting.Acquire(ctx, "shared-poll", lockmw.WithWait(time.Second))
			errs <- err
		})
	}
	wg.Wait()
	stmts := questions(t, admin) - before - 1
	close(errs)
	for err := range errs {
		if !errors.Is(err, lockmw.ErrNotAcquired) {
			t.Fatalf("a waiter ended with %v, want ErrNotAcquired", err)
		}
	}
	// One poller: its attempts, plus one first attempt per goroutine. Eight
	// pollers would send over a hundred.
	if stmts > 60 {
		t.Fatalf("%d goroutines of one Locker waiting a second sent %d statements; want at most 60 (one poll for all; eight send over a hundred)", goroutines, stmts)
	}
	t.Logf("%d statements", stmts)
}
