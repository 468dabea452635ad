package etcd_test

import (
	"testing"

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
		for _, fair := range []bool{false, true} {
			var opts []lockmw.AcquireOption
			if fair {
				opts = append(opts, lockmw.Fair())
			}
			l := newLocker(t, cli, append(c.opts, lockmw.WithTTL(quietTTL))...)
			warm, err := l.Acquire(ctx, "free", opts...) // grants the Locker's etcd lease
			if err != nil {
				t.Fatal(err)
			}
			resp, err := cli.Get(ctx, lockDir("free"), clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != c.value {
				t.Fatalf("fair %v: the holder's key %+v, want one with value %q", fair, resp.Kvs, c.value)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}
			before := received(t, srv)
			const n = 50
			for range n {
				lease, err := l.Acquire(ctx, "free", opts...)
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
					t.Errorf("value %q, fair %v: %d lock+unlock sent %d %s, want %d", c.value, fair, n, got, method, want)
				}
			}
		}
	}
}
