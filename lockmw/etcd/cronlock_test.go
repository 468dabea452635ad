package etcd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/internal/fireclaim"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/cronsuite"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// cronlock's store-independent suite (internal/testkit/lockmwtest/cronsuite) on
// one etcd member: Singleton, and the Scheduler claiming its fires in
// etcd (no Redis client).
func TestCronlock(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	cronsuite.Run(t, cronsuite.Env{
		NewLocker: func(t testing.TB, opts ...lockmw.Option) *lockmw.Locker {
			return newLocker(t, srv.Client(t), opts...)
		},
		TTL: etcd.MinTTL,
		Lose: func(t testing.TB, key string) {
			if _, err := admin.Delete(bg(t), lockDir(key), clientv3.WithPrefix()); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// The claim records are outside every lock's directory: a lock named like
// a job, even like a record's key, is taken and released beside its
// claims, and the records, one key per job and kind, carry no lease.
func TestFireClaimKeys(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	l := newLocker(t, srv.Client(t), lockmw.WithPrefix("app/"))
	claims := lockmw.FireClaimsOf(l, fireclaim.Inside{}).Own()
	ctx := bg(t)
	at := time.UnixMilli(1_700_000_000_000)
	for _, job := range []string{"sweep", "a/b", "%cronfire%sweep"} {
		if c, err := claims.Claim(ctx, job, at, "host-a"); err != nil || !c.Won {
			t.Fatalf("claim of %q: %+v, %v", job, c, err)
		}
		if err := claims.Running(ctx, job, at, "host-a"); err != nil {
			t.Fatal(err)
		}
		lease, err := l.TryAcquire(ctx, job)
		if err != nil {
			t.Fatalf("the lock %q beside its claim record: %v", job, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := admin.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
		if kv.Lease != 0 {
			t.Errorf("record %s is under lease %x, want none", kv.Key, kv.Lease)
		}
		if strings.Contains(string(kv.Key), "/") {
			t.Errorf("record %s holds a '/': it could be in a lock's directory", kv.Key)
		}
	}
	if len(keys) != 6 {
		t.Errorf("keys %q, want a claim and a run record for each of 3 jobs", keys)
	}
	// Each job has its own record: the third job's name does not reach
	// the first's.
	if c, err := claims.Claim(ctx, "sweep", at, "host-b"); err != nil || c.Won || c.By != "host-a" {
		t.Errorf("second claim of sweep's fire: %+v, %v; want refused by host-a", c, err)
	}
}

// With etcd down, a claim fails within the Locker's TTL instead of
// hanging: the fire is skipped, never run unguarded.
func TestFireClaimEtcdDown(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	l := newLocker(t, srv.Client(t))
	claims := lockmw.FireClaimsOf(l, fireclaim.Inside{}).Own()
	srv.Kill(t)
	_, err := claims.Claim(context.Background(), "down", time.Now(), "host-a")
	if err == nil {
		t.Fatal("a claim with etcd down succeeded")
	}
}
