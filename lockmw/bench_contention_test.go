package lockmw_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest/benchsuite"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// Contention: 16 goroutines of one process (one Locker) take turns on one
// key, each holding it for 2 ms.
const (
	contenders = 16
	holdFor    = 2 * time.Millisecond
)

// BenchmarkContended measures one key under contention, for the default mode
// and for Fair, and reports:
//
//   - util: the share of wall time some goroutine was inside the critical
//     section (from Acquire's return to the Release call);
//   - gap-p50-µs, gap-p99-µs: the hand-off gap, from one holder's Release
//     call to the next holder's Acquire returning;
//   - cmds/acq: Redis commands per acquisition (INFO stats
//     total_commands_processed, which counts the commands scripts run);
//   - jain: Jain's fairness index over acquisitions per goroutine;
//   - wait-p99-ms: the 99th percentile of Acquire's duration.
//
// b.N is the number of acquisitions across all goroutines.
func BenchmarkContended(b *testing.B) {
	srv := redistest.Start(b)
	for _, mode := range []struct {
		name string
		opts []lockmw.AcquireOption
	}{
		{"default", nil},
		{"fair", []lockmw.AcquireOption{lockmw.Fair()}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			client := srv.Client(b, benchClient, func(o *redis.Options) { o.PoolSize = 2 * contenders })
			l := newLockerOn(b, client)
			lockers := make([]*lockmw.Locker, contenders)
			for g := range lockers {
				lockers[g] = l
			}
			r := runContention(b, []*redistest.Server{srv}, lockers, "contended:"+mode.name, b.N, mode.opts)
			r.report(b)
		})
	}
}

// BenchmarkContendedLockers is BenchmarkContended with each of the 16
// goroutines on a Locker and client of its own, as 16 instances of a
// service would be, but in one process: no hand-over stays inside a
// Locker, while waking a waiter costs a goroutine switch rather than an
// OS process switch (the difference from BenchmarkContendedProcesses).
// Same metrics; for Redlock, cmds/acq counts the commands of all 5
// masters.
func BenchmarkContendedLockers(b *testing.B) {
	srv := redistest.Start(b)
	for _, mode := range []struct {
		name    string
		servers func(b *testing.B) []*redistest.Server
		redlock bool
		opts    []lockmw.AcquireOption
	}{
		{"default", func(*testing.B) []*redistest.Server { return []*redistest.Server{srv} }, false, nil},
		{"fair", func(*testing.B) []*redistest.Server { return []*redistest.Server{srv} }, false, []lockmw.AcquireOption{lockmw.Fair()}},
		{"redlock5", func(b *testing.B) []*redistest.Server { return redistest.StartN(b, 5) }, true, nil},
	} {
		b.Run(mode.name, func(b *testing.B) {
			servers := mode.servers(b)
			lockers := make([]*lockmw.Locker, contenders)
			for g := range lockers {
				clients := make([]redis.UniversalClient, len(servers))
				for i, s := range servers {
					clients[i] = s.Client(b, benchClient)
				}
				var err error
				if mode.redlock {
					lockers[g], err = lockmw.NewRedlock(clients)
				} else {
					lockers[g], err = lockmw.New(clients[0])
				}
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = lockers[g].Close() })
			}
			r := runContention(b, servers, lockers, "lockers:"+mode.name, b.N, mode.opts)
			r.report(b)
		})
	}
}

// contention is what one contention run observed.
type contention struct {
	holds    []benchsuite.Interval // each critical section, from every goroutine
	waits    []time.Duration
	perGo    []int
	commands int64
	wall     time.Duration
}

// warmUp is how many acquisitions each contention run makes before it
// starts measuring: the goroutines keep going, so the figures describe the
// steady state, not the start (scripts loading, subscriptions, the first
// waiters queueing).
const warmUp = 8 * contenders

// runContention has contenders goroutines take key warmUp+n times in all
// (a few more: those already waiting at the end finish), goroutine g on
// lockers[g], and reports on those after the first warmUp+1; commands are
// counted over servers.
func runContention(tb testing.TB, servers []*redistest.Server, lockers []*lockmw.Locker, key string, n int, opts []lockmw.AcquireOption) contention {
	tb.Helper()
	ctx := context.Background()
	var (
		seq     atomic.Int64 // acquisitions made so far
		mu      sync.Mutex
		c       = contention{perGo: make([]int, contenders)}
		wg      sync.WaitGroup
		failure atomic.Pointer[error]
		before  int64
		start   time.Time
	)
	total := int64(warmUp + n)
	for g := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var holds []benchsuite.Interval
			var waits []time.Duration
			for {
				t0 := time.Now()
				lease, err := lockers[g].Acquire(ctx, key, opts...)
				if err != nil {
					failure.Store(&err)
					return
				}
				got := time.Now()
				i := seq.Add(1) - 1
				if i == warmUp {
					// Measuring starts with this holding: every other
					// goroutine is waiting, and nothing else reads these.
					before, start = commandsOn(tb, servers), got
				}
				benchsuite.Hold(holdFor)
				done := time.Now()
				if err := lease.Release(ctx); err != nil {
					failure.Store(&err)
					return
				}
				if i > warmUp {
					holds = append(holds, benchsuite.Interval{Start: got, End: done})
					waits = append(waits, got.Sub(t0))
				}
				if i >= total-1 || seq.Load() >= total {
					break
				}
			}
			mu.Lock()
			c.holds = append(c.holds, holds...)
			c.waits = append(c.waits, waits...)
			c.perGo[g] = len(holds)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if p := failure.Load(); p != nil {
		tb.Fatal(*p)
	}
	c.wall = time.Since(start)
	// The INFO calls that read "before" (one per server) are counted (those
	// reading "after" are not). The holding they ran under is not measured,
	// but its release is counted: the figure errs high by that one release.
	c.commands = commandsOn(tb, servers) - before - int64(len(servers))
	benchsuite.SortHolds(c.holds)
	return c
}

func (c contention) report(b *testing.B) benchsuite.Figures {
	if n := benchsuite.Overlaps(c.holds); n > 0 {
		b.Fatalf("%d critical sections overlapped", n)
	}
	f := benchsuite.Figures{}
	var held time.Duration
	for _, h := range c.holds {
		held += h.End.Sub(h.Start)
	}
	gaps := benchsuite.Gaps(c.holds)
	first, last := c.holds[0].Start, c.holds[len(c.holds)-1].End
	f.Report(b, float64(held)/float64(last.Sub(first)), "util")
	f.Report(b, float64(benchsuite.Percentile(gaps, 50))/float64(time.Microsecond), "gap-p50-µs")
	f.Report(b, float64(benchsuite.Percentile(gaps, 99))/float64(time.Microsecond), "gap-p99-µs")
	f.Report(b, float64(c.commands)/float64(len(c.holds)), "cmds/acq")
	f.Report(b, benchsuite.Jain(c.perGo), "jain")
	f.Report(b, float64(benchsuite.Percentile(c.waits, 99))/float64(time.Millisecond), "wait-p99-ms")
	f.Report(b, 0, "ns/op") // wall time per acquisition is 2 ms by construction
	return f
}

// serverCommands reads INFO stats total_commands_processed.
func serverCommands(tb testing.TB, srv *redistest.Server) int64 {
	tb.Helper()
	n, err := strconv.ParseInt(srv.Info(tb, "stats")["total_commands_processed"], 10, 64)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
