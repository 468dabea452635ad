// Package benchsuite is the benchmark harness of lockmw on a store beside
// that store's own lock recipe (etcd's concurrency.Mutex, go-zookeeper's
// zk.Lock, hand-written polling loops on SQL: Poll), in the same run on
// the same servers: one goroutine taking and releasing a free lock
// (Uncontended), and Contenders independent clients taking turns on one
// key (Contended). Each store's bench_test.go says what it compares
// (Kinds) and how to count the requests its servers received (Counter).
// The kinds are measured in turns, Rounds times each, and their figures
// summed up as medians (Interleave).
package benchsuite

import (
	"context"
	"fmt"
	mathrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
)

// Mutex is one lock implementation under benchmark: Lock returns an
// unlock function.
type Mutex interface {
	Lock(ctx context.Context, key string) (unlock func(), err error)
}

// Locker is a lockmw Locker as a Mutex, acquiring with Opts.
type Locker struct {
	L    *lockmw.Locker
	Opts []lockmw.AcquireOption
}

// Lock acquires key and returns the lease's release.
func (m Locker) Lock(ctx context.Context, key string) (func(), error) {
	lease, err := m.L.Acquire(ctx, key, m.Opts...)
	if err != nil {
		return nil, err
	}
	return func() { _ = lease.Release(ctx) }, nil
}

// Poll is a lock taken by polling, the shape of the hand-written loops
// lockmw is compared with (pg_try_advisory_lock, a ShedLock-style
// UPDATE … WHERE lock_until <= now()): Try takes key or reports it busy,
// and a busy lock is tried again Every, for up to GiveUpAfter
// (PollGiveUp when zero).
type Poll struct {
	Try         func(ctx context.Context, key string) (bool, error)
	Unlock      func(ctx context.Context, key string)
	Every       time.Duration
	GiveUpAfter time.Duration
}

// PollGiveUp is how long a Poll tries a lock before it reports an error: a
// loop that can never take its lock (a ShedLock-style table without the
// key's row) fails the benchmark instead of holding it up for ever. A
// contended run's waits stay far below it (their 99th percentile, under
// half a second).
const PollGiveUp = 20 * time.Second

// Lock tries key every p.Every until it is taken, and returns its unlock;
// after GiveUpAfter it returns an error naming the key.
func (p Poll) Lock(ctx context.Context, key string) (func(), error) {
	giveUp := p.GiveUpAfter
	if giveUp <= 0 {
		giveUp = PollGiveUp
	}
	deadline := time.Now().Add(giveUp)
	for {
		got, err := p.Try(ctx, key)
		if err != nil {
			return nil, err
		}
		if got {
			return func() { p.Unlock(ctx, key) }, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("benchsuite: polling did not take %q in %v: is the lock ever free (a ShedLock-style table needs the key's row)?", key, giveUp)
		}
		select {
		case <-time.After(p.Every):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Counter counts the requests a store's servers received (a server-wide
// counter, or a client-side trace of the kinds' connections), reported
// per operation as Unit+"/op" (uncontended) or Unit+"/acq" (contended).
type Counter struct {
	Unit  string // "reqs", "stmts"
	Count func(tb testing.TB) int64
}

// Kind is one implementation compared: New returns a Mutex on a client of
// its own (as one process would have), closed at tb's cleanup.
type Kind struct {
	Name string
	New  func(tb testing.TB) Mutex
}

// Contention: Contenders independent Mutexes take turns on one key, each
// holding it HoldFor (by the kernel's clock: Hold).
const (
	Contenders = 16
	HoldFor    = 2 * time.Millisecond
)

// Before it is measured, a fresh Mutex takes some turns unmeasured, so
// that every kind is measured as a long-running service would run it:
// with its connections open and its statements planned. (A fresh pgx
// pool opens its connections on demand, and PostgreSQL plans a prepared
// statement afresh for a connection's first five runs of it; a
// PostgreSQL Locker measured from its first turns read 0.66–0.68 util
// where the same Lockers, warm, read 0.82.)
const (
	// WarmTurns is how many turns each contender takes before a contended
	// run is measured, at most (a run of b.N acquisitions warms up with
	// as many, and at least one per contender).
	WarmTurns = 8
	// WarmOps is how many free locks Uncontended's goroutine takes and
	// releases before it is measured, at most (at most b.N).
	WarmOps = 100
)

// warmTurns is how many turns n contenders take before a run of
// acquisitions is measured (see WarmTurns).
func warmTurns(acquisitions, n int) int {
	return min(max(acquisitions, n), WarmTurns*n)
}

// Uncontended measures each kind Rounds times, interleaved (see
// Interleave): one goroutine taking and releasing a free lock; ns/op is
// one lock and unlock, and ops/s is reported too.
func Uncontended(b *testing.B, kinds []Kind) {
	UncontendedCounted(b, kinds, Counter{})
}

// UncontendedCounted is Uncontended, reporting also c's requests per
// lock+unlock (when c.Count is set).
func UncontendedCounted(b *testing.B, kinds []Kind, c Counter) {
	Interleave(b, names(kinds), func(b *testing.B, i int) Figures {
		m := kinds[i].New(b)
		ctx := context.Background()
		lockUnlock := func(n int) {
			for range n {
				unlock, err := m.Lock(ctx, "free")
				if err != nil {
					b.Fatal(err)
				}
				unlock()
			}
		}
		lockUnlock(min(b.N, WarmOps))
		var reqs int64
		if c.Count != nil {
			reqs = c.Count(b)
		}
		b.ResetTimer()
		start := time.Now()
		lockUnlock(b.N)
		wall := time.Since(start)
		b.StopTimer()
		f := Figures{}
		f.Report(b, float64(wall.Nanoseconds())/float64(b.N), "ns/op")
		f.Report(b, float64(b.N)/wall.Seconds(), "ops/s")
		if c.Count != nil {
			f.Report(b, float64(c.Count(b)-reqs)/float64(b.N), c.Unit+"/op")
		}
		return f
	})
}

// Contended measures each kind Rounds times, interleaved (see
// Interleave): Contenders Mutexes of it on the key "contended-"+name (see
// Measure).
func Contended(b *testing.B, kinds []Kind, requests func(tb testing.TB) int64) {
	ContendedCounted(b, kinds, Counter{Unit: "reqs", Count: requests})
}

// ContendedCounted is Contended with c's unit (see MeasureCounted).
func ContendedCounted(b *testing.B, kinds []Kind, c Counter) {
	Interleave(b, names(kinds), func(b *testing.B, i int) Figures {
		var ms []Mutex
		for range Contenders {
			ms = append(ms, kinds[i].New(b))
		}
		return MeasureCounted(b, ms, "contended-"+kinds[i].Name, c)
	})
}

// names are the kinds' names, in order.
func names(kinds []Kind) []string {
	var ns []string
	for _, k := range kinds {
		ns = append(ns, k.Name)
	}
	return ns
}

// Measure has ms take turns on key, b.N acquisitions in all (after a
// warm-up of as many, at most WarmTurns per Mutex and at least one), and reports and returns:
//
//   - acq/s: acquisitions per second across all contenders;
//   - util: the share of wall time some contender was inside the critical
//     section;
//   - gap-p50-µs, gap-p99-µs: the hand-off gap, from one holder's unlock
//     call to the next holder's lock call returning (Gaps);
//   - jain: Jain's fairness index over the contenders' acquisitions;
//   - wait-p99-ms: the 99th percentile of the time a lock call took;
//   - reqs/acq: what requests counts (the requests the servers received)
//     per acquisition.
//
// Two critical sections that overlapped fail the benchmark (Run): the
// lock did not exclude.
func Measure(b *testing.B, ms []Mutex, key string, requests func(tb testing.TB) int64) Figures {
	return MeasureCounted(b, ms, key, Counter{Unit: "reqs", Count: requests})
}

// MeasureCounted is Measure, reporting c's requests per acquisition as
// c.Unit+"/acq".
func MeasureCounted(b *testing.B, ms []Mutex, key string, c Counter) Figures {
	Run(b, ms, key, warmTurns(b.N, len(ms)))
	reqs := c.Count(b)
	b.ResetTimer()
	r := Run(b, ms, key, b.N)
	b.StopTimer()
	reqs = c.Count(b) - reqs
	f := Figures{}
	f.Report(b, float64(r.N)/r.Wall.Seconds(), "acq/s")
	f.Report(b, r.Util, "util")
	f.Report(b, float64(r.GapP50)/float64(time.Microsecond), "gap-p50-µs")
	f.Report(b, float64(r.GapP99)/float64(time.Microsecond), "gap-p99-µs")
	f.Report(b, r.Jain, "jain")
	f.Report(b, float64(r.P99)/float64(time.Millisecond), "wait-p99-ms")
	f.Report(b, float64(reqs)/float64(r.N), c.Unit+"/acq")
	return f
}

// Result is one contended run.
type Result struct {
	N      int           // acquisitions
	Wall   time.Duration // from the start to the last release
	Util   float64       // share of Wall some contender held the lock
	P99    time.Duration // 99th percentile of a lock call's duration
	GapP50 time.Duration // median hand-off gap (Gaps)
	GapP99 time.Duration // 99th percentile of the hand-off gaps
	// Jain is Jain's fairness index over the acquisitions of each
	// contender.
	Jain float64
	// Overlaps counts the critical sections that began before the one
	// before them ended (Overlaps): 0 for a lock that excludes.
	Overlaps int
}

// Run has every Mutex of ms take key, holding it HoldFor each time, until
// n acquisitions are done in all, every Mutex starting after a random
// delay of up to a millisecond (so that they do not ask in lockstep). A failed lock
// call is reported with tb.Error and ends that contender; critical sections
// that overlapped are reported with tb.Error too.
func Run(tb testing.TB, ms []Mutex, key string, n int) Result {
	ctx := context.Background()
	var (
		mu    sync.Mutex
		left  = n
		held  time.Duration
		waits []time.Duration
		holds []Interval
		wg    sync.WaitGroup
	)
	shares := make([]int, len(ms))
	start := time.Now()
	for i, m := range ms {
		wg.Go(func() {
			time.Sleep(time.Duration(mathrand.N(int64(time.Millisecond))))
			for {
				mu.Lock()
				if left == 0 {
					mu.Unlock()
					return
				}
				left--
				mu.Unlock()
				t0 := time.Now()
				unlock, err := m.Lock(ctx, key)
				if err != nil {
					tb.Error(err)
					return
				}
				t1 := time.Now()
				Hold(HoldFor)
				t2 := time.Now()
				unlock()
				mu.Lock()
				waits = append(waits, t1.Sub(t0))
				holds = append(holds, Interval{t1, t2})
				held += t2.Sub(t1)
				shares[i]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	SortHolds(holds)
	gaps := Gaps(holds)
	r := Result{
		N:        len(waits),
		Wall:     wall,
		Util:     held.Seconds() / wall.Seconds(),
		P99:      Percentile(waits, 99),
		GapP50:   Percentile(gaps, 50),
		GapP99:   Percentile(gaps, 99),
		Jain:     Jain(shares),
		Overlaps: Overlaps(holds),
	}
	if r.Overlaps > 0 {
		tb.Errorf("%d of %d critical sections on %q began before the one before them ended: the lock did not exclude", r.Overlaps, r.N, key)
	}
	return r
}
