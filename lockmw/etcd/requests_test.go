package etcd_test

import (
	"testing"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// This file counts what a lock nobody waits on costs etcd.

// Taking and freeing a free lock sends what concurrency.Mutex sends: one
// transaction (create the key if D is empty, read D) and one delete (the
// key's name is its own, so no transaction compares its revision), and
// nothing else while the Locker's etcd lease is fresh (no grant, no
// renewal on the way).
func TestFreeLockCostsOneTxnAndOneDelete(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := bg(t)
	for _, fair := range []bool{false, true} {
		var opts []lockmw.AcquireOption
		if fair {
			opts = append(opts, lockmw.Fair())
		}
		l := newLocker(t, srv.Client(t), lockmw.WithTTL(quietTTL))
		warm, err := l.Acquire(ctx, "free", opts...) // grants the Locker's etcd lease
		if err != nil {
			t.Fatal(err)
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
				t.Errorf("fair %v: %d lock+unlock sent %d %s, want %d", fair, n, got, method, want)
			}
		}
	}
}
