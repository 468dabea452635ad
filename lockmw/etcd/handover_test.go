package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// This file tests the hand-over a queued waiter learns from its watch
// (WaitTurn): once every key below its own is deleted, and its own is not,
// the lock is its, without another request.

// txns is how many transactions and deletes member m has received:
// Enqueues, releases, and the reads of renewals, which the Lockers of these
// tests, with a TTL of quietTTL, do not make within a test.
func txns(t testing.TB, m *etcdtest.Server) int64 {
	t.Helper()
	r := received(t, m)
	return r["Txn"] + r["DeleteRange"]
}

// quietTTL is the TTL of Lockers whose transactions a test counts: their
// first renewal comes after the test.
const quietTTL = 30 * time.Second

// acquired is the lease or error of an Acquire run in the background.
type acquired struct {
	lease *lockmw.Lease
	err   error
}

// acquireInBackground runs l.Acquire(ctx, key, opts...) and sends its
// outcome.
func acquireInBackground(ctx context.Context, l *lockmw.Locker, key string, opts ...lockmw.AcquireOption) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		lease, err := l.Acquire(ctx, key, opts...)
		ch <- acquired{lease, err}
	}()
	return ch
}

// A release hands the lock to the waiter queued next (of another Locker,
// default and Fair) at the cost of the release alone: the waiter's watch
// saw the holder's key go, and the waiter takes the lock with its key's
// create revision as fence, without asking etcd again (a second Enqueue
// was a transaction through etcd's log on every hand-over).
func TestHandOverTakesNoSecondRequest(t *testing.T) {
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	ctx := bg(t)
	for _, fair := range []bool{false, true} {
		var opts []lockmw.AcquireOption
		if fair {
			opts = append(opts, lockmw.Fair())
		}
		holder, err := newLocker(t, srv.Client(t), lockmw.WithTTL(quietTTL)).Acquire(ctx, "hand")
		if err != nil {
			t.Fatal(err)
		}
		waiting := acquireInBackground(ctx, newLocker(t, srv.Client(t), lockmw.WithTTL(quietTTL)), "hand", opts...)
		lockmwtest.Eventually(t, 10*time.Second, "waiter queued", func() bool { return len(entries(t, admin, "hand")) == 2 })
		before := txns(t, srv)
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		got := <-waiting
		if got.err != nil {
			t.Fatalf("fair %v: the waiter's Acquire: %v", fair, got.err)
		}
		if n := txns(t, srv) - before; n != 1 {
			t.Errorf("fair %v: %d requests from the release to the waiter's lease, want 1 (the release): the waiter asked etcd again", fair, n)
		}
		es := entries(t, admin, "hand")
		if len(es) != 1 || uint64(es[0].rev) != got.lease.Fence() || got.lease.Fence() <= holder.Fence() {
			t.Errorf("fair %v: etcd holds %v for the waiter's lease at fence %d (holder's %d); want its key alone, at that create revision", fair, es, got.lease.Fence(), holder.Fence())
		}
		if err := got.lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A waiter two places back, whose predecessor leaves the queue, keeps
// waiting for the holder's key: it takes the lock from the holder's
// release alone, not asking etcd for its new predecessor when the old one
// leaves, nor whether it is first when the holder's key goes.
func TestHandOverPastAWaiterThatLeft(t *testing.T) {
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	ctx := bg(t)
	holder, err := newLocker(t, srv.Client(t), lockmw.WithTTL(quietTTL)).Acquire(ctx, "pass")
	if err != nil {
		t.Fatal(err)
	}
	leaveCtx, leave := context.WithCancel(ctx)
	leaving := acquireInBackground(leaveCtx, newLocker(t, srv.Client(t), lockmw.WithTTL(quietTTL)), "pass", lockmw.Fair())
	lockmwtest.Eventually(t, 10*time.Second, "second waiter queued", func() bool { return len(entries(t, admin, "pass")) == 2 })
	waiting := acquireInBackground(ctx, newLocker(t, srv.Client(t), lockmw.WithTTL(quietTTL)), "pass", lockmw.Fair())
	lockmwtest.Eventually(t, 10*time.Second, "third waiter queued", func() bool { return len(entries(t, admin, "pass")) == 3 })

	leave()
	if got := <-leaving; got.err == nil {
		t.Fatal("the leaving waiter acquired the lock")
	}
	lockmwtest.Eventually(t, 10*time.Second, "the leaving waiter's key deleted", func() bool { return len(entries(t, admin, "pass")) == 2 })
	// Whatever the third waiter does about it is done within a moment.
	time.Sleep(300 * time.Millisecond)
	before := txns(t, srv)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-waiting
	if got.err != nil {
		t.Fatalf("the third waiter's Acquire: %v", got.err)
	}
	if n := txns(t, srv) - before; n != 1 {
		t.Errorf("%d requests from the release to the third waiter's lease, want 1 (the release)", n)
	}
	if es := entries(t, admin, "pass"); len(es) != 1 || uint64(es[0].rev) != got.lease.Fence() {
		t.Errorf("etcd holds %v for the third waiter's lease at fence %d; want its key alone, at that create revision", es, got.lease.Fence())
	}
	if err := got.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter whose own key goes in the same step as the last key below it
// (both under one etcd lease, revoked) is not first: it queues anew and
// takes the lock with its new key, never with the fence of a key that is
// gone.
func TestNoHandOverWhenTheOwnKeyWentToo(t *testing.T) {
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	ctx := bg(t)
	l := newLocker(t, srv.Client(t), lockmw.WithTTL(10*time.Second))
	holder, err := l.Acquire(ctx, "both")
	if err != nil {
		t.Fatal(err)
	}
	waiting := acquireInBackground(ctx, l, "both", lockmw.Fair())
	var es []*kv
	lockmwtest.Eventually(t, 10*time.Second, "waiter queued", func() bool { es = entries(t, admin, "both"); return len(es) == 2 })
	if es[0].lease != es[1].lease {
		t.Fatalf("the holder's and the waiter's keys are under leases %x and %x, want one", es[0].lease, es[1].lease)
	}
	revoke(t, admin, es[0].lease)
	got := <-waiting
	if got.err != nil {
		t.Fatalf("the waiter's Acquire after its key went: %v", got.err)
	}
	now := entries(t, admin, "both")
	if len(now) != 1 || uint64(now[0].rev) != got.lease.Fence() || got.lease.Fence() == uint64(es[1].rev) {
		t.Fatalf("etcd holds %v for the waiter's lease at fence %d (its revoked key's revision %d); want a new key of its own at that fence", now, got.lease.Fence(), es[1].rev)
	}
	_ = got.lease.Release(ctx)
	_ = holder.Release(ctx)
}
