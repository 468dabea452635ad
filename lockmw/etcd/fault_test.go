package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// lostBeforeOthers holds a lock, runs stop (which makes etcd unreachable
// beyond the TTL) and start (which brings it back), and checks that the
// lease's context ends with ErrLost before another Locker acquires the
// lock, which that Locker tries all along.
func lostBeforeOthers(t *testing.T, srv *etcdtest.Server, stop, start func()) {
	cli := srv.Client(t)
	ctx := bg(t)
	a, err := newLocker(t, cli).Acquire(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	b := newLocker(t, cli)
	got := make(chan error, 1)
	aEndedFirst := make(chan bool, 1)
	go func() {
		for {
			lease, err := b.Acquire(ctx, "lost")
			if errors.Is(err, lockmw.ErrUnavailable) {
				continue // etcd is away: keep trying
			}
			if err == nil {
				select {
				case <-a.Context().Done():
					aEndedFirst <- true
				default:
					aEndedFirst <- false
				}
				_ = lease.Release(ctx)
			}
			got <- err
			return
		}
	}()
	stop()
	lockmwtest.Eventually(t, 4*testTTL, "the holder's lease context ends", func() bool { return a.Context().Err() != nil })
	if cause := context.Cause(a.Context()); !errors.Is(cause, lockmw.ErrLost) {
		t.Fatalf("lease context cause %v, want ErrLost", cause)
	}
	start()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if !<-aEndedFirst {
		t.Fatal("another Locker acquired the lock while the first lease's context was still live")
	}
	if err := a.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
		t.Fatalf("Release of the lost lease: %v, want ErrLost", err)
	}
}

func TestLostWhilePaused(t *testing.T) {
	srv := etcdtest.Start(t)
	lostBeforeOthers(t, srv, func() { srv.Pause(t) }, func() { srv.Resume(t) })
}

func TestLostWhileKilled(t *testing.T) {
	srv := etcdtest.Start(t)
	lostBeforeOthers(t, srv, func() { srv.Kill(t) }, func() { srv.Restart(t) })
}

// A lock cut off from its holder by a proxy is lost by its deadline, while
// etcd itself runs on and expires the key.
func TestLostWhileCutOff(t *testing.T) {
	srv := etcdtest.Start(t)
	p := etcdtest.StartProxy(t, srv)
	cut := newLocker(t, srv.Client(t, func(c *clientv3.Config) { c.Endpoints = []string{p.Addr()} }))
	ctx := bg(t)
	a, err := cut.Acquire(ctx, "cut")
	if err != nil {
		t.Fatal(err)
	}
	b := newLocker(t, srv.Client(t))
	p.Cut(t)
	lease, err := b.Acquire(ctx, "cut")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Context().Done():
	default:
		t.Fatal("the lock was acquired elsewhere while its cut-off holder's lease was live")
	}
	if cause := context.Cause(a.Context()); !errors.Is(cause, lockmw.ErrLost) {
		t.Fatalf("cut-off lease's context cause %v, want ErrLost", cause)
	}
	if a.Fence() >= lease.Fence() {
		t.Fatalf("fence %d after %d: not rising", lease.Fence(), a.Fence())
	}
	p.Heal(t)
	if err := a.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
		t.Fatalf("Release of the lost lease: %v, want ErrLost", err)
	}
	if es := entries(t, srv.Client(t), "cut"); len(es) != 1 || uint64(es[0].rev) != lease.Fence() {
		t.Fatalf("etcd holds %v, want only the new holder's key", es)
	}
}

// Locks outlive leader changes: moved leadership and a killed leader.
func TestLeaderChangeKeepsLocks(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	cli := c.Client(t)
	ctx := bg(t)
	l := newLocker(t, cli, lockmw.WithTTL(3*time.Second))
	var held []*lockmw.Lease
	for _, k := range []string{"l1", "l2", "l3"} {
		lease, err := l.Acquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lease)
	}
	other := newLocker(t, cli, lockmw.WithTTL(3*time.Second))
	check := func(when string) {
		t.Helper()
		for _, s := range held {
			if err := s.Context().Err(); err != nil {
				t.Fatalf("%s: lease %q ended: %v", when, s.Key(), context.Cause(s.Context()))
			}
			if _, err := other.TryAcquire(ctx, s.Key()); !errors.Is(err, lockmw.ErrNotAcquired) && !errors.Is(err, lockmw.ErrUnavailable) {
				t.Fatalf("%s: TryAcquire of held %q: %v, want ErrNotAcquired", when, s.Key(), err)
			}
		}
	}
	for i, m := range c.Members() {
		if m == c.Leader(t) {
			continue
		}
		c.MoveLeader(t, m)
		// Survival is the property: it takes time to observe (two renewals).
		time.Sleep(2 * time.Second)
		check("after moving the leader " + string(rune('0'+i)))
	}
	old := c.Leader(t)
	old.Kill(t)
	c.Leader(t)
	time.Sleep(3 * time.Second) // a whole TTL without the old leader
	check("after killing the leader")
	old.Restart(t)
	for _, s := range held {
		if err := s.Release(ctx); err != nil {
			t.Fatalf("Release of %q: %v", s.Key(), err)
		}
	}
}
