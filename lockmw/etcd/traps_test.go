package etcd_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// The known traps of go.etcd.io/etcd/client/v3/concurrency.Mutex, each
// shown absent from lockmw's etcd store.

// etcd issue 10756: two Mutexes on one Session share a key (prefix + lease
// ID) and so do not exclude each other. Acquisitions of one Locker, which
// share one etcd lease, do.
func TestTrapOneLeaseStillExcludes(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	l := newLocker(t, cli)
	ctx := bg(t)

	// Two attempts at once on one Locker: exactly one wins.
	var wins atomic.Int32
	var wg sync.WaitGroup
	leases := make(chan *lockmw.Lease, 2)
	for range 2 {
		wg.Go(func() {
			lease, err := l.TryAcquire(ctx, "one")
			switch {
			case err == nil:
				wins.Add(1)
				leases <- lease
			case !errors.Is(err, lockmw.ErrNotAcquired):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Fatalf("%d of two TryAcquire calls on one Locker won, want 1", n)
	}
	first := <-leases

	// Waiters of the same Locker, default and Fair, wait for it.
	for _, fair := range []bool{false, true} {
		opts := []lockmw.AcquireOption{lockmw.WithWait(200 * time.Millisecond)}
		if fair {
			opts = append(opts, lockmw.Fair())
		}
		if _, err := l.Acquire(ctx, "one", opts...); !errors.Is(err, lockmw.ErrNotAcquired) {
			t.Fatalf("fair %v: Acquire on the same Locker while held: %v, want ErrNotAcquired", fair, err)
		}
	}
	es := entries(t, cli, "one")
	if len(es) != 1 {
		t.Fatalf("etcd holds %v, want the holder's key alone", es)
	}

	// Many goroutines of one Locker: never two inside.
	var inside atomic.Int32
	for w := range 8 {
		wg.Go(func() {
			var opts []lockmw.AcquireOption
			if w%2 == 1 {
				opts = append(opts, lockmw.Fair())
			}
			for range 10 {
				lease, err := l.Acquire(ctx, "one", opts...)
				if err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once on one Locker", n)
				}
				inside.Add(-1)
				_ = lease.Release(ctx)
			}
		})
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// etcd issue 22082: Mutex.Unlock deletes its key by name, whoever holds it
// by then. A lockmw release deletes its key by a name that no other
// acquisition uses while the key may exist: a holder whose lock was lost
// never deletes its successor's, even the successor on the same Locker and
// lease TTL.
func TestTrapReleaseSparesSuccessor(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	l := newLocker(t, cli)
	ctx := bg(t)
	a, err := l.Acquire(ctx, "succ")
	if err != nil {
		t.Fatal(err)
	}
	// The lock expires behind its holder's back (its lease revoked, as an
	// expiry would do), and the same Locker takes it again.
	es := entries(t, cli, "succ")
	revoke(t, cli, es[0].lease)
	b, err := l.Acquire(ctx, "succ")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
		t.Fatalf("Release of the expired lease: %v, want ErrLost", err)
	}
	es = entries(t, cli, "succ")
	if len(es) != 1 || uint64(es[0].rev) != b.Fence() {
		t.Fatalf("after the old holder's Release etcd holds %v, want the successor's key (fence %d)", es, b.Fence())
	}
	if err := b.Context().Err(); err != nil {
		t.Fatalf("successor's lease ended: %v", context.Cause(b.Context()))
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// etcd issue 19597: a Mutex waiter keeps blocking after its own Session's
// lease expired, its queue key gone. A lockmw fair waiter sees its entry go
// (a watch on its own key, its lease's failing renewal) and queues anew,
// and gets the lock when the holder releases.
func TestTrapWaiterRequeuesWhenItsLeaseEnds(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	ctx := bg(t)
	holder, err := newLocker(t, cli).Acquire(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	w := newLocker(t, cli)
	got := make(chan *lockmw.Lease, 1)
	go func() {
		lease, err := w.Acquire(ctx, "w", lockmw.Fair())
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	lockmwtest.Eventually(t, 10*time.Second, "waiter queued", func() bool { return len(entries(t, cli, "w")) == 2 })
	old := entries(t, cli, "w")[1]
	revoke(t, cli, old.lease)
	// The waiter queues again, under a new lease, while the lock is held.
	lockmwtest.Eventually(t, 10*time.Second, "waiter queued anew", func() bool {
		es := entries(t, cli, "w")
		return len(es) == 2 && es[1].token == old.token && es[1].rev != old.rev
	})
	select {
	case <-got:
		t.Fatal("the waiter acquired a held lock")
	default:
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease := <-got
	if lease == nil {
		t.FailNow()
	}
	es := entries(t, cli, "w")
	if len(es) != 1 || uint64(es[0].rev) != lease.Fence() || !leaseAlive(t, cli, es[0].lease) {
		t.Fatalf("etcd holds %v; want the waiter's key at its fence %d, under a live lease", es, lease.Fence())
	}
	_ = lease.Release(ctx)
}

// etcd issue 11456: the Lock RPC once returned success without checking
// that the caller's lease, and so its key, still existed. A lockmw
// acquisition is reported only for a key that exists under a live lease:
// here the waiter's lease is revoked just as the holder releases, and a
// Locker's cached lease is revoked behind its back before an acquisition.
func TestTrapAcquiredOnlyWithLiveKey(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	ctx := bg(t)
	for range 3 {
		holder, err := newLocker(t, cli).Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		w := newLocker(t, cli)
		got := make(chan *lockmw.Lease, 1)
		go func() {
			lease, err := w.Acquire(ctx, "k", lockmw.Fair())
			if err != nil {
				t.Error(err)
			}
			got <- lease
		}()
		lockmwtest.Eventually(t, 10*time.Second, "waiter queued", func() bool { return len(entries(t, cli, "k")) == 2 })
		revoke(t, cli, entries(t, cli, "k")[1].lease)
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lease := <-got
		if lease == nil {
			t.FailNow()
		}
		es := entries(t, cli, "k")
		if len(es) != 1 || uint64(es[0].rev) != lease.Fence() || !leaseAlive(t, cli, es[0].lease) {
			t.Fatalf("etcd holds %v; want the waiter's key at its fence %d, under a live lease", es, lease.Fence())
		}
		_ = lease.Release(ctx)
	}

	// The Locker's shared lease, fresh as far as it knows, is revoked.
	l := newLocker(t, cli)
	first, err := l.Acquire(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	id := entries(t, cli, "k2")[0].lease
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	revoke(t, cli, id)
	for _, fair := range []bool{false, true} {
		var opts []lockmw.AcquireOption
		if fair {
			opts = append(opts, lockmw.Fair())
		}
		lease, err := l.Acquire(ctx, "k2", opts...)
		if err != nil {
			t.Fatalf("fair %v: Acquire after the Locker's lease was revoked: %v", fair, err)
		}
		es := entries(t, cli, "k2")
		if len(es) != 1 || uint64(es[0].rev) != lease.Fence() || es[0].lease == id || !leaseAlive(t, cli, es[0].lease) {
			t.Fatalf("fair %v: etcd holds %v; want the key at fence %d under a new live lease", fair, es, lease.Fence())
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Default-mode waiters of one Locker do not all retry on every release:
// one per key waits for etcd's word, the others queue behind it in the
// Locker. Without that, n waiters would make about n²/2 attempts in all.
func TestOneLockerWaitersDoNotHerd(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx := bg(t)
	holder, err := newLocker(t, cli).Acquire(ctx, "herd")
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, cli)
	const n = 12
	var started, done sync.WaitGroup
	for range n {
		started.Add(1)
		done.Go(func() {
			started.Done()
			lease, err := l.Acquire(ctx, "herd")
			if err != nil {
				t.Error(err)
				return
			}
			_ = lease.Release(ctx)
		})
	}
	started.Wait()
	// Every waiter has made its first attempt and queued (nothing in
	// etcd shows it): the count of requests stops growing.
	var before int64
	lockmwtest.Eventually(t, 10*time.Second, "waiters settled", func() bool {
		a := servedBesidesRenewals(t, srv)
		time.Sleep(100 * time.Millisecond)
		before = servedBesidesRenewals(t, srv)
		return before == a
	})
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	done.Wait()
	// Each hand-over: the release, the next attempt, one failed attempt of
	// the waiter next through the gate and its watch (creation and
	// cancellation); renewals, which depend on the clock, are not counted.
	if got, limit := servedBesidesRenewals(t, srv)-before, int64(6*n); got > limit {
		t.Fatalf("%d requests for %d hand-overs within one Locker, want at most %d: waiters herd", got, n, limit)
	}
}

// Default-mode waiters of many Lockers queue, as Fair ones do: a release
// wakes the next waiter only, so n hand-overs cost a few requests each,
// not one attempt per waiting Locker per release (about n²/2 in all).
func TestDefaultWaitersAcrossLockersDoNotHerd(t *testing.T) {
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	ctx := bg(t)
	holder, err := newLocker(t, admin).Acquire(ctx, "herd")
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	var done sync.WaitGroup
	order := make(chan int, n)
	for i := range n {
		l := newLocker(t, srv.Client(t))
		done.Go(func() {
			lease, err := l.Acquire(ctx, "herd")
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			_ = lease.Release(ctx)
		})
		// One at a time, so that the queue's order is known.
		lockmwtest.Eventually(t, 10*time.Second, "waiter queued", func() bool { return len(entries(t, admin, "herd")) == i+2 })
	}
	before := servedBesidesRenewals(t, srv)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	done.Wait()
	close(order)
	next := 0
	for i := range order {
		if i != next {
			t.Errorf("waiter %d acquired in turn %d: default waiters across Lockers are served in queue order", i, next)
		}
		next++
	}
	// Each hand-over: the release, the next waiter's acquiring read and
	// the cancellation of its watch (etcd 3.6 counts it; 3.4 did not);
	// renewals, which depend on the clock (a loaded machine stretches the
	// test, and renewals with it), are not counted. A herd would make
	// n(n+1)/2 failed attempts besides.
	got, limit := servedBesidesRenewals(t, srv)-before, int64(4*n)
	t.Logf("%d requests for %d hand-overs across Lockers", got, n)
	if got > limit {
		t.Fatalf("%d requests for %d hand-overs across Lockers, want at most %d: waiters herd", got, n, limit)
	}
	if left := entries(t, admin, "herd"); len(left) != 0 {
		t.Errorf("keys left after every waiter released: %v", left)
	}
}
