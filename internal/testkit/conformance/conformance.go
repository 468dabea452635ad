package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockmw/lockmw/lockmw"
)

// Store describes one store deployment under test. Only Name, NewLocker and
// Leftovers are required; a nil hook skips the subtests that need it.
type Store struct {
	// Name names the store in failure messages.
	Name string

	// NewLocker returns a new Locker on its own client(s) to the store, as
	// a separate process would have, or the constructor's error. The suite
	// closes it at cleanup. Clients should give up within about a second on
	// a store that does not answer, so that faults are noticed quickly.
	NewLocker func(t testing.TB, opts ...lockmw.Option) (*lockmw.Locker, error)

	// NewCuttableLocker is NewLocker for a Locker whose links to the store
	// go through proxies no other Locker uses; cut black-holes them (the
	// store keeps running for everyone else), heal restores them.
	NewCuttableLocker func(t testing.TB, opts ...lockmw.Option) (l *lockmw.Locker, cut, heal func(t testing.TB), err error)

	// Pause freezes every server of the store (SIGSTOP); Resume undoes it.
	Pause, Resume func(t testing.TB)

	// Kill stops every server of the store; Restart starts them again and
	// returns once the store serves requests.
	Kill, Restart func(t testing.TB)

	// KillLosesData is set when Restart starts the store empty, so that
	// fences are not compared across it, unless FencesRiseAfterDataLoss.
	KillLosesData bool
	// FencesRiseAfterDataLoss is set when fences keep rising across a
	// restart that lost the data: the store's counters restart from its
	// clock, not from 1 (lockmw's Redis counters are seeded from TIME in
	// microseconds). LostWhenStoreKilled then requires the next holder's
	// fence above the lost lease's.
	FencesRiseAfterDataLoss bool

	// Leftovers lists what the store still keeps for lock key: the lock,
	// fair queue entries, subscriptions to its notifications. Fence
	// counters, which never expire by design, are not leftovers.
	Leftovers func(t testing.TB, key string) []string
	// LeftoversWithin is how long the store may take to delete what an
	// idle lock left, once its last holder and waiter are gone (0: 5s).
	// A store whose server deletes some of it on its own schedule (a
	// ZooKeeper container node) needs longer on a loaded machine.
	LeftoversWithin time.Duration

	// Fair is set when the store supports lockmw.Fair(); Queued then
	// reports how many Fair waiters are queued for key.
	Fair   bool
	Queued func(t testing.TB, key string) int
	// QueuesDefaultWaiters is set when a default-mode waiter for a lock
	// that another Locker holds waits in the same queue as Fair waiters,
	// so that Queued counts it too.
	QueuesDefaultWaiters bool

	// Notifies is set when waiters are told of releases rather than poll.
	Notifies bool
	// Requests, when set, counts the requests the store has served so far
	// (for example Redis' total_commands_processed over its servers), so
	// that the suite can check that a notified waiter does not poll.
	Requests func(t testing.TB) int64

	// Inspects declares what the store's Inspect reports (inspect.go).
	Inspects *Inspects

	// MinTTL is the shortest lease TTL the store accepts (lockmw.MinTTL
	// when zero). Shorter TTLs must give lockmw.ErrInvalidOption.
	MinTTL time.Duration
}

// Run runs every conformance subtest against s.
func Run(t *testing.T, s Store) {
	t.Helper()
	if s.Name == "" || s.NewLocker == nil || s.Leftovers == nil {
		t.Fatalf("conformance: Store needs Name, NewLocker and Leftovers (got %+v)", s)
	}
	if s.Fair && s.Queued == nil {
		t.Fatalf("conformance: store %s supports Fair but has no Queued hook", s.Name)
	}
	if s.MinTTL == 0 {
		s.MinTTL = lockmw.MinTTL
	}
	r := &runner{Store: s}
	for _, st := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Exclusion", r.exclusion},
		{"Fences", r.fences},
		{"LostWhenStorePaused", r.lostWhenPaused},
		{"LostWhenStoreKilled", r.lostWhenKilled},
		{"LostWhenLinkCut", r.lostWhenCut},
		{"WaiterWakesOnRelease", r.waiterWakes},
		{"FairOrder", r.fairOrder},
		{"GiveUpLeavesNothing", r.giveUp},
		{"CancelLeavesNothing", r.cancel},
		{"BadInput", r.badInput},
		{"Keys", r.keys},
		{"Close", r.close},
		{"WaitingMetric", r.waitingMetric},
		{"Inspect", r.inspect},
		{"Locks", r.locks},
	} {
		t.Run(st.name, st.run)
	}
}

type runner struct {
	Store
}

// key returns the lock key of the running subtest, so that subtests never
// see each other's leftovers.
func key(t *testing.T, suffix string) string {
	return "conformance:" + strings.ReplaceAll(t.Name(), "/", ":") + suffix
}

// locker returns a new Locker, closed at cleanup.
func (r *runner) locker(t *testing.T, opts ...lockmw.Option) *lockmw.Locker {
	t.Helper()
	l, err := r.NewLocker(t, opts...)
	if err != nil {
		t.Fatalf("%s: NewLocker: %v", r.Name, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// ttl returns d, or the store's minimum TTL when that is longer.
func (r *runner) ttl(d time.Duration) time.Duration { return max(d, r.MinTTL) }

// waitNoLeftovers waits until the store keeps nothing for keys.
func (r *runner) waitNoLeftovers(t *testing.T, keys ...string) {
	t.Helper()
	r.waitLeftovers(t, nil, keys...)
}

// waitLeftovers waits until the store keeps exactly want for keys (in any
// order), failing the test with what it keeps after LeftoversWithin.
func (r *runner) waitLeftovers(t *testing.T, want []string, keys ...string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	within := r.LeftoversWithin
	if within <= 0 {
		within = 5 * time.Second
	}
	deadline := time.Now().Add(within)
	for {
		var got []string
		for _, k := range keys {
			got = append(got, r.Leftovers(t, k)...)
		}
		slices.Sort(got)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s keeps %q for %q, want %q", r.Name, got, keys, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLeftoversWithin waits until the store keeps nothing for key that is
// not in want, failing the test with what it keeps after 5 seconds.
func (r *runner) waitLeftoversWithin(t *testing.T, want []string, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var extra []string
		for _, got := range r.Leftovers(t, key) {
			if !slices.Contains(want, got) {
				extra = append(extra, got)
			}
		}
		if len(extra) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s keeps %q for %q beyond what the holder alone kept (%q)", r.Name, extra, key, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settledLeftovers returns what the store keeps for key once two reads
// 100 ms apart agree: an acquisition may return before every server of the
// store has answered (Redlock returns on a quorum), and the others' writes
// land just after.
func (r *runner) settledLeftovers(t *testing.T, key string) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	prev := slices.Sorted(slices.Values(r.Leftovers(t, key)))
	for {
		time.Sleep(100 * time.Millisecond)
		cur := slices.Sorted(slices.Values(r.Leftovers(t, key)))
		if slices.Equal(prev, cur) {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's leftovers for %q keep changing: %q, then %q", r.Name, key, prev, cur)
		}
		prev = cur
	}
}

// acquireOK takes key on l, failing the test otherwise.
func acquireOK(t *testing.T, l *lockmw.Locker, key string, opts ...lockmw.AcquireOption) *lockmw.Lease {
	t.Helper()
	lease, err := l.Acquire(context.Background(), key, append([]lockmw.AcquireOption{lockmw.WithWait(30 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return lease
}

func releaseOK(t *testing.T, lease *lockmw.Lease) {
	t.Helper()
	if err := lease.Release(context.Background()); err != nil {
		t.Fatalf("Release(%q): %v", lease.Key(), err)
	}
}

// section is one critical section: when it began and ended (monotonic),
// who held it and with which fence.
type section struct {
	start, end time.Time
	who        string
	fence      uint64
}

// checkSections fails the test if two sections overlap or if fences do
// not strictly increase in the order the sections began.
func checkSections(t *testing.T, secs []section) {
	t.Helper()
	slices.SortFunc(secs, func(a, b section) int { return a.start.Compare(b.start) })
	for i := 1; i < len(secs); i++ {
		prev, cur := secs[i-1], secs[i]
		if cur.start.Before(prev.end) {
			t.Errorf("%s (fence %d) began %v before %s (fence %d) ended", cur.who, cur.fence, prev.end.Sub(cur.start), prev.who, prev.fence)
		}
		if cur.fence <= prev.fence {
			t.Errorf("fence %d of %s follows fence %d of %s: not strictly increasing", cur.fence, cur.who, prev.fence, prev.who)
		}
	}
}

// exclusion: 8 Lockers, 2 goroutines each, hammer one key with a
// non-atomic read-modify-write; half wait with Fair when the store has it.
func (r *runner) exclusion(t *testing.T) {
	const lockers, perLocker, rounds = 8, 2, 8
	k := key(t, "")
	var (
		counter, inside, overlaps atomic.Int64
		mu                        sync.Mutex
		secs                      []section
		wg                        sync.WaitGroup
	)
	errs := make(chan error, lockers*perLocker)
	for i := range lockers {
		l := r.locker(t)
		for g := range perLocker {
			var opts []lockmw.AcquireOption
			if r.Fair && g == 1 {
				opts = append(opts, lockmw.Fair())
			}
			who := fmt.Sprintf("locker %d goroutine %d", i, g)
			wg.Go(func() {
				for range rounds {
					lease, err := l.Acquire(context.Background(), k, append(opts, lockmw.WithWait(30*time.Second))...)
					if err != nil {
						errs <- fmt.Errorf("%s: Acquire: %w", who, err)
						return
					}
					sec := section{start: time.Now(), who: who, fence: lease.Fence()}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					v := counter.Load()
					runtime.Gosched() // widen the window a missing lock would expose
					counter.Store(v + 1)
					inside.Add(-1)
					live := lease.Context().Err() == nil
					sec.end = time.Now()
					if err := lease.Release(context.Background()); err != nil {
						errs <- fmt.Errorf("%s: Release: %w", who, err)
						return
					}
					if !live {
						errs <- fmt.Errorf("%s: lease context ended while held: %v", who, context.Cause(lease.Context()))
						return
					}
					mu.Lock()
					secs = append(secs, sec)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if got, want := counter.Load(), int64(lockers*perLocker*rounds); got != want {
		t.Errorf("counter = %d, want %d", got, want)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d critical sections overlapped", n)
	}
	checkSections(t, secs)
	r.waitNoLeftovers(t, k)
}

// fences: Lockers take turns on one key, by TryAcquire, by waiting, and
// by Fair when the store has it; fences rise in grant order.
func (r *runner) fences(t *testing.T) {
	k := key(t, "")
	ls := []*lockmw.Locker{r.locker(t), r.locker(t), r.locker(t)}
	var secs []section
	record := func(who string, lease *lockmw.Lease) {
		secs = append(secs, section{start: time.Now(), who: who, fence: lease.Fence()})
		releaseOK(t, lease)
		secs[len(secs)-1].end = time.Now()
	}
	for round := range 4 {
		for i, l := range ls {
			lease, err := l.TryAcquire(context.Background(), k)
			if err != nil {
				t.Fatalf("round %d: locker %d: TryAcquire: %v", round, i, err)
			}
			record(fmt.Sprintf("locker %d TryAcquire", i), lease)
		}
	}
	// Hand-overs to waiters of other Lockers, and of the same Locker.
	for round := range 3 {
		holder := acquireOK(t, ls[0], k)
		got := make(chan *lockmw.Lease, 2)
		fail := make(chan error, 2)
		for _, i := range []int{1, 0} {
			var opts []lockmw.AcquireOption
			if r.Fair && round == 1 {
				opts = append(opts, lockmw.Fair())
			}
			go func() {
				lease, err := ls[i].Acquire(context.Background(), k, append(opts, lockmw.WithWait(30*time.Second))...)
				if err != nil {
					fail <- err
					return
				}
				got <- lease
			}()
		}
		record("locker 0 holder", holder)
		for range 2 {
			select {
			case lease := <-got:
				record(fmt.Sprintf("waiter of round %d", round), lease)
			case err := <-fail:
				t.Fatalf("round %d: waiter: %v", round, err)
			case <-time.After(30 * time.Second):
				t.Fatalf("round %d: waiter did not get the lock", round)
			}
		}
	}
	// record ran in grant order: sections are sequential by construction.
	checkSections(t, secs)
	r.waitNoLeftovers(t, k)
}

// faultTTL is the TTL of the lost-lock subtests' holders. It leaves room
// for late renewals and timers on a loaded test machine (with 500 ms, a
// holder's lease ended before any fault under load, and its end can come
// late by as much as a timer is late): the subtests check what ends a lease
// and in which order, not how fast.
func (r *runner) faultTTL() time.Duration { return r.ttl(2 * time.Second) }

// setupTries is how many times lostBeforeNext takes a new lease when one
// ended before any fault (a renewal stalled past the TTL on a loaded
// machine: setup, not what the subtests check).
const setupTries = 3

// lostBeforeNext checks that holder's lease on key ends with ErrLost before
// other's Acquire returns it. begin injects the fault; end heals it: after
// hold when hold > 0, else once other got the lock. compareFences says
// whether the store keeps its fence counters through the fault.
func (r *runner) lostBeforeNext(t *testing.T, holder, other *lockmw.Locker, k string, begin, end func(testing.TB), hold time.Duration, compareFences bool) {
	t.Helper()
	ttl := r.faultTTL()
	ctx := context.Background()
	// The watchdog keeps the lease past its TTL while the store answers,
	// so an end below is the fault's doing.
	var lease *lockmw.Lease
	for try := 1; lease == nil; try++ {
		lease = acquireOK(t, holder, k)
		select {
		case <-lease.Context().Done():
			cause := context.Cause(lease.Context())
			if try == setupTries {
				t.Fatalf("lease ended before any fault, %d times; the last: %v", try, cause)
			}
			t.Logf("lease ended before any fault (a stalled renewal?), taking another: %v", cause)
			_ = lease.Release(ctx)
			lease = nil
		case <-time.After(ttl + ttl/2):
		}
	}

	type result struct {
		lease      *lockmw.Lease
		holderLive bool // lease's context still live when other's Acquire returned
		at         time.Time
		err        error
	}
	faultAt := time.Now()
	begin(t)
	ended := false
	heal := func() {
		if !ended {
			ended = true
			end(t)
		}
	}
	defer heal()
	got := make(chan result, 1)
	deadline := time.Now().Add(60 * time.Second)
	go func() {
		var last error
		for time.Now().Before(deadline) {
			next, err := other.Acquire(ctx, k, lockmw.WithWait(time.Until(deadline)))
			if err == nil {
				live := lease.Context().Err() == nil
				got <- result{lease: next, holderLive: live, at: time.Now()}
				return
			}
			last = err
			if !errors.Is(err, lockmw.ErrUnavailable) && !errors.Is(err, lockmw.ErrNotAcquired) {
				break
			}
			time.Sleep(20 * time.Millisecond) // the store is down: try again
		}
		got <- result{err: fmt.Errorf("other Locker never got the lock: %w", last)}
	}()
	if hold > 0 {
		time.Sleep(hold) // the fault's length, not a wait for a condition
		heal()
	}
	res := <-got
	heal()
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer releaseOK(t, res.lease)
	if res.holderLive {
		t.Fatalf("another Locker got the lock %v after the fault began while the holder's lease was still live (fence %d, then %d)",
			res.at.Sub(faultAt), lease.Fence(), res.lease.Fence())
	}
	cause := context.Cause(lease.Context())
	if !errors.Is(cause, lockmw.ErrLost) {
		t.Fatalf("holder's lease context ended with %v, want an error matching ErrLost", cause)
	}
	t.Logf("%s: holder lost the lease (%v); next holder %v after the fault began", r.Name, cause, res.at.Sub(faultAt))
	if compareFences && res.lease.Fence() <= lease.Fence() {
		t.Errorf("next holder's fence %d is not above the lost lease's %d", res.lease.Fence(), lease.Fence())
	}
	if err := lease.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
		t.Errorf("Release of the lost lease: %v, want an error matching ErrLost", err)
	}
}

// holderOpts are the lost-lock subtests' holder options: the drift factor
// leaves room for late timers on a loaded test machine.
func (r *runner) holderOpts() []lockmw.Option {
	return []lockmw.Option{lockmw.WithTTL(r.faultTTL()), lockmw.WithDriftFactor(0.2)}
}

func (r *runner) lostWhenPaused(t *testing.T) {
	if r.Pause == nil || r.Resume == nil {
		t.Skipf("store %s has no Pause/Resume hooks", r.Name)
	}
	k := key(t, "")
	holder, other := r.locker(t, r.holderOpts()...), r.locker(t)
	r.lostBeforeNext(t, holder, other, k, r.Pause, r.Resume, r.faultTTL()*3/2, true)
	r.waitNoLeftovers(t, k)
}

func (r *runner) lostWhenKilled(t *testing.T) {
	if r.Kill == nil || r.Restart == nil {
		t.Skipf("store %s has no Kill/Restart hooks", r.Name)
	}
	k := key(t, "")
	holder, other := r.locker(t, r.holderOpts()...), r.locker(t)
	r.lostBeforeNext(t, holder, other, k, r.Kill, r.Restart, r.faultTTL()*3/2, !r.KillLosesData || r.FencesRiseAfterDataLoss)
	r.waitNoLeftovers(t, k)
}

func (r *runner) lostWhenCut(t *testing.T) {
	if r.NewCuttableLocker == nil {
		t.Skipf("store %s has no NewCuttableLocker hook", r.Name)
	}
	k := key(t, "")
	holder, cut, heal, err := r.NewCuttableLocker(t, r.holderOpts()...)
	if err != nil {
		t.Fatalf("NewCuttableLocker: %v", err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	other := r.locker(t)
	r.lostBeforeNext(t, holder, other, k, cut, heal, 0, true)
	r.waitNoLeftovers(t, k)
}

// waiterWakes: the holder's TTL is long; a waiter must get the lock soon
// after the release, far sooner than a wait for the TTL would allow. When
// the store notifies and counts requests, the waiter must not poll.
func (r *runner) waiterWakes(t *testing.T) {
	ttl := r.ttl(30 * time.Second)
	modes := []string{"default"}
	if r.Fair {
		modes = append(modes, "fair")
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			k := key(t, "")
			holder, waiter := r.locker(t, lockmw.WithTTL(ttl)), r.locker(t, lockmw.WithTTL(ttl))
			var opts []lockmw.AcquireOption
			if mode == "fair" {
				opts = append(opts, lockmw.Fair())
			}
			lease := acquireOK(t, holder, k, opts...)
			type result struct {
				lease *lockmw.Lease
				err   error
				at    time.Time
			}
			got := make(chan result, 1)
			go func() {
				l, err := waiter.Acquire(context.Background(), k, append(opts, lockmw.WithWait(ttl))...)
				got <- result{l, err, time.Now()}
			}()
			// The holder works for a while; a polling waiter would ask
			// the store many times meanwhile.
			time.Sleep(200 * time.Millisecond)
			var before int64
			if r.Requests != nil {
				before = r.Requests(t)
			}
			const quiet = 500 * time.Millisecond
			select {
			case res := <-got:
				t.Fatalf("waiter returned while the lock was held: %v", res.err)
			case <-time.After(quiet):
			}
			if r.Notifies && r.Requests != nil {
				// A waiter polling as often as lockmw's backoff (at most
				// 8 ms apart) would make over 60 requests here.
				if n := r.Requests(t) - before; n > 15 {
					t.Errorf("%d requests reached the store in %v while one waiter waited: it polls", n, quiet)
				}
			}
			released := time.Now()
			releaseOK(t, lease)
			var res result
			select {
			case res = <-got:
			case <-time.After(ttl / 2):
				t.Fatalf("waiter still waiting %v after the release", ttl/2)
			}
			if res.err != nil {
				t.Fatalf("waiter: %v", res.err)
			}
			// An order of magnitude below the TTL: the waiter did not wait
			// for the holder's lock to expire.
			if d := res.at.Sub(released); d > ttl/10 {
				t.Errorf("waiter got the lock %v after the release, with the holder's TTL %v", d, ttl)
			}
			releaseOK(t, res.lease)
			r.waitNoLeftovers(t, k)
		})
	}
}

// fairOrder: Fair waiters of several Lockers, queued one after another,
// are served in that order.
func (r *runner) fairOrder(t *testing.T) {
	if !r.Fair {
		t.Skipf("store %s does not support Fair", r.Name)
	}
	const waiters = 6
	k := key(t, "")
	ttl := r.ttl(30 * time.Second)
	holder := r.locker(t, lockmw.WithTTL(ttl))
	ls := []*lockmw.Locker{r.locker(t, lockmw.WithTTL(ttl)), r.locker(t, lockmw.WithTTL(ttl)), r.locker(t, lockmw.WithTTL(ttl))}
	first := acquireOK(t, holder, k, lockmw.Fair())
	type result struct {
		who   int
		lease *lockmw.Lease
		err   error
	}
	got := make(chan result, waiters)
	for i := range waiters {
		go func() {
			lease, err := ls[i%len(ls)].Acquire(context.Background(), k, lockmw.Fair(), lockmw.WithWait(time.Minute))
			got <- result{i, lease, err}
		}()
		// Waiter i is queued before waiter i+1 starts.
		deadline := time.Now().Add(10 * time.Second)
		for r.Queued(t, k) != i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d: queue holds %d waiters, want %d", i, r.Queued(t, k), i+1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	release, fence := first, first.Fence()
	for want := range waiters {
		releaseOK(t, release)
		var res result
		select {
		case res = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("release %d woke nobody", want)
		}
		if res.err != nil {
			t.Fatalf("waiter %d: %v", res.who, res.err)
		}
		if res.who != want {
			t.Fatalf("hand-over %d went to waiter %d, want %d (arrival order)", want, res.who, want)
		}
		if res.lease.Fence() <= fence {
			t.Fatalf("hand-over %d: fence %d after %d", want, res.lease.Fence(), fence)
		}
		release, fence = res.lease, res.lease.Fence()
	}
	releaseOK(t, release)
	r.waitNoLeftovers(t, k)
}

// waitModes are the ways a waiter can wait on this store.
func (r *runner) waitModes() []string {
	if r.Fair {
		return []string{"default", "fair"}
	}
	return []string{"default"}
}

// holdWithWaiters takes key on a holder, then has a waiter of another
// Locker (and one of the holder's own) wait in mode, give up through stop,
// and checks the error and that the waiters left nothing behind.
func (r *runner) giveUpCase(t *testing.T, mode string, start func(l *lockmw.Locker, k string, opts []lockmw.AcquireOption) error, want error) {
	t.Helper()
	k := key(t, "")
	holder, other := r.locker(t, lockmw.WithTTL(r.ttl(30*time.Second))), r.locker(t)
	var opts []lockmw.AcquireOption
	if mode == "fair" {
		opts = append(opts, lockmw.Fair())
	}
	lease := acquireOK(t, holder, k, opts...)
	held := r.settledLeftovers(t, k)
	if len(held) == 0 {
		t.Fatalf("%s lists no leftovers for a held lock: Leftovers misses the lock itself", r.Name)
	}
	errs := make(chan error, 2)
	for _, l := range []*lockmw.Locker{other, holder} {
		go func() { errs <- start(l, k, opts) }()
	}
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, want) {
				t.Fatalf("waiter gave up with %v, want an error matching %v", err, want)
			}
			if want != lockmw.ErrNotAcquired && errors.Is(err, lockmw.ErrNotAcquired) {
				t.Errorf("error %v is confused with busy", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("waiter did not give up within 10s")
		}
	}
	// Only the holder's lock is left (with, at most, what it kept when it
	// took the lock: a subscription that lingers for a while, say).
	r.waitLeftoversWithin(t, held, k)
	if err := lease.Context().Err(); err != nil {
		t.Fatalf("holder's lease ended: %v", context.Cause(lease.Context()))
	}
	releaseOK(t, lease)
	r.waitNoLeftovers(t, k)
	// The key is free for anyone at once.
	next, err := other.TryAcquire(context.Background(), k)
	if err != nil {
		t.Fatalf("TryAcquire after the give-ups: %v", err)
	}
	releaseOK(t, next)
	r.waitNoLeftovers(t, k)
}

func (r *runner) giveUp(t *testing.T) {
	for _, mode := range r.waitModes() {
		t.Run(mode, func(t *testing.T) {
			const wait = 300 * time.Millisecond
			r.giveUpCase(t, mode, func(l *lockmw.Locker, k string, opts []lockmw.AcquireOption) error {
				start := time.Now()
				_, err := l.Acquire(context.Background(), k, append(opts, lockmw.WithWait(wait))...)
				if d := time.Since(start); err != nil && d < wait {
					return fmt.Errorf("gave up after %v, before WithWait(%v) ran out: %w", d, wait, err)
				}
				return err
			}, lockmw.ErrNotAcquired)
		})
	}
}

func (r *runner) cancel(t *testing.T) {
	for _, mode := range r.waitModes() {
		t.Run(mode, func(t *testing.T) {
			r.giveUpCase(t, mode, func(l *lockmw.Locker, k string, opts []lockmw.AcquireOption) error {
				ctx, cancel := context.WithCancel(context.Background())
				timer := time.AfterFunc(300*time.Millisecond, cancel)
				defer timer.Stop()
				_, err := l.Acquire(ctx, k, opts...)
				return err
			}, context.Canceled)
		})
	}
}

// oddKeys are keys users pass when they lock per resource id: paths,
// escapes, non-ASCII text, whitespace and control bytes, bytes that are not
// UTF-8, Redis hash tag braces, lockmw's own name suffixes, the longest key
// accepted; and, beside some of them, keys that differ only by case,
// padding or Unicode normalisation, which must be other locks.
func oddKeys() []string {
	return []string{
		"a/b", "a//b", "/leading", "trailing/", "/", ".", "..", "../x", "a%2Fb",
		"ロック/注文-1", "🔒🍣", "with space", " x", "x ", "tab\there", "new\nline",
		"nul\x00byte", "\x00", "\xff\xfe", "ok\xc3", // invalid UTF-8: a lone 0xff, a truncated sequence
		"{tag}", "}", "}}", "}x", "}{a}", "a}x", "{}x", "{", "x{",
		"x", "X", "x:q", "x:fence", "x:claims", "x:n", "x:g:1",
		"\u00e9", "e\u0301", // "é" composed (NFC) and decomposed (NFD)
		strings.Repeat("k", lockmw.MaxKeyLen),
		"}" + strings.Repeat("\xff", lockmw.MaxKeyLen-1),
	}
}

// keys: every key of oddKeys can be locked, is then busy for another
// Locker and for the same Locker from a fresh context, wakes a waiter when
// released, and is a lock of its own: all of them are held at once. A
// store that cannot keep a key's bytes as they are encodes them; it never
// reports such a key as ErrUnavailable.
func (r *runner) keys(t *testing.T) {
	ctx := context.Background()
	a, b := r.locker(t), r.locker(t)
	keys := oddKeys()
	usable := keys[:0:0]
	for i, k := range keys {
		lease, err := a.TryAcquire(ctx, k)
		if err != nil {
			t.Errorf("TryAcquire(%q): %v", show(k), err)
			continue
		}
		usable = append(usable, k)
		if lease.Key() != k {
			t.Errorf("lease.Key() = %q, want %q", show(lease.Key()), show(k))
		}
		for _, c := range []struct {
			l   *lockmw.Locker
			who string
		}{{b, "another Locker"}, {a, "the holder's Locker from a fresh context"}} {
			second, err := c.l.TryAcquire(ctx, k)
			if !errors.Is(err, lockmw.ErrNotAcquired) {
				t.Errorf("TryAcquire(%q) by %s while held: %v, want ErrNotAcquired", show(k), c.who, err)
			}
			if second != nil {
				releaseOK(t, second)
			}
		}
		// A waiter of the other Locker (Fair every other key, where the
		// store has it) queues and gives up; released, the lock goes to
		// the next waiter: the key's queue and notifications work too.
		var opts []lockmw.AcquireOption
		if r.Fair && i%2 == 1 {
			opts = append(opts, lockmw.Fair())
		}
		second, err := b.Acquire(ctx, k, append(opts, lockmw.WithWait(20*time.Millisecond))...)
		if !errors.Is(err, lockmw.ErrNotAcquired) {
			t.Errorf("Acquire(%q) by another Locker, waiting 20ms while held: %v, want ErrNotAcquired", show(k), err)
		}
		if second != nil {
			releaseOK(t, second)
		}
		opts = append(opts, lockmw.WithWait(30*time.Second))
		type result struct {
			lease *lockmw.Lease
			err   error
		}
		got := make(chan result, 1)
		go func() {
			l, err := b.Acquire(ctx, k, opts...)
			got <- result{l, err}
		}()
		releaseOK(t, lease)
		res := <-got
		if res.err != nil {
			t.Errorf("Acquire(%q) by a waiter after the release: %v", show(k), res.err)
			continue
		}
		if res.lease.Fence() <= lease.Fence() {
			t.Errorf("%q: fence %d after fence %d: not rising", show(k), res.lease.Fence(), lease.Fence())
		}
		releaseOK(t, res.lease)
	}
	// No two keys share a lock: one Locker holds every one at once.
	var held []*lockmw.Lease
	for _, k := range usable {
		lease, err := a.TryAcquire(ctx, k)
		if err != nil {
			t.Errorf("TryAcquire(%q) while holding the other keys: %v", show(k), err)
			continue
		}
		held = append(held, lease)
	}
	for _, lease := range held {
		second, err := b.TryAcquire(ctx, lease.Key())
		if !errors.Is(err, lockmw.ErrNotAcquired) {
			t.Errorf("TryAcquire(%q) by another Locker while every key is held: %v, want ErrNotAcquired", show(lease.Key()), err)
		}
		if second != nil {
			releaseOK(t, second)
		}
	}
	for _, lease := range held {
		releaseOK(t, lease)
	}
	r.waitNoLeftovers(t, usable...)
}

// show is key as failure messages quote it: its first 24 bytes and its
// length when longer.
func show(key string) string {
	if len(key) <= 24 {
		return key
	}
	return fmt.Sprintf("%s… (%d bytes)", key[:24], len(key))
}

// badInput: keys and options lockmw cannot use give the documented
// sentinel errors, and no lock is taken.
func (r *runner) badInput(t *testing.T) {
	ctx := context.Background()
	l := r.locker(t)
	noop := func(context.Context) error { return nil }
	short := lockmw.MinTTL / 2
	if r.MinTTL > lockmw.MinTTL {
		short = r.MinTTL - time.Millisecond
	}
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"empty key", func() error { _, err := l.TryAcquire(ctx, ""); return err }, lockmw.ErrInvalidKey},
		{"empty key Acquire", func() error { _, err := l.Acquire(ctx, ""); return err }, lockmw.ErrInvalidKey},
		{"oversized key", func() error {
			_, err := l.Acquire(ctx, strings.Repeat("k", lockmw.MaxKeyLen+1))
			return err
		}, lockmw.ErrInvalidKey},
		{"empty key in Do", func() error { return l.Do(ctx, "", noop) }, lockmw.ErrInvalidKey},
		{"zero lease TTL", func() error { _, err := l.Acquire(ctx, "bad", lockmw.WithLeaseTTL(0)); return err }, lockmw.ErrInvalidOption},
		{"negative lease TTL", func() error {
			_, err := l.TryAcquire(ctx, "bad", lockmw.WithLeaseTTL(-time.Second))
			return err
		}, lockmw.ErrInvalidOption},
		{fmt.Sprintf("lease TTL %v under the minimum %v", short, r.MinTTL), func() error {
			_, err := l.TryAcquire(ctx, "bad", lockmw.WithLeaseTTL(short))
			return err
		}, lockmw.ErrInvalidOption},
		{"negative wait", func() error { _, err := l.Acquire(ctx, "bad", lockmw.WithWait(-1)); return err }, lockmw.ErrInvalidOption},
		{"zero Locker TTL", func() error { return r.newAndClose(t, lockmw.WithTTL(0)) }, lockmw.ErrInvalidOption},
		{"negative Locker TTL", func() error { return r.newAndClose(t, lockmw.WithTTL(-time.Second)) }, lockmw.ErrInvalidOption},
		{fmt.Sprintf("Locker TTL %v under the minimum %v", short, r.MinTTL), func() error {
			return r.newAndClose(t, lockmw.WithTTL(short))
		}, lockmw.ErrInvalidOption},
		{"drift factor too large", func() error { return r.newAndClose(t, lockmw.WithDriftFactor(0.5)) }, lockmw.ErrInvalidOption},
	}
	if !r.Fair {
		cases = append(cases, struct {
			name string
			call func() error
			want error
		}{"Fair on a store without it", func() error { _, err := l.Acquire(ctx, "bad", lockmw.Fair()); return err }, lockmw.ErrInvalidOption})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want one matching %v", err, tc.want)
			}
			if errors.Is(err, lockmw.ErrNotAcquired) || errors.Is(err, lockmw.ErrUnavailable) {
				t.Errorf("error %v is confused with busy or unavailable", err)
			}
		})
	}
	r.waitNoLeftovers(t, "bad", "")
	// The Locker still works after all that.
	lease, err := l.TryAcquire(ctx, key(t, ""))
	if err != nil {
		t.Fatalf("TryAcquire after bad input: %v", err)
	}
	releaseOK(t, lease)
}

// newAndClose makes a Locker with opts and closes it if that succeeded.
func (r *runner) newAndClose(t *testing.T, opts ...lockmw.Option) error {
	l, err := r.NewLocker(t, opts...)
	if err == nil {
		_ = l.Close()
	}
	return err
}

// close: Close releases held locks (another Locker gets them at once), ends
// their contexts and waiting calls with ErrClosed, makes later calls return
// ErrClosed, and leaves nothing behind.
func (r *runner) close(t *testing.T) {
	ctx := context.Background()
	ttl := r.ttl(30 * time.Second)
	l, err := r.NewLocker(t, lockmw.WithTTL(ttl))
	if err != nil {
		t.Fatalf("NewLocker: %v", err)
	}
	other := r.locker(t, lockmw.WithTTL(ttl))
	keys := []string{key(t, ":a"), key(t, ":b"), key(t, ":c")}
	busy := key(t, ":busy")
	var leases []*lockmw.Lease
	for i, k := range keys {
		var opts []lockmw.AcquireOption
		if r.Fair && i == 2 {
			opts = append(opts, lockmw.Fair())
		}
		leases = append(leases, acquireOK(t, l, k, opts...))
	}
	// Waiters of l on a key other holds: one default, one Fair if possible.
	busyLease := acquireOK(t, other, busy)
	waiting := make(chan error, 2)
	for _, mode := range r.waitModes() {
		var opts []lockmw.AcquireOption
		if mode == "fair" {
			opts = append(opts, lockmw.Fair())
		}
		go func() {
			_, err := l.Acquire(ctx, busy, opts...)
			waiting <- err
		}()
	}
	if r.Fair {
		want := 1
		if r.QueuesDefaultWaiters {
			want = 2
		}
		deadline := time.Now().Add(10 * time.Second)
		for r.Queued(t, busy) != want {
			if time.Now().After(deadline) {
				t.Fatalf("waiters not queued: queue holds %d, want %d", r.Queued(t, busy), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, lease := range leases {
		select {
		case <-lease.Context().Done():
		default:
			t.Fatalf("lease on %q still live after Close", lease.Key())
		}
		if cause := context.Cause(lease.Context()); !errors.Is(cause, lockmw.ErrClosed) {
			t.Errorf("lease on %q ended with %v, want ErrClosed", lease.Key(), cause)
		}
	}
	for range r.waitModes() {
		select {
		case err := <-waiting:
			if !errors.Is(err, lockmw.ErrClosed) {
				t.Errorf("waiting Acquire ended with %v, want ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("waiting Acquire still waiting 10s after Close")
		}
	}
	// Another Locker gets the released keys at once: no waiting for a TTL.
	for _, k := range keys {
		lease, err := other.TryAcquire(ctx, k)
		if err != nil {
			t.Fatalf("TryAcquire(%q) right after Close: %v", k, err)
		}
		releaseOK(t, lease)
	}
	for name, call := range map[string]func() error{
		"TryAcquire": func() error { _, err := l.TryAcquire(ctx, keys[0]); return err },
		"Acquire":    func() error { _, err := l.Acquire(ctx, keys[0]); return err },
		"Do":         func() error { return l.Do(ctx, keys[0], func(context.Context) error { return nil }) },
	} {
		if err := call(); !errors.Is(err, lockmw.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if err := leases[0].Release(ctx); !errors.Is(err, lockmw.ErrClosed) {
		t.Errorf("Release after Close: %v, want ErrClosed", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	releaseOK(t, busyLease)
	r.waitNoLeftovers(t, append(keys, busy)...)
}
