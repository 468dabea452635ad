package etcd_test

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/benchsuite"
	"github.com/lockmw/lockmw/lockmw"
	"github.com/lockmw/lockmw/lockmw/etcd"
	"github.com/lockmw/lockmw/lockmw/etcd/internal/etcdtest"
)

// Benchmarks of lockmw on etcd beside go.etcd.io/etcd/client/v3/concurrency's
// Mutex, on the same single etcd member in the same run, with the harness
// of internal/testkit/lockmwtest/benchsuite.

type etcdMutex struct{ s *concurrency.Session }

func (m etcdMutex) Lock(ctx context.Context, key string) (func(), error) {
	mu := concurrency.NewMutex(m.s, "/bench-mutex/"+key)
	if err := mu.Lock(ctx); err != nil {
		return nil, err
	}
	return func() { _ = mu.Unlock(ctx) }, nil
}

// kinds are the implementations compared on srv, each on a client of its
// own: lockmw's default mode, lockmw Fair, and concurrency.Mutex (one
// Session per client).
func kinds(srv *etcdtest.Server) []benchsuite.Kind {
	return []benchsuite.Kind{
		{Name: "lockmw", New: func(tb testing.TB) benchsuite.Mutex { return benchsuite.Locker{L: newBenchLocker(tb, srv.Client(tb))} }},
		{Name: "lockmw-fair", New: func(tb testing.TB) benchsuite.Mutex {
			return benchsuite.Locker{L: newBenchLocker(tb, srv.Client(tb)), Opts: []lockmw.AcquireOption{lockmw.Fair()}}
		}},
		{Name: "concurrency.Mutex", New: func(tb testing.TB) benchsuite.Mutex {
			s, err := concurrency.NewSession(srv.Client(tb), concurrency.WithTTL(10))
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { _ = s.Close() })
			return etcdMutex{s}
		}},
	}
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
	benchsuite.Uncontended(b, kinds(srv))
}

// BenchmarkContended is 16 independent Lockers (each with its own client,
// as 16 processes would have) taking turns on one key, each holding it 2
// ms: acq/s, util, wait-p99-ms and reqs/acq (gRPC messages etcd received:
// requests, watch creations, lease keepalives, per acquisition); b.N is
// the number of acquisitions across all contenders (see
// benchsuite.Measure).
func BenchmarkContended(b *testing.B) {
	srv := etcdtest.Start(b)
	benchsuite.Contended(b, kinds(srv), func(tb testing.TB) int64 { return served(tb, srv) })
}

// BenchmarkContendedOneLocker is BenchmarkContended with the 16 contenders
// sharing one Locker (goroutines of one process), for lockmw alone:
// concurrency.Mutexes on one Session do not exclude each other.
func BenchmarkContendedOneLocker(b *testing.B) {
	srv := etcdtest.Start(b)
	ks := kinds(srv)[:2]
	benchsuite.Interleave(b, []string{ks[0].Name, ks[1].Name}, func(b *testing.B, i int) benchsuite.Figures {
		m := ks[i].New(b)
		ms := make([]benchsuite.Mutex, benchsuite.Contenders)
		for j := range ms {
			ms[j] = m
		}
		return benchsuite.Measure(b, ms, "one-locker-"+ks[i].Name, func(tb testing.TB) int64 { return served(tb, srv) })
	})
}
