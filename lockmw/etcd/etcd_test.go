package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

func TestAcquireRelease(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	l := newLocker(t, cli)
	ctx := bg(t)
	lease, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	es := entries(t, cli, "a")
	if len(es) != 1 || uint64(es[0].rev) != lease.Fence() {
		t.Fatalf("etcd holds %v, want one key created at the lease's fence %d", es, lease.Fence())
	}
	if _, err := newLocker(t, cli).TryAcquire(ctx, "a"); !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock: %v, want ErrNotAcquired", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if es := entries(t, cli, "a"); len(es) != 0 {
		t.Fatalf("after Release etcd still holds %v", es)
	}
	if err := context.Cause(lease.Context()); !errors.Is(err, context.Canceled) {
		t.Fatalf("released lease's context cause %v, want context.Canceled", err)
	}
}

// exclusion runs lockers × workers goroutines taking key rounds times each,
// half of them Fair, and checks that no two hold it at once and that each
// holder's fence is above the one before.
func exclusion(t *testing.T, cli *clientv3.Client, lockers, workers, rounds int) {
	ctx := bg(t)
	var (
		inside    atomic.Int32
		mu        sync.Mutex
		lastFence uint64
		holdings  int
		wg        sync.WaitGroup
	)
	for i := range lockers {
		l := newLocker(t, cli)
		for w := range workers {
			wg.Go(func() {
				var opts []lockmw.AcquireOption
				if (i+w)%2 == 1 {
					opts = append(opts, lockmw.Fair())
				}
				for range rounds {
					lease, err := l.Acquire(ctx, "x", opts...)
					if err != nil {
						t.Error(err)
						return
					}
					if n := inside.Add(1); n != 1 {
						t.Errorf("%d holders at once", n)
					}
					mu.Lock()
					if lease.Fence() <= lastFence {
						t.Errorf("fence %d after %d: not rising", lease.Fence(), lastFence)
					}
					lastFence = lease.Fence()
					holdings++
					mu.Unlock()
					inside.Add(-1)
					if err := lease.Release(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if want := lockers * workers * rounds; holdings != want && !t.Failed() {
		t.Fatalf("%d holdings, want %d", holdings, want)
	}
	if es := entries(t, cli, "x"); len(es) != 0 {
		t.Fatalf("after every release etcd still holds %v", es)
	}
}

func TestExclusionSingle(t *testing.T) {
	exclusion(t, etcdtest.Start(t).Client(t), 6, 3, 15)
}

func TestExclusionCluster(t *testing.T) {
	exclusion(t, etcdtest.StartCluster(t, 3).Client(t), 6, 3, 10)
}

func TestBadInput(t *testing.T) {
	if _, err := etcd.New(nil); !errors.Is(err, lockmw.ErrNilClient) {
		t.Fatalf("New(nil): %v, want ErrNilClient", err)
	}
	cli := etcdtest.Start(t).Client(t)
	for _, ttl := range []time.Duration{time.Second, 1500 * time.Millisecond, 2500 * time.Millisecond, 100 * time.Millisecond} {
		if _, err := etcd.New(cli, lockmw.WithTTL(ttl)); !errors.Is(err, lockmw.ErrInvalidOption) {
			t.Errorf("New with WithTTL(%v): %v, want ErrInvalidOption", ttl, err)
		}
	}
	if _, err := etcd.New(cli, lockmw.WithWaitReplicas(1, time.Second)); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Errorf("New with WithWaitReplicas: %v, want ErrInvalidOption", err)
	}
	l := newLocker(t, cli)
	ctx := bg(t)
	for _, ttl := range []time.Duration{time.Second, 3500 * time.Millisecond} {
		for _, fair := range []bool{false, true} {
			opts := []lockmw.AcquireOption{lockmw.WithLeaseTTL(ttl)}
			if fair {
				opts = append(opts, lockmw.Fair())
			}
			if _, err := l.Acquire(ctx, "k", opts...); !errors.Is(err, lockmw.ErrInvalidOption) {
				t.Errorf("Acquire with WithLeaseTTL(%v), fair %v: %v, want ErrInvalidOption", ttl, fair, err)
			}
		}
	}
	if _, err := l.Acquire(ctx, ""); !errors.Is(err, lockmw.ErrInvalidKey) {
		t.Errorf("Acquire of an empty key: %v, want ErrInvalidKey", err)
	}
	if es := entries(t, cli, "k"); len(es) != 0 {
		t.Fatalf("rejected acquisitions left %v in etcd", es)
	}
	// A whole number of seconds, other than the Locker's, works.
	lease, err := l.Acquire(ctx, "k", lockmw.WithLeaseTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestKeysWithSlashesDoNotOverlap(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	l := newLocker(t, cli)
	ctx := bg(t)
	a, err := l.TryAcquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	// "a/b" and "a%2Fb" must be locks of their own, beside "a".
	for _, k := range []string{"a/b", "a%2Fb", "a/"} {
		s, err := l.TryAcquire(ctx, k)
		if err != nil {
			t.Fatalf("TryAcquire(%q) while %q is held: %v", k, "a", err)
		}
		defer s.Release(ctx)
	}
}

func TestFairOrder(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	ctx := bg(t)
	holder, err := newLocker(t, cli).Acquire(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range n {
		l := newLocker(t, cli)
		wg.Go(func() {
			lease, err := l.Acquire(ctx, "f", lockmw.Fair())
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := lease.Release(ctx); err != nil {
				t.Error(err)
			}
		})
		// The next waiter queues only once this one is in the queue.
		lockmwtest.Eventually(t, 10*time.Second, fmt.Sprintf("waiter %d queued", i), func() bool { return len(entries(t, cli, "f")) == i+2 })
	}
	// A default-mode waiter does not get ahead of the queue.
	late := newLocker(t, cli)
	wg.Go(func() {
		lease, err := late.Acquire(ctx, "f")
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		order = append(order, n)
		mu.Unlock()
		_ = lease.Release(ctx)
	})
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("acquired in order %v, want 0..%d", order, n)
		}
	}
}

func TestGivingUpLeavesNothing(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	ctx := bg(t)
	holder, err := newLocker(t, cli).Acquire(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, cli)
	only := func(what string) {
		t.Helper()
		es := entries(t, cli, "g")
		if len(es) != 1 || uint64(es[0].rev) != holder.Fence() {
			t.Fatalf("%s: etcd holds %v, want only the holder's key", what, es)
		}
	}
	for _, fair := range []bool{false, true} {
		opts := []lockmw.AcquireOption{lockmw.WithWait(300 * time.Millisecond)}
		if fair {
			opts = append(opts, lockmw.Fair())
		}
		if _, err := l.Acquire(ctx, "g", opts...); !errors.Is(err, lockmw.ErrNotAcquired) {
			t.Fatalf("fair %v: WithWait on a held lock: %v, want ErrNotAcquired", fair, err)
		}
		only(fmt.Sprintf("fair %v, after WithWait ran out", fair))

		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := l.Acquire(cctx, "g", opts[1:]...)
			done <- err
		}()
		// Either mode's waiter queues behind the other Locker's key.
		lockmwtest.Eventually(t, 10*time.Second, "waiter queued", func() bool { return len(entries(t, cli, "g")) == 2 })
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("fair %v: cancelled Acquire: %v, want context.Canceled", fair, err)
		}
		only(fmt.Sprintf("fair %v, after cancel", fair))

		if _, err := l.TryAcquire(ctx, "g", opts[1:]...); !errors.Is(err, lockmw.ErrNotAcquired) {
			t.Fatalf("fair %v: TryAcquire on a held lock: %v, want ErrNotAcquired", fair, err)
		}
		only(fmt.Sprintf("fair %v, after TryAcquire", fair))
	}
}

func TestClose(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	ctx := bg(t)
	l, err := etcd.New(cli, lockmw.WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	held, err := l.Acquire(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	other := newLocker(t, cli)
	blocker, err := other.Acquire(ctx, "c2")
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 2)
	for _, fair := range []bool{false, true} {
		go func() {
			var opts []lockmw.AcquireOption
			if fair {
				opts = append(opts, lockmw.Fair())
			}
			_, err := l.Acquire(ctx, "c2", opts...)
			waiting <- err
		}()
	}
	// Both waiters queue behind the other Locker's key: the default one
	// too, as default waiters of another Locker's lock do.
	lockmwtest.Eventually(t, 10*time.Second, "both waiters queued", func() bool { return len(entries(t, cli, "c2")) == 3 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-waiting; !errors.Is(err, lockmw.ErrClosed) {
			t.Fatalf("Acquire waiting during Close: %v, want ErrClosed", err)
		}
	}
	if cause := context.Cause(held.Context()); !errors.Is(cause, lockmw.ErrClosed) {
		t.Fatalf("held lease's context cause after Close: %v, want ErrClosed", cause)
	}
	if es := entries(t, cli, "c1"); len(es) != 0 {
		t.Fatalf("Close left %v", es)
	}
	if es := entries(t, cli, "c2"); len(es) != 1 || uint64(es[0].rev) != blocker.Fence() {
		t.Fatalf("Close left %v on c2, want only the other Locker's key", es)
	}
	if _, err := l.Acquire(ctx, "c3"); !errors.Is(err, lockmw.ErrClosed) {
		t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// One Locker renews leases of two TTLs (two etcd leases) together, while a
// lease without watchdog beside them expires on time: it has an etcd lease
// of its own, which nothing renews.
func TestRenewalsAndExpiry(t *testing.T) {
	cli := etcdtest.Start(t).Client(t)
	l := newLocker(t, cli)
	ctx := bg(t)
	var kept []*lockmw.Lease
	for i, ttl := range []time.Duration{testTTL, testTTL, 3 * time.Second, 3 * time.Second} {
		lease, err := l.Acquire(ctx, fmt.Sprintf("r%d", i), lockmw.WithLeaseTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, lease)
	}
	once, err := l.Acquire(ctx, "once", lockmw.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	// The lease without watchdog ends (a TTL after it was taken), and only
	// then can another Locker take its key.
	other := newLocker(t, cli)
	next, err := other.Acquire(ctx, "once")
	if err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(once.Context()); !errors.Is(cause, lockmw.ErrLost) {
		t.Fatalf("the lease without watchdog was live when another Locker took its key (cause %v)", cause)
	}
	_ = next.Release(ctx)
	// Meanwhile, over a TTL, the others were renewed.
	for _, s := range kept {
		if err := s.Context().Err(); err != nil {
			t.Fatalf("lease %q ended: %v", s.Key(), context.Cause(s.Context()))
		}
		if err := s.Release(ctx); err != nil {
			t.Fatalf("Release of %q: %v", s.Key(), err)
		}
	}
}
