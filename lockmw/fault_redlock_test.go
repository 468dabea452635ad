package lockmw_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// Fault tests of the Redlock backend: real redis-server masters paused
// (SIGSTOP), killed (SIGKILL) and restarted empty, and a real holder process
// paused past its TTL.

// liveLockKeys returns the lock keys (not the fence counters, which never
// expire by design) that srv holds.
func liveLockKeys(t testing.TB, srv *redistest.Server) []string {
	t.Helper()
	var keys []string
	iter := srv.Client(t).Scan(context.Background(), 0, lockmw.DefaultPrefix+"*", 100).Iterator()
	for iter.Next(context.Background()) {
		if k := iter.Val(); !strings.HasSuffix(k, ":fence") {
			keys = append(keys, k)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// endedAt records when ctx ends, on the monotonic clock.
type endedAt struct {
	mu sync.Mutex
	at time.Time
}

func watchEnd(ctx context.Context) *endedAt {
	e := &endedAt{}
	context.AfterFunc(ctx, func() {
		e.mu.Lock()
		e.at = time.Now()
		e.mu.Unlock()
	})
	return e
}

func (e *endedAt) get() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.at
}

// For N=5 and every count of unavailable masters, killed or paused: an
// acquisition succeeds iff at least 3 masters are up, fails with
// ErrUnavailable (not ErrNotAcquired) otherwise, and a failed attempt leaves
// no lock key on the masters that are up.
func TestFaultRedlockQuorumTable(t *testing.T) {
	t.Parallel() // its own servers; long, and mostly waiting
	for _, mode := range []string{"killed", "paused"} {
		for down := 0; down <= 5; down++ {
			t.Run(fmt.Sprintf("%s=%d", mode, down), func(t *testing.T) {
				masters := redistest.StartN(t, 5)
				l := newRedlock(t, masters)
				for _, m := range masters[:down] {
					if mode == "killed" {
						m.Kill(t)
					} else {
						m.Pause(t)
					}
				}
				ctx := context.Background()
				lease, err := l.TryAcquire(ctx, "table", lockmw.WithLeaseTTL(time.Minute))
				up := masters[down:]
				if len(up) >= 3 {
					if err != nil {
						t.Fatalf("%d of 5 masters up: TryAcquire = %v, want success", len(up), err)
					}
					if err := lease.Release(ctx); err != nil {
						t.Fatalf("Release: %v", err)
					}
					return
				}
				if err == nil {
					_ = lease.Release(ctx)
					t.Fatalf("%d of 5 masters up: TryAcquire succeeded without a quorum", len(up))
				}
				if !errors.Is(err, lockmw.ErrUnavailable) || errors.Is(err, lockmw.ErrNotAcquired) {
					t.Fatalf("%d of 5 masters up: error = %v, want ErrUnavailable", len(up), err)
				}
				// The rollback is sent to every master at once; a master
				// that had not answered yet when the attempt failed runs it
				// right after the acquisition it undoes. Poll for far less
				// than the 1 minute TTL: keys still there were not rolled
				// back.
				for i, m := range up {
					eventually(t, 5*time.Second, func() error {
						if keys := liveLockKeys(t, m); len(keys) > 0 {
							return fmt.Errorf("live master %d kept %v after the failed attempt", down+i, keys)
						}
						return nil
					})
				}
			})
		}
	}
}

// With masters down but a quorum still able to answer, a lock held by
// another owner is reported busy (ErrNotAcquired, with RetryAfter), never
// as a Redis failure; with too many down it is ErrUnavailable.
func TestFaultRedlockBusyWithMastersDown(t *testing.T) {
	masters := redistest.StartN(t, 5)
	holder, rival := newRedlock(t, masters), newRedlock(t, masters)
	ctx := context.Background()
	// The acquisition takes the first quorum of masters; the first renewal
	// (after TTL/3) spreads the lease over the others.
	lease, err := holder.TryAcquire(ctx, "busy", lockmw.WithLeaseTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range masters {
		eventually(t, 5*time.Second, func() error {
			if len(liveLockKeys(t, m)) != 1 {
				return fmt.Errorf("master %d does not hold the lock yet", i)
			}
			return nil
		})
	}
	masters[0].Kill(t)
	masters[1].Pause(t)
	_, err = rival.TryAcquire(ctx, "busy")
	if !errors.Is(err, lockmw.ErrNotAcquired) || errors.Is(err, lockmw.ErrUnavailable) {
		t.Fatalf("2 of 5 masters down, lock held: %v, want ErrNotAcquired", err)
	}
	if d, ok := lockmw.RetryAfter(err); !ok || d > 3*time.Second {
		t.Errorf("RetryAfter = %v, %v; want the holder's remaining TTL", d, ok)
	}
	masters[2].Kill(t)
	_, err = rival.TryAcquire(ctx, "busy")
	if !errors.Is(err, lockmw.ErrUnavailable) || errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("3 of 5 masters down: %v, want ErrUnavailable", err)
	}
	masters[1].Resume(t)
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release with 3 of 5 masters up: %v", err)
	}
}

// A master paused past the TTL while a lease is held on N=3. With one
// paused the lease stays held on the other two. With two paused the holder's
// context is cancelled while they are still paused, so before any rival can
// take the lock, and the rival's validity starts after the holder's ended.
func TestFaultRedlockMasterPausedWhileHeld(t *testing.T) {
	const ttl = 500 * time.Millisecond
	ctx := context.Background()

	t.Run("one paused", func(t *testing.T) {
		masters := redistest.StartN(t, 3)
		l, rival := newRedlock(t, masters), newRedlock(t, masters)
		const ttl = time.Second // room for renewals on a loaded machine
		lease, err := l.Acquire(ctx, "p1", lockmw.WithLeaseTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		masters[0].Pause(t)
		time.Sleep(3 * ttl / 2) // the freeze being simulated, past the TTL
		if err := lease.Context().Err(); err != nil {
			t.Fatalf("lease lost with 2 of 3 masters up: %v", context.Cause(lease.Context()))
		}
		if _, err := rival.TryAcquire(ctx, "p1"); !errors.Is(err, lockmw.ErrNotAcquired) {
			t.Fatalf("rival = %v, want ErrNotAcquired", err)
		}
		masters[0].Resume(t)
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	})

	t.Run("two paused", func(t *testing.T) {
		masters := redistest.StartN(t, 3)
		l, rival := newRedlock(t, masters), newRedlock(t, masters)
		lease, err := l.Acquire(ctx, "p2", lockmw.WithLeaseTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		holderEnd := watchEnd(lease.Context())

		// The rival tries all along; it may only win after the holder's end.
		type win struct {
			lease *lockmw.Lease
			at    time.Time
		}
		won := make(chan win, 1)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r, err := rival.TryAcquire(ctx, "p2", lockmw.WithLeaseTTL(ttl)); err == nil {
					won <- win{r, time.Now()}
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()

		masters[0].Pause(t)
		masters[1].Pause(t)
		time.Sleep(5 * ttl / 2) // the freeze being simulated, well past the TTL
		if lease.Context().Err() == nil {
			t.Fatal("lease still live after 2.5 TTL with 2 of 3 masters paused")
		}
		if r := lostReason(t, lease.Context()); r != lockmw.LostDeadline {
			t.Errorf("reason = %q, want %q", r, lockmw.LostDeadline)
		}
		select {
		case w := <-won:
			t.Fatalf("rival won while 2 of 3 masters were paused (fence %d)", w.lease.Fence())
		default:
		}
		masters[0].Resume(t)
		masters[1].Resume(t)

		select {
		case w := <-won:
			if end := holderEnd.get(); end.IsZero() || !end.Before(w.at) {
				t.Fatalf("rival's validity began at %v, holder's ended at %v: they overlap", w.at, end)
			}
			if w.lease.Fence() <= lease.Fence() {
				t.Errorf("rival fence %d after holder fence %d", w.lease.Fence(), lease.Fence())
			}
			_ = w.lease.Release(ctx)
		case <-time.After(20 * time.Second):
			t.Fatal("rival never got the lock after the masters resumed")
		}
		if err := lease.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
			t.Errorf("holder Release = %v, want ErrLost", err)
		}
	})
}

// restartScenario: on N=3, holder A wins exactly masters 0 and 1 (master
// 2 is held by a foreign owner then freed), master 1 is killed -9 and
// restarted empty after delay, and a rival B then takes the lock on
// masters 1 and 2. It returns whether A's lease was still live when B got
// the lock.
func restartScenario(t *testing.T, ttl, delay time.Duration) (overlap bool) {
	t.Helper()
	ctx := context.Background()
	masters := redistest.StartN(t, 3)
	// A's drift allowance (10% of the TTL + 2ms) also covers how late this
	// loaded test machine may run A's deadline timer and the goroutine that
	// records when A's lease ended.
	a, b := newRedlock(t, masters, lockmw.WithDriftFactor(0.1)), newRedlock(t, masters)

	// Master 2 is held by a third party until master 1 restarts, so that
	// A's quorum is masters 0 and 1 and its renewals cannot spread to 2.
	occupy(t, masters[2], "rs", time.Minute)
	lease, err := a.Acquire(ctx, "rs", lockmw.WithLeaseTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	holderEnd := watchEnd(lease.Context())

	masters[1].Kill(t)
	killedAt := time.Now()
	if _, err := b.TryAcquire(ctx, "rs"); err == nil {
		t.Fatal("rival won with master 1 down and master 0 held by A")
	}
	time.Sleep(time.Until(killedAt.Add(delay)))
	vacate(t, masters[2], "rs")
	masters[1].Restart(t)

	var bLease *lockmw.Lease
	eventually(t, 20*time.Second, func() (err error) {
		bLease, err = b.TryAcquire(ctx, "rs", lockmw.WithLeaseTTL(ttl))
		return err
	})
	wonAt := time.Now()
	defer func() { _ = bLease.Release(ctx) }()
	end := holderEnd.get()
	overlap = end.IsZero() || !end.Before(wonAt)
	if end.IsZero() {
		t.Logf("delay %v: B won while A's lease was live; A fence %d, B fence %d", delay, lease.Fence(), bLease.Fence())
	} else {
		t.Logf("delay %v: A's lease ended %v before B won; A fence %d, B fence %d", delay, wonAt.Sub(end), lease.Fence(), bLease.Fence())
	}
	return overlap
}

// The restart-delay rule: a master restarted without persistence rejoins
// only after the longest lease TTL. Then A's lease, which lost its quorum
// with the master's data, has ended before anyone else can win: no double
// grant.
func TestFaultRedlockRestartDelayedByTTL(t *testing.T) {
	const ttl = time.Second
	if restartScenario(t, ttl, ttl) {
		t.Fatal("double grant: B won while A's lease was live, with the restart delayed by the TTL")
	}
}

// The control for the rule: restarting the empty master at once grants
// the lock to B while A still holds it. This test asserts that Redlock's
// safety is violated then: it documents why the rule exists.
func TestFaultRedlockRestartWithoutDelayDoubleGrants(t *testing.T) {
	const ttl = 10 * time.Second // A's validity lasts the whole test
	if !restartScenario(t, ttl, 0) {
		t.Fatal("no double grant with an immediate restart: the scenario no longer exercises the restart rule")
	}
}

// redlockHolderEnv makes the test binary act as a Redlock lock holder (see
// TestMain): the value is "addr,addr,... key ttl".
const redlockHolderEnv = "LOCKMW_TEST_REDLOCK_HOLDER"

// runRedlockHolder acquires a lock through NewRedlock with the watchdog on,
// prints "held FENCE", and prints "ended CAUSE" as soon as its lease
// context ends, then exits.
func runRedlockHolder(spec string) int {
	var addrs, key, ttlText string
	if _, err := fmt.Sscan(spec, &addrs, &key, &ttlText); err != nil {
		fmt.Fprintln(os.Stderr, "bad holder spec:", err)
		return 2
	}
	ttl, err := time.ParseDuration(ttlText)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad holder TTL:", err)
		return 2
	}
	var clients []redis.UniversalClient
	for _, addr := range strings.Split(addrs, ",") {
		o := &redis.Options{Addr: addr}
		fastFailing(o)
		clients = append(clients, redis.NewClient(o))
	}
	l, err := lockmw.NewRedlock(clients, lockmw.WithTTL(ttl))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	lease, err := l.Acquire(context.Background(), key)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("held %d\n", lease.Fence())
	<-lease.Context().Done()
	fmt.Printf("ended %v\n", context.Cause(lease.Context()))
	return 0
}

// fencedStore is a storage layer that accepts a write only with a fence
// greater than that of the last write it accepted.
type fencedStore struct {
	mu    sync.Mutex
	fence uint64
	value string
}

func (s *fencedStore) write(fence uint64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence <= s.fence {
		return fmt.Errorf("stale fence %d: last accepted write had fence %d", fence, s.fence)
	}
	s.fence, s.value = fence, value
	return nil
}

// The holder process itself is paused (SIGSTOP) past its TTL: another
// holder gets the lock meanwhile; once resumed, the first holder's lease
// context ends by itself (validity deadline), and a write it makes with its
// fence is rejected by a fenced store that the new holder already wrote to.
func TestFaultRedlockHolderProcessPaused(t *testing.T) {
	masters := redistest.StartN(t, 3)
	const ttl = time.Second
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = m.Addr()
	}
	cmd, lines := startTestProcess(t, redlockHolderEnv, fmt.Sprintf("%s %s %s", strings.Join(addrs, ","), "job", ttl))
	line, err := lines.ReadString('\n')
	if err != nil {
		t.Fatalf("holder process did not report holding the lock: %v", err)
	}
	staleFence, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(line), "held "), 10, 64)
	if err != nil {
		t.Fatalf("holder process said %q", line)
	}

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Resumed at the end of the test at the latest, so it can be killed
	// and reaped cleanly.
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT) })

	store := &fencedStore{}
	l := newRedlock(t, masters)
	lease, err := l.Acquire(context.Background(), "job", lockmw.WithWait(20*time.Second))
	if err != nil {
		t.Fatalf("the lock of a paused holder was never freed: %v", err)
	}
	defer func() { _ = lease.Release(context.Background()) }()
	if lease.Fence() <= staleFence {
		t.Fatalf("new holder's fence %d, paused holder's %d", lease.Fence(), staleFence)
	}
	if err := store.write(lease.Fence(), "new holder"); err != nil {
		t.Fatalf("new holder's write: %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	ended := make(chan string, 1)
	go func() {
		line, _ := lines.ReadString('\n')
		ended <- strings.TrimSpace(line)
	}()
	select {
	case line := <-ended:
		if !strings.HasPrefix(line, "ended ") || !strings.Contains(line, "lost") || !strings.Contains(line, "deadline") {
			t.Fatalf("resumed holder reported %q, want its lease ended by the validity deadline", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("resumed holder's lease context did not end")
	}
	// A write the paused holder had in flight arrives now: rejected.
	if err := store.write(staleFence, "paused holder"); err == nil {
		t.Fatal("the store accepted the paused holder's stale write")
	}
	if store.value != "new holder" {
		t.Fatalf("store value = %q", store.value)
	}
	if err := lease.Context().Err(); err != nil {
		t.Fatalf("new holder's lease ended when the old holder resumed: %v", context.Cause(lease.Context()))
	}
}

// Eight clients, each with its own Locker, take and give back four Redlock
// locks over 5 masters while masters are paused (one, two, or three of them:
// a lost quorum), and killed and restarted empty after the longest TTL (the
// restart-delay rule). Their lock history (acquisitions, and holdings ended
// by release or by a cancelled lease context) must be linearizable as a
// mutex: no two holders ever overlap.
func TestFaultRedlockLinearizable(t *testing.T) {
	t.Parallel() // its own servers; long, and mostly waiting
	const (
		clients  = 8
		keys     = 4
		ttl      = 400 * time.Millisecond
		chaos    = 8 * time.Second
		maxChaos = 25 * time.Second
	)
	masters := redistest.StartN(t, 5)
	history := newLockHistory()
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var acquired, lost atomic.Int64
	for c := range clients {
		// The drift allowance (20% of the TTL + 2ms, 82ms) also absorbs
		// how late this loaded machine runs deadline timers and the
		// goroutines recording them.
		l := newRedlock(t, masters, lockmw.WithTTL(ttl), lockmw.WithDriftFactor(0.2))
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for runCtx.Err() == nil {
				call := time.Now()
				key := fmt.Sprintf("lin:%d", rng.IntN(keys))
				lease, err := l.Acquire(runCtx, key, lockmw.WithWait(time.Second))
				if err != nil {
					time.Sleep(5 * time.Millisecond) // Redis unavailable: back off
					continue
				}
				ret := time.Now()
				acquired.Add(1)
				ended := watchEnd(lease.Context())
				// Half the holdings are short; the others outlive the TTL,
				// on renewals, and are lost if a quorum goes away meanwhile.
				hold := time.Duration(rng.IntN(20)) * time.Millisecond
				if rng.IntN(2) == 0 {
					hold = ttl/2 + time.Duration(rng.Int64N(int64(7*ttl/2)))
				}
				select {
				case <-time.After(hold):
				case <-lease.Context().Done():
				}
				end := time.Now()
				if at := ended.get(); !at.IsZero() && at.Before(end) {
					end = at // lost: the holding ended with the context
					lost.Add(1)
				}
				_ = lease.Release(context.Background())
				history.add(key, c, true, call, ret)
				history.add(key, c, false, end, time.Now())
			}
		}()
	}

	// Faults in turn, on random masters: pause 1, 2, then 3 of 5 (no
	// quorum: holders must be cancelled at their deadline), then kill one
	// and restart it empty after the longest TTL.
	rng := rand.New(rand.NewPCG(42, 42))
	var faults []string
	// The faults go on for chaos, and longer (up to maxChaos) until the
	// clients made enough acquisitions on a slow machine.
	start := time.Now()
	for step := 0; time.Since(start) < chaos || (acquired.Load() < 60 && time.Since(start) < maxChaos); step++ {
		down := rng.Perm(len(masters))
		if n := step%4 + 1; n <= 3 {
			d := ttl + time.Duration(rng.Int64N(int64(3*ttl/2)))
			for _, i := range down[:n] {
				masters[i].Pause(t)
			}
			time.Sleep(d)
			for _, i := range down[:n] {
				masters[i].Resume(t)
			}
			faults = append(faults, fmt.Sprintf("paused %v for %v", down[:n], d.Round(time.Millisecond)))
		} else {
			masters[down[0]].Kill(t)
			time.Sleep(ttl) // the restart-delay rule: rejoin after the longest TTL
			masters[down[0]].Restart(t)
			faults = append(faults, fmt.Sprintf("killed %d, restarted after %v", down[0], ttl))
		}
		time.Sleep(time.Duration(100+rng.IntN(200)) * time.Millisecond)
	}
	stop()
	wg.Wait()
	t.Logf("faults: %s", strings.Join(faults, "; "))
	t.Logf("%d acquisitions, %d leases lost", acquired.Load(), lost.Load())
	if acquired.Load() < 30 {
		t.Fatalf("only %d acquisitions: the run exercised too little", acquired.Load())
	}
	if err := history.check(t); err != nil {
		t.Fatal(err)
	}
}
