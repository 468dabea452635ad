package etcd_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/ginsuite"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// ginlock's store-independent behaviour (internal/testkit/lockmwtest/ginsuite)
// on a single etcd member: ginlock works unchanged on the etcd store's Locker.
func TestGinlockSuiteEtcd(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	// dir is the etcd key prefix of lock key under prefix (the suite's
	// prefixes and keys hold no '%' or '/').
	dir := func(prefix, key string) string { return prefix + key + "/" }
	ginsuite.Run(t, ginsuite.Env{
		Name: "etcd",
		NewLocker: func(t testing.TB, opts ...lockmw.Option) *lockmw.Locker {
			t.Helper()
			l, err := etcd.New(srv.Client(t), opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			return l
		},
		Lose: func(prefix, key string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := admin.Delete(ctx, dir(prefix, key), clientv3.WithPrefix())
			if err == nil && resp.Deleted == 0 {
				err = fmt.Errorf("no key under %s to delete", dir(prefix, key))
			}
			return err
		},
		LeaseTTL: func(t testing.TB, prefix, key string) time.Duration {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := admin.Get(ctx, dir(prefix, key), append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...)
			if err != nil {
				t.Fatalf("reading the holder's key under %s: %v", dir(prefix, key), err)
			}
			if len(resp.Kvs) == 0 {
				t.Fatalf("no key under %s: the lock is not held", dir(prefix, key))
			}
			ttl, err := admin.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
			if err != nil {
				t.Fatalf("TimeToLive of the holder's lease: %v", err)
			}
			return time.Duration(ttl.TTL) * time.Second
		},
		ShortTTL: etcd.MinTTL,
		// A busy answer tells the holder's time left only when the holder
		// is the same Locker.
		KnowsHolderTTL: false,
	})
}
