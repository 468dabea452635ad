package zookeeper_test

import (
	"context"
	"io"
	"log"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/zookeeper"
	"github.com/lockmw/lockmw/lockmw/zookeeper/internal/zktest"
)

// Benchmarks of lockmw on ZooKeeper beside go-zookeeper's zk.Lock, on the
// same single server in the same run (make bench).

// mutexLike is one lock implementation under benchmark: lock returns an
// unlock function.
type mutexLike interface {
	lock(ctx context.Context, key string) (unlock func(), err error)
}

type lockmwLock struct {
	l    *lockmw.Locker
	opts []lockmw.AcquireOption
}

func (m lockmwLock) lock(ctx context.Context, key string) (func(), error) {
	lease, err := m.l.Acquire(ctx, key, m.opts...)
	if err != nil {
		return nil, err
	}
	return func() { _ = lease.Release(ctx) }, nil
}

// zkLock is go-zookeeper's recipe, one connection per contender.
type zkLock struct{ c *zk.Conn }

func (m zkLock) lock(_ context.Context, key string) (func(), error) {
	l := zk.NewLock(m.c, "/bench-zklock/"+key, zk.WorldACL(zk.PermAll))
	if err := l.Lock(); err != nil {
		return nil, err
	}
	return func() { _ = l.Unlock() }, nil
}

// kinds are the implementations compared: lockmw's default mode, lockmw
// Fair, and zk.Lock.
var kinds = []struct {
	name string
	make func(tb testing.TB, e *zktest.Ensemble) mutexLike
}{
	{"lockmw", func(tb testing.TB, e *zktest.Ensemble) mutexLike { return lockmwLock{l: newBenchLocker(tb, e)} }},
	{"lockmw-fair", func(tb testing.TB, e *zktest.Ensemble) mutexLike {
		return lockmwLock{l: newBenchLocker(tb, e), opts: []lockmw.AcquireOption{lockmw.Fair()}}
	}},
	{"zk.Lock", func(tb testing.TB, e *zktest.Ensemble) mutexLike {
		c, _, err := zk.Connect(e.Addrs(), 15*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(c.Close)
		return zkLock{c}
	}},
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
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			m := k.make(b, e)
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				unlock, err := m.lock(ctx, "free")
				if err != nil {
					b.Fatal(err)
				}
				unlock()
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
		})
	}
}

// Contention: 16 independent Lockers (each with its own client, as 16
// processes would have) take turns on one key, each holding it 2 ms.
const (
	contenders = 16
	holdFor    = 2 * time.Millisecond
)

// BenchmarkContended reports, per implementation:
//
//   - acq/s: acquisitions per second across all contenders;
//   - util: the share of wall time some contender was inside the critical
//     section;
//   - wait-p99-ms: the 99th percentile of the time a lock call took;
//   - reqs/acq: packets ZooKeeper received (requests, pings) per
//     acquisition.
//
// b.N is the number of acquisitions across all contenders.
func BenchmarkContended(b *testing.B) {
	e := zktest.StartEnsemble(b, 1)
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			var ms []mutexLike
			for range contenders {
				ms = append(ms, k.make(b, e))
			}
			key := "contended-" + k.name
			// Warm up: every contender once.
			runContended(b, ms, key, contenders)
			reqs := received(b, e)
			b.ResetTimer()
			r := runContended(b, ms, key, b.N)
			b.StopTimer()
			reqs = received(b, e) - reqs
			b.ReportMetric(float64(r.n)/r.wall.Seconds(), "acq/s")
			b.ReportMetric(r.util, "util")
			b.ReportMetric(float64(r.p99)/float64(time.Millisecond), "wait-p99-ms")
			b.ReportMetric(float64(reqs)/float64(r.n), "reqs/acq")
		})
	}
}

type contendedRun struct {
	n    int
	wall time.Duration
	util float64
	p99  time.Duration
}

// runContended has every contender take key until n acquisitions are done
// in all.
func runContended(tb testing.TB, ms []mutexLike, key string, n int) contendedRun {
	ctx := context.Background()
	var (
		mu    sync.Mutex
		left  = n
		held  time.Duration
		waits []time.Duration
		wg    sync.WaitGroup
	)
	start := time.Now()
	for _, m := range ms {
		wg.Go(func() {
			for {
				mu.Lock()
				if left == 0 {
					mu.Unlock()
					return
				}
				left--
				mu.Unlock()
				t0 := time.Now()
				unlock, err := m.lock(ctx, key)
				if err != nil {
					tb.Error(err)
					return
				}
				t1 := time.Now()
				time.Sleep(holdFor)
				t2 := time.Now()
				unlock()
				mu.Lock()
				waits = append(waits, t1.Sub(t0))
				held += t2.Sub(t1)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	slices.Sort(waits)
	r := contendedRun{n: len(waits), wall: wall, util: held.Seconds() / wall.Seconds()}
	if len(waits) > 0 {
		r.p99 = waits[min(len(waits)-1, len(waits)*99/100)]
	}
	return r
}
