package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/mysql"
)

// A Fair waiter is never overtaken by a waiter that arrived after its
// entry was queued: not by a default-mode waiter of another Locker, nor by
// single attempts, which all find the lock busy from the holder's release
// until the Fair waiter has it.
func TestFairWaiterNotOvertaken(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	admin := srv.DB(t, "")
	holder, fair, plain, single := newLocker(t, srv), newLocker(t, srv), newLocker(t, srv), newLocker(t, srv)
	ctx := bg(t)
	const k = "fair-first"
	h, err := holder.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		lease *lockmw.Lease
		err   error
	}
	fairGot, plainGot := make(chan got, 1), make(chan got, 1)
	go func() {
		l, err := fair.Acquire(ctx, k, lockmw.Fair(), lockmw.WithWait(time.Minute))
		fairGot <- got{l, err}
	}()
	waitQueued(t, admin, k, 1)
	go func() {
		l, err := plain.Acquire(ctx, k, lockmw.WithWait(time.Minute))
		plainGot <- got{l, err}
	}()
	// Let the default waiter poll a few times (its backoff is at most
	// BackoffMax) before the release; the checks below do not depend on it.
	time.Sleep(3 * mysql.BackoffMax)
	if n := len(queueTokens(t, admin, k, false)); n != 1 {
		t.Fatalf("%d queue entries with a Fair and a default waiter, want the Fair one only (default waiters poll)", n)
	}
	stop := make(chan struct{})
	singles := make(chan error, 1)
	go func() {
		var err error
		for {
			select {
			case <-stop:
				singles <- err
				return
			default:
			}
			l, e := single.TryAcquire(ctx, k)
			if e == nil {
				_ = l.Release(ctx)
				err = errors.New("a single attempt took the lock ahead of the queued Fair waiter")
			} else if !errors.Is(e, lockmw.ErrNotAcquired) && err == nil {
				err = e
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var first got
	select {
	case first = <-fairGot:
	case g := <-plainGot:
		t.Fatalf("the default waiter, which arrived after the Fair waiter was queued, got the lock first (%v)", g.err)
	}
	close(stop)
	if first.err != nil {
		t.Fatalf("Fair waiter: %v", first.err)
	}
	if err := <-singles; err != nil {
		t.Fatal(err)
	}
	if first.lease.Fence() <= h.Fence() {
		t.Fatalf("fence %d after %d", first.lease.Fence(), h.Fence())
	}
	// The holder's entry is deleted while its lease runs, in the
	// background (the lease does not wait for the delete): wait for it,
	// live or expired, to be gone.
	deadline := time.Now().Add(10 * time.Second)
	for n := len(queueTokens(t, admin, k, false)); n != 0; n = len(queueTokens(t, admin, k, false)) {
		if time.Now().After(deadline) {
			t.Fatalf("%d queue entries 10s after the Fair waiter took the lock, want none", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := first.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-plainGot
	if second.err != nil {
		t.Fatalf("default waiter: %v", second.err)
	}
	if second.lease.Fence() <= first.lease.Fence() {
		t.Fatalf("fence %d after %d", second.lease.Fence(), first.lease.Fence())
	}
	if err := second.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A Fair waiter whose link is cut (as if its process died) stops renewing
// its entry, which then expires: the lock, free, goes to a later waiter
// within about the entry's TTL, not never.
func TestCutFairWaiterStopsBlocking(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	admin := srv.DB(t, "")
	p := srv.StartProxy(t)
	cutL, err := mysql.New(srv.DB(t, p.Addr()), lockmw.WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cutL.Close() })
	holder, other := newLocker(t, srv), newLocker(t, srv)
	ctx := bg(t)
	const k = "cut-waiter"
	h, err := holder.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cutDone := make(chan error, 1)
	go func() {
		_, err := cutL.Acquire(wctx, k, lockmw.Fair(), lockmw.WithWait(time.Minute))
		cutDone <- err
	}()
	waitQueued(t, admin, k, 1)
	p.Cut(t)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The lock is free; the cut waiter's entry blocks until it expires.
	l, err := other.Acquire(ctx, k, lockmw.WithWait(30*time.Second))
	if err != nil {
		t.Fatalf("a later waiter after the cut Fair waiter's entry should have expired: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	p.Heal(t)
	if err := <-cutDone; err == nil {
		t.Fatal("the cut waiter got a lease")
	}
}

// waitQueued waits until key's queue holds n live entries.
func waitQueued(t *testing.T, db *sql.DB, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(queueTokens(t, db, key, true)) != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue of %q holds %d live entries, want %d", key, len(queueTokens(t, db, key, true)), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
