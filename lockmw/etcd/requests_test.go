package etcd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// This file counts what a lock nobody waits on costs etcd.

// Taking and freeing a free lock sends what concurrency.Mutex sends: one
// transaction (create the key if D is empty, read D) and one delete (the
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
