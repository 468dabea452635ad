package zookeeper_test

import (
	"io"
	"log"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockmw/lockmw/internal/testkit/zktest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/zookeeper"
)

// testTTL is the lease TTL of most tests.
const testTTL = time.Second

// config is the store's Config for servers, with the test servers' tick.
func config(servers ...string) zookeeper.Config {
	return zookeeper.Config{Servers: servers, TickTime: zktest.TickTime, ConnectTimeout: 20 * time.Second}
}

// newLocker returns a Locker on the ensemble, closed at cleanup.
func newLocker(t testing.TB, e *zktest.Ensemble, opts ...lockmw.Option) *lockmw.Locker {
	t.Helper()
	l, err := zookeeper.New(config(e.Addrs()...), append([]lockmw.Option{lockmw.WithTTL(testTTL)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// admin returns a plain go-zookeeper connection to the ensemble, closed at
// cleanup.
func admin(t testing.TB, addrs ...string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(addrs, 30*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	deadline := time.Now().Add(20 * time.Second)
	for c.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			t.Fatalf("admin connection: no session (state %v)", c.State())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

// lockParent is the node of lock key with the default prefix.
func lockParent(key string) string { return zookeeper.LockParent(lockmw.DefaultPrefix, key) }

// nodes returns the children of lock key's parent; nil when it does not
// exist.
func nodes(t testing.TB, c *zk.Conn, key string) []string {
	t.Helper()
	children, _, err := c.Children(lockParent(key))
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		t.Fatalf("children of %s: %v", lockParent(key), err)
	}
	return children
}

// leftovers lists lock key's parent node, if it exists, and its children.
func leftovers(t testing.TB, c *zk.Conn, key string) []string {
	t.Helper()
	p := lockParent(key)
	children, _, err := c.Children(p)
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		t.Fatalf("children of %s: %v", p, err)
	}
	out := []string{p}
	for _, ch := range children {
		out = append(out, p+"/"+ch)
	}
	return out
}

// received sums the packets every server received (four-letter word srvr).
func received(t testing.TB, e *zktest.Ensemble) int64 {
	t.Helper()
	var n int64
	for _, s := range e.Servers() {
		out, err := s.FourLetter("srvr")
		if err != nil {
			t.Fatalf("srvr: %v", err)
		}
		for line := range strings.SplitSeq(out, "\n") {
			if v, ok := strings.CutPrefix(line, "Received: "); ok {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
	}
	return n
}
