package etcd_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// This file counts what a lock costs etcd: one nobody waits on, and one
// waiters queue for; and it shows what the requests carry.

// Taking and freeing a free lock sends what concurrency.Mutex sends: one
// transaction (create the key if D is empty) and one delete (the
// key's name is its own, so no transaction compares its revision), and
// nothing else while the Locker's etcd lease is fresh (no grant, no
// renewal on the way).
//
// A holder description (lockmw.WithHolderInfo) changes nothing of that: it
// is the value of the key the transaction creates. Without one, the value
// is empty, the bytes every earlier release wrote.
func TestFreeLockCostsOneTxnAndOneDelete(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx := bg(t)
	const info = "orders-7d9f host-a pid 42"
	for _, c := range []struct {
		opts  []lockmw.Option
		value string
	}{
		{nil, ""},
		{[]lockmw.Option{lockmw.WithHolderInfo(info)}, etcd.HolderTag + info},
	} {
		l := newLocker(t, cli, append(c.opts, lockmw.WithTTL(quietTTL))...)
		for _, way := range []string{"Acquire", "Acquire Fair", "TryAcquire"} {
			acquire := func() (*lockmw.Lease, error) { return l.Acquire(ctx, "free") }
			switch way {
			case "Acquire Fair":
				acquire = func() (*lockmw.Lease, error) { return l.Acquire(ctx, "free", lockmw.Fair()) }
			case "TryAcquire":
				acquire = func() (*lockmw.Lease, error) { return l.TryAcquire(ctx, "free") }
			}
			warm, err := acquire() // grants the Locker's etcd lease
			if err != nil {
				t.Fatal(err)
			}
			resp, err := cli.Get(ctx, lockDir("free"), clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != c.value {
				t.Fatalf("%s: the holder's key %+v, want one with value %q", way, resp.Kvs, c.value)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}
			before := received(t, srv)
			const n = 50
			for range n {
				lease, err := acquire()
				if err != nil {
					t.Fatal(err)
				}
				if err := lease.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			after := received(t, srv)
			for method, v := range after {
				want := int64(0)
				if method == "Txn" || method == "DeleteRange" {
					want = n
				}
				if got := v - before[method]; got != want {
					t.Errorf("value %q, %s: %d lock+unlock sent %d %s, want %d", c.value, way, n, got, method, want)
				}
			}
		}
	}
}

// TestPausedEtcdEndsEachRequestAtTheTTL: against a paused etcd, a Release
// and a waiting Acquire (its queue entry) end once the TTL that bounds
// each request has run out, not before, naming etcd and the bound (as
// TestPausedEtcdIsNamed shows for TryAcquire).
func TestPausedEtcdEndsEachRequestAtTheTTL(t *testing.T) {
	srv := etcdtest.Start(t)
	l := newLocker(t, srv.Client(t), lockmw.WithTTL(2*time.Second))
	ctx := context.Background()
	lease, err := l.Acquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	defer srv.Resume(t)
	for _, c := range []struct {
		what string
		do   func() error
	}{
		{"Release", func() error { return lease.Release(ctx) }},
		{"Acquire", func() error { _, err := l.Acquire(ctx, "k"); return err }},
	} {
		start := time.Now()
		err := c.do()
		took := time.Since(start)
		if !errors.Is(err, lockmw.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "etcd did not answer") || !strings.Contains(err.Error(), "within 2s") {
			t.Errorf("%s on a paused etcd: %v, want ErrUnavailable saying etcd did not answer within 2s", c.what, err)
		}
		if took < 2*time.Second {
			t.Errorf("%s on a paused etcd ended after %v, before its bound of 2s", c.what, took)
		}
	}
}

// A waiting acquisition's first request on a lock not found busy lately is
// a plain attempt, which a held lock refuses; the waiter then queues, two
// transactions in all. Within store.HotFor of that, the next waiter on the
// lock queues at once: one transaction. Either way the hand-over that
// follows costs the waiter no transaction (the watch tells it).
func TestBusyLockQueuesAtOnce(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := bg(t)
	holder := newLocker(t, srv.Client(t), lockmw.WithTTL(quietTTL))
	waiter := newLocker(t, srv.Client(t), lockmw.WithTTL(quietTTL))
	for round, want := range []int64{2, 1} {
		held, err := holder.Acquire(ctx, "busy")
		if err != nil {
			t.Fatal(err)
		}
		before := received(t, srv)["Txn"]
		got := make(chan error, 1)
		go func() {
			lease, err := waiter.Acquire(ctx, "busy")
			if err == nil {
				err = lease.Release(ctx)
			}
			got <- err
		}()
		lockmwtest.Eventually(t, 10*time.Second, "the waiter's queued key", func() bool {
			resp, err := srv.Client(t).Get(ctx, lockDir("busy"), clientv3.WithPrefix(), clientv3.WithCountOnly())
			return err == nil && resp.Count == 2
		})
		if sent := received(t, srv)["Txn"] - before; sent != want {
			t.Errorf("round %d: the waiter sent %d transactions before it was queued, want %d", round, sent, want)
		}
		before = received(t, srv)["Txn"]
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if sent := received(t, srv)["Txn"] - before; sent != 0 {
			t.Errorf("round %d: the hand-over cost %d transactions, want 0", round, sent)
		}
	}
}

// The store's requests carry no deadline for gRPC to send (grpc-timeout):
// the Locker's bound ends them on the client (TestPausedEtcdEndsEachRequestAtTheTTL).
func TestRequestsCarryNoDeadline(t *testing.T) {
	srv := etcdtest.Start(t)
	var mu sync.Mutex
	withDeadline := map[string]int{}
	calls := map[string]int{}
	record := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		mu.Lock()
		calls[method]++
		if _, ok := ctx.Deadline(); ok {
			withDeadline[method]++
		}
		mu.Unlock()
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli := srv.Client(t, func(c *clientv3.Config) {
		c.DialOptions = append(c.DialOptions, grpc.WithChainUnaryInterceptor(record))
	})
	l := newLocker(t, cli, lockmw.WithTTL(quietTTL))
	other := newLocker(t, srv.Client(t), lockmw.WithTTL(quietTTL))
	ctx := bg(t)
	held, err := other.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = held.Release(ctx)
	}()
	for _, acquire := range []func() (*lockmw.Lease, error){
		func() (*lockmw.Lease, error) { return l.Acquire(ctx, "k") }, // queues behind other's holding
		func() (*lockmw.Lease, error) { return l.Acquire(ctx, "free") },
		func() (*lockmw.Lease, error) { return l.TryAcquire(ctx, "free") },
	} {
		lease, err := acquire()
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range []string{"/etcdserverpb.KV/Txn", "/etcdserverpb.KV/DeleteRange"} {
		if calls[m] == 0 || withDeadline[m] != 0 {
			t.Errorf("%s: %d calls, %d with a deadline; want calls, none with a deadline", m, calls[m], withDeadline[m])
		}
	}
}
