package zookeeper_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/cronsuite"
	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/ginsuite"
	"github.com/lockmw/lockmw/internal/testkit/zktest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/zookeeper"
)

// deleteLockNodes deletes every node of the lock parent p behind its
// holder's back.
func deleteLockNodes(c *zk.Conn, p string) error {
	children, _, err := c.Children(p)
	if err != nil {
		return fmt.Errorf("children of %s: %w", p, err)
	}
	if len(children) == 0 {
		return fmt.Errorf("no node under %s to delete", p)
	}
	for _, ch := range children {
		if err := c.Delete(p+"/"+ch, -1); err != nil && err != zk.ErrNoNode {
			return err
		}
	}
	return nil
}

// ginlock's store-independent behaviour (internal/testkit/lockmwtest/ginsuite)
// on one ZooKeeper server: ginlock works unchanged on the store's Locker.
func TestGinlockSuiteZooKeeper(t *testing.T) {
	t.Parallel()
	e := zktest.StartEnsemble(t, 1)
	adm := admin(t, e.Addrs()...)
	ginsuite.Run(t, ginsuite.Env{
		Name: "zookeeper",
		// The suite takes leases of a few seconds on Lockers of shorter
		// TTLs: a session made for them.
		NewLocker: func(t testing.TB, opts ...lockmw.Option) *lockmw.Locker {
			cfg := config(e.Addrs()...)
			cfg.SessionTimeout = 20 * time.Second
			l, err := zookeeper.New(cfg, append([]lockmw.Option{lockmw.WithTTL(testTTL)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			return l
		},
		Lose: func(prefix, key string) error {
			return deleteLockNodes(adm, "/"+prefix+key)
		},
		KnowsHolderTTL: false,
	})
}

// cronlock's store-independent suite (internal/testkit/lockmwtest/cronsuite) on
// one ZooKeeper server: Singleton, and the Scheduler claiming its fires in
// ZooKeeper (no Redis client).
func TestCronlockSuiteZooKeeper(t *testing.T) {
	t.Parallel()
	e := zktest.StartEnsemble(t, 1)
	adm := admin(t, e.Addrs()...)
	cronsuite.Run(t, cronsuite.Env{
		NewLocker: func(t testing.TB, opts ...lockmw.Option) *lockmw.Locker {
			return newLocker(t, e, opts...)
		},
		TTL: testTTL,
		Lose: func(t testing.TB, key string) {
			if err := deleteLockNodes(adm, lockParent(key)); err != nil {
				t.Fatal(err)
			}
		},
	})
}
