// This file tests that the harness measures Mutexes warm, that a hold
// lasts its time, that a polling loop that can never take its lock ends,
// and the figures it reports of a contended run.

package benchsuite

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// turnTaker is a Mutex on a shared sync.Mutex that counts its lock calls.
type turnTaker struct {
	mu    *sync.Mutex
	calls *atomic.Int64
}

func (m turnTaker) Lock(context.Context, string) (func(), error) {
	m.calls.Add(1)
	m.mu.Lock()
	return m.mu.Unlock, nil
}

// TestMeasuredTurnsFollowAWarmUp: before a contended run's b.N measured
// acquisitions, its contenders take as many turns unmeasured, at most
// WarmTurns each and at least one each, and the requests counted per
// acquisition are the measured turns' alone.
func TestMeasuredTurnsFollowAWarmUp(t *testing.T) {
	type run struct {
		n, calls int
		perAcq   float64
	}
	var runs []run
	testing.Benchmark(func(b *testing.B) {
		var mu sync.Mutex
		var calls atomic.Int64
		ms := make([]Mutex, Contenders)
		for i := range ms {
			ms[i] = turnTaker{&mu, &calls}
		}
		f := MeasureCounted(b, ms, "k", Counter{Unit: "calls", Count: func(testing.TB) int64 { return calls.Load() }})
		runs = append(runs, run{b.N, int(calls.Load()), f["calls/acq"]})
	})
	if len(runs) < 2 {
		t.Fatalf("the benchmark ran %d times, want at least 2 (a first run of 1 and a longer one)", len(runs))
	}
	for _, r := range runs {
		warm := min(max(r.n, Contenders), WarmTurns*Contenders)
		if r.calls != r.n+warm {
			t.Errorf("a run of %d acquisitions made %d lock calls, want %d measured + %d warm-up", r.n, r.calls, r.n, warm)
		}
		if r.perAcq != 1 {
			t.Errorf("a run of %d acquisitions counted %v calls per acquisition, want 1 (the warm-up's left out)", r.n, r.perAcq)
		}
	}
	if last := runs[len(runs)-1]; last.n < WarmTurns*Contenders {
		t.Errorf("the longest run measured %d acquisitions, want at least %d, so that a full warm-up is seen", last.n, WarmTurns*Contenders)
	}
}

// TestPollGivesUp: a Poll whose lock is never free returns an error naming
// the key once GiveUpAfter has passed, instead of polling for ever.
func TestPollGivesUp(t *testing.T) {
	var tries atomic.Int64
	p := Poll{
		Try:         func(context.Context, string) (bool, error) { tries.Add(1); return false, nil },
		Unlock:      func(context.Context, string) {},
		Every:       time.Millisecond,
		GiveUpAfter: 50 * time.Millisecond,
	}
	unlock, err := p.Lock(context.Background(), "missing-row")
	if err == nil {
		unlock()
		t.Fatal("Lock took a lock that is never free")
	}
	if !strings.Contains(err.Error(), `"missing-row"`) {
		t.Errorf("error %q does not name the key", err)
	}
	if tries.Load() < 2 {
		t.Errorf("Lock tried %d times before it gave up, want it to poll", tries.Load())
	}
}

// TestHoldLastsItsTime: Hold returns no earlier than its duration, however
// often the runtime's signals interrupt the sleep under it.
func TestHoldLastsItsTime(t *testing.T) {
	for range 20 {
		start := time.Now()
		Hold(HoldFor)
		if took := time.Since(start); took < HoldFor {
			t.Fatalf("Hold(%v) returned after %v", HoldFor, took)
		}
	}
}

// TestFiguresOfKnownHolds: the figures of critical sections laid out by
// hand: gaps between consecutive holds, overlaps only where a hold began
// before the one before it ended, percentiles by rank, and Jain's index at
// its ends (equal shares, one contender with all).
func TestFiguresOfKnownHolds(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	holds := []Interval{{at(10), at(12)}, {at(0), at(2)}, {at(3), at(5)}, {at(6), at(9)}}
	SortHolds(holds)
	if got := Overlaps(holds); got != 0 {
		t.Errorf("Overlaps of disjoint holds = %d, want 0", got)
	}
	gaps := Gaps(holds)
	want := []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}
	if !slices.Equal(gaps, want) {
		t.Errorf("Gaps = %v, want %v", gaps, want)
	}
	overlapping := append(slices.Clone(holds), Interval{at(4), at(7)})
	SortHolds(overlapping)
	if got := Overlaps(overlapping); got != 2 {
		t.Errorf("Overlaps with a hold from 4 to 7 ms among holds 3–5 and 6–9 ms = %d, want 2", got)
	}
	d := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	if p50, p99 := Percentile(d, 50), Percentile(d, 99); p50 != 6 || p99 != 10 {
		t.Errorf("Percentile 50 and 99 of 1…10 = %v and %v, want 6 and 10", p50, p99)
	}
	if d[0] != 5 {
		t.Errorf("Percentile sorted its argument: %v", d)
	}
	if j := Jain([]int{7, 7, 7, 7}); j != 1 {
		t.Errorf("Jain of equal shares = %v, want 1", j)
	}
	if j := Jain([]int{12, 0, 0, 0}); j != 0.25 {
		t.Errorf("Jain with one of 4 contenders getting every share = %v, want 1/4", j)
	}
	if j := Jain([]int{0, 0}); !math.IsNaN(j) {
		t.Errorf("Jain of no shares = %v, want NaN", j)
	}
}

// overlapTB records Errorf calls.
type overlapTB struct {
	testing.TB
	errs []string
}

func (tb *overlapTB) Errorf(format string, args ...any) {
	tb.errs = append(tb.errs, fmt.Sprintf(format, args...))
}

// nothing is a Mutex that excludes nobody.
type nothing struct{}

func (nothing) Lock(context.Context, string) (func(), error) { return func() {}, nil }

// TestRunCatchesALockThatDoesNotExclude: Run reports the overlapping
// critical sections of Mutexes that do not exclude each other, and none,
// with gaps and an index of fairness, for a sync.Mutex shared by all.
func TestRunCatchesALockThatDoesNotExclude(t *testing.T) {
	tb := &overlapTB{TB: t}
	r := Run(tb, []Mutex{nothing{}, nothing{}, nothing{}, nothing{}}, "k", 40)
	if r.Overlaps == 0 || len(tb.errs) != 1 || !strings.Contains(tb.errs[0], "did not exclude") {
		t.Errorf("Mutexes that do not exclude: %d overlaps, errors %q; want overlaps and one error saying so", r.Overlaps, tb.errs)
	}

	var mu sync.Mutex
	var calls atomic.Int64
	ms := []Mutex{turnTaker{&mu, &calls}, turnTaker{&mu, &calls}, turnTaker{&mu, &calls}, turnTaker{&mu, &calls}}
	tb = &overlapTB{TB: t}
	r = Run(tb, ms, "k", 40)
	if r.Overlaps != 0 || len(tb.errs) != 0 {
		t.Errorf("a shared sync.Mutex: %d overlaps, errors %q; want none", r.Overlaps, tb.errs)
	}
	if r.N != 40 || r.GapP50 < 0 || r.GapP99 < r.GapP50 || !(r.Jain > 0 && r.Jain <= 1) {
		t.Errorf("a shared sync.Mutex: %+v, want 40 acquisitions, gaps 0 ≤ p50 ≤ p99 and a fairness index in (0, 1]", r)
	}
}
