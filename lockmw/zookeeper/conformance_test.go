package zookeeper_test

import (
	"sync"
	"testing"
	"time"

	"github.com/lockmw/lockmw/internal/testkit/conformance"
	"github.com/lockmw/lockmw/internal/testkit/zktest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/zookeeper"
)

// The conformance suite (internal/testkit/conformance) against one ZooKeeper
// server and a three-server ensemble.

func TestConformanceZooKeeper(t *testing.T) {
	t.Parallel()
	runConformance(t, "zookeeper", zktest.StartEnsemble(t, 1))
}

func TestConformanceZooKeeperEnsemble(t *testing.T) {
	t.Parallel()
	runConformance(t, "zookeeper-ensemble", zktest.StartEnsemble(t, 3))
}

func runConformance(t *testing.T, name string, e *zktest.Ensemble) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the servers' latest output:\n%s", e.Tails())
		}
	})
	adm := admin(t, e.Addrs()...)
	each := func(do func(*zktest.Server, testing.TB)) func(testing.TB) {
		return func(t testing.TB) {
			for _, s := range e.Servers() {
				do(s, t)
			}
		}
	}
	conformance.Run(t, conformance.Store{
		Name: name,
		NewLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, error) {
			return zookeeper.New(config(e.Addrs()...), opts...)
		},
		NewCuttableLocker: func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, func(testing.TB), func(testing.TB), error) {
			var proxies []*zktest.Proxy
			var addrs []string
			for _, s := range e.Servers() {
				p := zktest.StartProxy(t, s)
				proxies = append(proxies, p)
				addrs = append(addrs, p.Addr())
			}
			all := func(do func(*zktest.Proxy, testing.TB)) func(testing.TB) {
				return func(t testing.TB) {
					for _, p := range proxies {
						do(p, t)
					}
				}
			}
			l, err := zookeeper.New(config(addrs...), opts...)
			return l, all((*zktest.Proxy).Cut), all((*zktest.Proxy).Heal), err
		},
		Pause:  each((*zktest.Server).Pause),
		Resume: each((*zktest.Server).Resume),
		Kill:   each((*zktest.Server).Kill),
		// Servers restart together: one alone has no quorum.
		Restart: func(t testing.TB) {
			var wg sync.WaitGroup
			for _, s := range e.Servers() {
				wg.Go(func() { s.Restart(t, false) })
			}
			wg.Wait()
			e.Leader(t)
		},
		Leftovers:            func(t testing.TB, key string) []string { return leftovers(t, adm, key) },
		LeftoversWithin:      30 * time.Second, // empty lock parents go at the servers' container check
		Fair:                 true,
		QueuesDefaultWaiters: true,
		Queued:               func(t testing.TB, key string) int { return max(len(nodes(t, adm, key))-1, 0) },
		Notifies:             true,
		Requests:             func(t testing.TB) int64 { return received(t, e) },
		// doc.go, "Inspecting": a holding lives with its session (no
		// TTL); the fence is the holder node's czxid; Since its ctime,
		// exact for a holder that was first at its create (the suite's
		// holders are), at least that otherwise; the holder info is its
		// node's data; waiters are the other lock nodes, whose mode no
		// node tells.
		Inspects: &conformance.Inspects{
			TTL:           lockmw.Unknown,
			Fence:         lockmw.Exact,
			Holder:        lockmw.Exact,
			Since:         lockmw.Exact,
			SinceWithInfo: lockmw.Exact,
			Waiters:       lockmw.Exact,
			FairWaiters:   lockmw.Unknown,
		},
	})
}
