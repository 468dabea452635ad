package zookeeper_test

import (
	"context"
	"io"
	"log"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/benchsuite"
	"github.com/lockmw/lockmw/internal/testkit/zktest"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/zookeeper"
)

// Benchmarks of lockmw on ZooKeeper beside go-zookeeper's zk.Lock, on the
// same single server in the same run (make bench), with the harness of
// internal/testkit/lockmwtest/benchsuite.

// zkLock is go-zookeeper's recipe, one connection per contender.
type zkLock struct{ c *zk.Conn }

func (m zkLock) Lock(_ context.Context, key string) (func(), error) {
	l := zk.NewLock(m.c, "/bench-zklock/"+key, zk.WorldACL(zk.PermAll))
	if err := l.Lock(); err != nil {
		return nil, err
	}
	return func() { _ = l.Unlock() }, nil
}

// kinds are the implementations compared on e: lockmw's default mode,
// lockmw Fair, and zk.Lock.
func kinds(e *zktest.Ensemble) []benchsuite.Kind {
	return []benchsuite.Kind{
		{Name: "lockmw", New: func(tb testing.TB) benchsuite.Mutex { return benchsuite.Locker{L: newBenchLocker(tb, e)} }},
		{Name: "lockmw-fair", New: func(tb testing.TB) benchsuite.Mutex {
			return benchsuite.Locker{L: newBenchLocker(tb, e), Opts: []lockmw.AcquireOption{lockmw.Fair()}}
		}},
		{Name: "zk.Lock", New: func(tb testing.TB) benchsuite.Mutex {
			c, _, err := zk.Connect(e.Addrs(), 15*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(c.Close)
			return zkLock{c}
		}},
	}
}

func newBenchLocker(tb testing.TB, e *zktest.Ensemble) *lockmw.Locker {
	l, err := zookeeper.New(config(e.Addrs()...))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// BenchmarkUncontended is one goroutine taking and releasing a free lock:
// ns/op is one lock and unlock; ops/s is reported too.
func BenchmarkUncontended(b *testing.B) {
	e := zktest.StartEnsemble(b, 1)
	benchsuite.Uncontended(b, kinds(e))
}

// BenchmarkContended is 16 independent Lockers (each with its own
// session, as 16 processes would have) taking turns on one key, each
// holding it 2 ms: acq/s, util, wait-p99-ms and reqs/acq (packets
// ZooKeeper received, requests and pings, per acquisition); b.N is the
// number of acquisitions across all contenders (see benchsuite.Measure).
func BenchmarkContended(b *testing.B) {
	e := zktest.StartEnsemble(b, 1)
	benchsuite.Contended(b, kinds(e), func(tb testing.TB) int64 { return received(tb, e) })
}
