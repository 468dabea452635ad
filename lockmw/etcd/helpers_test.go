package etcd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
)

// testTTL is the lease TTL of most tests: etcd's shortest.
const testTTL = 2 * time.Second

// newLocker returns a Locker on cli, closed at cleanup.
func newLocker(t testing.TB, cli *clientv3.Client, opts ...lockmw.Option) *lockmw.Locker {
	t.Helper()
	l, err := etcd.New(cli, append([]lockmw.Option{lockmw.WithTTL(testTTL)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// lockDir is the etcd key prefix of lock key with the default prefix.
func lockDir(key string) string { return etcd.LockDir(lockmw.DefaultPrefix, key) }

// entries returns the keys of lock key in etcd, oldest first.
func entries(t testing.TB, cli *clientv3.Client, key string) []*kv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, lockDir(key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatalf("reading the keys of lock %q: %v", key, err)
	}
	out := make([]*kv, len(resp.Kvs))
	for i, k := range resp.Kvs {
		out[i] = &kv{key: string(k.Key), token: strings.TrimPrefix(string(k.Key), lockDir(key)), rev: k.CreateRevision, lease: clientv3.LeaseID(k.Lease)}
	}
	return out
}

// kv is one key of a lock in etcd.
type kv struct {
	key   string
	token string
	rev   int64
	lease clientv3.LeaseID
}

// leaseAlive reports whether etcd still has lease id, with time left.
func leaseAlive(t testing.TB, cli *clientv3.Client, id clientv3.LeaseID) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.TimeToLive(ctx, id)
	if err != nil {
		t.Fatalf("TimeToLive(%x): %v", id, err)
	}
	return resp.TTL > 0
}

// revoke revokes lease id, deleting its keys, as an expiry would.
func revoke(t testing.TB, cli *clientv3.Client, id clientv3.LeaseID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Revoke(ctx, id); err != nil {
		t.Fatalf("revoking lease %x: %v", id, err)
	}
}

// bg is a context for test calls that must not hang.
func bg(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
