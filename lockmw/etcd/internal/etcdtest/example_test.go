//go:build unix

package etcdtest_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// This example is compiled but not run: it needs the *testing.T of a real
// test, here a placeholder.
func ExampleStartCluster() {
	var t *testing.T // in a real test: func TestX(t *testing.T) { ... }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c := etcdtest.StartCluster(t, 3)
	cli := c.Client(t)

	// Kill the leader: the other two elect another, and take writes.
	old := c.Leader(t)
	old.Kill(t)
	next := c.Leader(t)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}

	// The old leader rejoins on its ports and data directory, then takes
	// the lead back.
	old.Restart(t)
	c.MoveLeader(t, old)
	_ = next

	// A client through a proxy loses its link alone.
	p := etcdtest.StartProxy(t, c.Members()[0])
	via := c.Client(t, func(cfg *clientv3.Config) { cfg.Endpoints = []string{p.Addr()} })
	p.Cut(t)
	// ... via times out while cli still works ...
	p.Heal(t)
	_ = via
}

// A paused single member answers nothing until it resumes.
func ExampleServer_Pause() {
	var t *testing.T // in a real test: func TestX(t *testing.T) { ... }
	s := etcdtest.Start(t)
	cli := s.Client(t)
	s.Pause(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := cli.Get(ctx, "k"); err == nil {
		t.Fatal("a paused etcd answered")
	}
	s.Resume(t)
}
