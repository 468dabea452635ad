package etcd_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// Benchmarks of lockmw on etcd beside go.etcd.io/etcd/client/v3/concurrency's
// Mutex, on the same single etcd member in the same run.

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

type etcdMutex struct{ s *concurrency.Session }

func (m etcdMutex) lock(ctx context.Context, key string) (func(), error) {
	mu := concurrency.NewMutex(m.s, "/bench-mutex/"+key)
	if err := mu.Lock(ctx); err != nil {
		return nil, err
	}
	return func() { _ = mu.Unlock(ctx) }, nil
}

// kinds are the implementations compared: lockmw's default mode, lockmw
// Fair, and concurrency.Mutex (one Session per client).
var kinds = []struct {
	name string
	make func(tb testing.TB, cli *clientv3.Client) mutexLike
}{
	{"lockmw", func(tb testing.TB, cli *clientv3.Client) mutexLike { return lockmwLock{l: newBenchLocker(tb, cli)} }},
	{"lockmw-fair", func(tb testing.TB, cli *clientv3.Client) mutexLike {
		return lockmwLock{l: newBenchLocker(tb, cli), opts: []lockmw.AcquireOption{lockmw.Fair()}}
	}},
	{"concurrency.Mutex", func(tb testing.TB, cli *clientv3.Client) mutexLike {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = s.Close() })
		return etcdMutex{s}
	}},
}

func newBenchLocker(tb testing.TB, cli *clientv3.Client) *lockmw.Locker {
	l, err := etcd.New(cli)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// BenchmarkUncontended is one goroutine taking and releasing a free lock:
// ns/op is one lock and unlock; ops/s is reported too.
func BenchmarkUncontended(b *testing.B) {
	srv := etcdtest.Start(b)
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			m := k.make(b, srv.Client(b))
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
//   - reqs/acq: gRPC messages etcd received (requests, watch creations,
//     lease keepalives) per acquisition.
//
// b.N is the number of acquisitions across all contenders.
func BenchmarkContended(b *testing.B) {
	srv := etcdtest.Start(b)
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			var ms []mutexLike
			for range contenders {
				ms = append(ms, k.make(b, srv.Client(b)))
			}
			key := "contended-" + k.name
			// Warm up: every contender once.
			runContended(b, ms, key, contenders)
			reqs := served(b, srv)
			b.ResetTimer()
			r := runContended(b, ms, key, b.N)
			b.StopTimer()
			reqs = served(b, srv) - reqs
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

// BenchmarkContendedOneLocker is BenchmarkContended with the 16 contenders
// sharing one Locker (goroutines of one process), for lockmw alone:
// concurrency.Mutexes on one Session do not exclude each other.
func BenchmarkContendedOneLocker(b *testing.B) {
	srv := etcdtest.Start(b)
	for _, k := range kinds[:2] {
		b.Run(k.name, func(b *testing.B) {
			m := k.make(b, srv.Client(b))
			ms := make([]mutexLike, contenders)
			for i := range ms {
				ms[i] = m
			}
			key := "one-locker-" + k.name
			runContended(b, ms, key, contenders)
			reqs := served(b, srv)
			b.ResetTimer()
			r := runContended(b, ms, key, b.N)
			b.StopTimer()
			reqs = served(b, srv) - reqs
			b.ReportMetric(float64(r.n)/r.wall.Seconds(), "acq/s")
			b.ReportMetric(r.util, "util")
			b.ReportMetric(float64(r.p99)/float64(time.Millisecond), "wait-p99-ms")
			b.ReportMetric(float64(reqs)/float64(r.n), "reqs/acq")
		})
	}
}
