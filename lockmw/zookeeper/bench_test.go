package zookeeper_test

import (
	"context"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	e := startWarm(b)
	benchsuite.Uncontended(b, kinds(e))
}

// BenchmarkContended is 16 independent Lockers (each with its own
// session, as 16 processes would have) taking turns on one key, each
// holding it 2 ms: acq/s, util, wait-p99-ms and reqs/acq (packets
// ZooKeeper received, requests and pings, per acquisition); b.N is the
// number of acquisitions across all contenders (see benchsuite.Measure).
func BenchmarkContended(b *testing.B) {
	e := startWarm(b)
	benchsuite.Contended(b, kinds(e), func(tb testing.TB) int64 { return received(tb, e) })
}

// warmRounds is how many free locks each of warm's clients takes;
// warmTurns how many turns they then take on one key, together.
const (
	warmRounds = 150
	warmTurns  = 100
)

// startWarm starts the benchmarks' server and warms it (warm), so that
// every kind meets the same server.
func startWarm(b *testing.B) *zktest.Ensemble {
	e := zktest.StartEnsemble(b, 1)
	warm(b, e)
	return e
}

// warm has every kind take and release free locks on a fresh server,
// Contenders clients at a time, then take turns on one key (the watch
// and notification paths the contended benchmark runs: without this, the
// kind measured first made the server compile four times as many of
// their methods as the next, in its first round), and closes them, before
// anything is measured. A ZooKeeper JVM's first two young collections stop it much
// longer than later ones (the test servers' -Xlog:gc on the 2-core VM:
// 10–48 ms, then 7–27 ms, then 1–8 ms every few seconds under the
// contended load); warmRounds makes it allocate past them (four
// collections, in under two seconds). Without it they came in the kinds
// that ran first, in lockmw's measured round and then lockmw Fair's, never
// in zk.Lock's: each a stall that delays all 15 queued waiters at once,
// which a contended wait p99 (a few samples) shows whole.
func warm(tb testing.TB, e *zktest.Ensemble) {
	ctx := context.Background()
	for _, k := range kinds(e) {
		sc := &scope{TB: tb}
		var wg sync.WaitGroup
		ms := make([]benchsuite.Mutex, benchsuite.Contenders)
		for i := range ms {
			m := k.New(sc)
			ms[i] = m
			wg.Go(func() {
				key := "warm-" + strconv.Itoa(i)
				for range warmRounds {
					unlock, err := m.Lock(ctx, key)
					if err != nil {
						tb.Error(err)
						return
					}
					unlock()
				}
			})
		}
		wg.Wait()
		benchsuite.Run(sc, ms, "warm-contended-"+k.Name, warmTurns)
		sc.close()
	}
}

// TestWarmPassesTheFirstCollections: warm makes a fresh server run its
// first two young collections (the slow ones) before it returns, as the
// server's own GC log shows (-Xlog:gc, through JAVA_TOOL_OPTIONS, which
// the test kit's JVM inherits).
func TestWarmPassesTheFirstCollections(t *testing.T) {
	gclog := filepath.Join(t.TempDir(), "gc.log")
	t.Setenv("JAVA_TOOL_OPTIONS", "-Xlog:gc:file="+gclog)
	e := zktest.StartEnsemble(t, 1)
	warm(t, e)
	var n int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile(gclog)
		if err != nil {
			t.Fatal(err)
		}
		if n = strings.Count(string(b), "Pause Young"); n >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if n < 2 {
		t.Fatalf("the server ran %d young collections before warm returned, want at least 2", n)
	}
}

// scope is a testing.TB whose cleanups run at close, not at the end of
// the benchmark: warm's clients are closed before the kinds are measured.
type scope struct {
	testing.TB
	cleanups []func()
}

// Cleanup registers f to run at close.
func (s *scope) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

// close runs the cleanups, the last registered first.
func (s *scope) close() {
	for _, f := range slices.Backward(s.cleanups) {
		f()
	}
}
