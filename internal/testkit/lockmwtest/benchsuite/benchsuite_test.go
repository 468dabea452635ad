// This file tests that the harness measures Mutexes warm, that a hold
// lasts its time, and that a polling loop that can never take its lock
// ends.

package benchsuite

import (
	"context"
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
