package lockmw_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// holderEnv makes the test binary act as a lock-holding process (see
// TestMain): the value is "addr key ttl", and " fair" to wait with Fair.
const holderEnv = "LOCKMW_TEST_HOLDER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(holderEnv); spec != "" {
		os.Exit(runHolder(spec))
	}
	if spec := os.Getenv(redlockHolderEnv); spec != "" {
		os.Exit(runRedlockHolder(spec))
	}
	if spec := os.Getenv(xprocWorkerEnv); spec != "" {
		os.Exit(runProcessWorker(spec))
	}
	os.Exit(lockmwtest.RunWithRedis(m, &redisAddr)) // the examples' Redis
}

// runHolder acquires a lock with the watchdog on, prints "held FENCE", and
// holds it until the process is killed.
func runHolder(spec string) int {
	var addr, key, ttlText, mode string
	if n, err := fmt.Sscan(spec, &addr, &key, &ttlText, &mode); n < 3 {
		fmt.Fprintln(os.Stderr, "bad holder spec:", err)
		return 2
	}
	ttl, err := time.ParseDuration(ttlText)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad holder TTL:", err)
		return 2
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	l, err := lockmw.New(client, lockmw.WithTTL(ttl))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var opts []lockmw.AcquireOption
	if mode == "fair" {
		opts = append(opts, lockmw.Fair())
	}
	lease, err := l.Acquire(context.Background(), key, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("held %d\n", lease.Fence())
	<-lease.Context().Done()
	fmt.Fprintln(os.Stderr, "lease ended:", context.Cause(lease.Context()))
	return 3
}

// startHolderProcess runs a separate process that takes key on srv and
// returns it (still holding) with the fence it got.
func startHolderProcess(t *testing.T, srv *redistest.Server, key string, ttl time.Duration) (*exec.Cmd, uint64) {
	t.Helper()
	cmd, out := startTestProcess(t, holderEnv, fmt.Sprintf("%s %s %s", srv.Addr(), key, ttl))
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("holder process did not report holding the lock: %v", err)
	}
	fence, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(line), "held "), 10, 64)
	if err != nil {
		t.Fatalf("holder process said %q", line)
	}
	return cmd, fence
}

// startTestProcess runs this test binary as a helper process (see
// TestMain) with env set to spec, killed at cleanup, and returns it with its
// standard output.
func startTestProcess(t *testing.T, env, spec string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+spec)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewReader(out)
}

// newLocker and newLockerOn return a Locker closed at cleanup.
var (
	newLocker   = lockmwtest.NewLocker
	newLockerOn = lockmwtest.NewLockerOn
)

// waitDone waits for ctx to end, failing the test after limit.
func waitDone(t testing.TB, ctx context.Context, limit time.Duration, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(limit):
		t.Fatalf("%s: context still live after %v", what, limit)
	}
}

// lostReason returns the reason a lease context ended with ErrLost.
func lostReason(t testing.TB, ctx context.Context) lockmw.LostReason {
	t.Helper()
	cause := context.Cause(ctx)
	var lost *lockmw.LostError
	if !errors.Is(cause, lockmw.ErrLost) || !errors.As(cause, &lost) {
		t.Fatalf("context cause = %v, want a *LostError matching ErrLost", cause)
	}
	return lost.Reason
}

// mustBusy asserts that key is held by someone else, seen from l.
var mustBusy = lockmwtest.MustBusy

// lockKey is where lockmw stores the owner token of key with the default prefix.
func lockKey(key string) string { return lockmw.DefaultPrefix + "{" + key + "}" }

// clusterLockKey is lockKey on a Redis Cluster: a key starting with '}',
// whose plain names would have an empty hash tag, is named
// prefix+"#{H}{key}", H being the key's CRC-32 (IEEE) in 8 hex digits
// (lockmw/internal/redisstore, naming); every other key as lockKey.
func clusterLockKey(key string) string {
	if strings.HasPrefix(key, "}") {
		return fmt.Sprintf("%s#{%08x}{%s}", lockmw.DefaultPrefix, crc32.ChecksumIEEE([]byte(key)), key)
	}
	return lockKey(key)
}

// assertMutualExclusion has workers goroutines, each with its own Locker
// from newLocker, increment a counter rounds times with a non-atomic
// read-modify-write inside the lock: it must end exact, and no two of them
// may ever be inside at once.
func assertMutualExclusion(t *testing.T, workers, rounds int, newLocker func() *lockmw.Locker) {
	t.Helper()
	var counter, inside, overlaps atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		l := newLocker()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				err := l.Do(context.Background(), "counter", func(ctx context.Context) error {
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					v := counter.Load()
					runtime.Gosched() // widen the window a missing lock would expose
					counter.Store(v + 1)
					inside.Add(-1)
					return nil
				}, lockmw.WithWait(30*time.Second))
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Do: %v", err)
	}
	if got := counter.Load(); got != int64(workers*rounds) {
		t.Errorf("counter = %d, want %d", got, workers*rounds)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d critical sections overlapped", n)
	}
}

// acquireMany takes the n keys "many:0" ... from 8 goroutines, with lease
// TTL ttl, and returns the leases by key number.
func acquireMany(t *testing.T, l *lockmw.Locker, n int, ttl time.Duration) []*lockmw.Lease {
	t.Helper()
	ctx := context.Background()
	leases := make([]*lockmw.Lease, n)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				lease, err := l.TryAcquire(ctx, fmt.Sprintf("many:%d", i), lockmw.WithLeaseTTL(ttl))
				if err != nil {
					errs <- err
					return
				}
				leases[i] = lease
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return leases
}

// handOver is what a queued waiter's Acquire returned: who is its place in
// the queue.
type handOver struct {
	who   int
	lease *lockmw.Lease
	err   error
}

// assertHandOversInOrder releases first, then each lease a release handed
// on, and checks that the waiters queued behind it (each sends its result
// on got) are served one at a time, in queue order, with rising fences.
// check, if not nil, is called before each release (i counts them from 0)
// and returns what to check once that release's waiter has the lock: the
// commands it cost, say. That check reports whether they show a woken
// waiter's attempt that lost a race (Redlock: its wake overtook the
// release on the other masters); a hand-over out of queue order passes
// then, logged, and the order of the rest is not checked. It returns the
// last waiter's lease, still held.
func assertHandOversInOrder(t *testing.T, first *lockmw.Lease, got <-chan handOver, waiters int, check func(i int) func() (lostRace bool)) *lockmw.Lease {
	t.Helper()
	ctx := context.Background()
	release, last := first, first.Fence()
	unordered := false
	for want := range waiters {
		var after func() bool
		if check != nil {
			after = check(want)
		}
		if err := release.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var r handOver
		select {
		case r = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("release %d woke nobody", want)
		}
		if r.err != nil {
			t.Fatalf("waiter %d: %v", r.who, r.err)
		}
		lost := after != nil && after()
		switch {
		case r.who == want || unordered:
		case lost:
			unordered = true
			t.Logf("hand-over %d went to waiter %d, not %d: the woken waiter's attempt lost a race; the order of the rest is not checked", want, r.who, want)
		default:
			t.Fatalf("hand-over %d went to waiter %d, want %d (arrival order)", want, r.who, want)
		}
		if r.lease.Fence() <= last {
			t.Fatalf("fence %d after %d: fences must increase", r.lease.Fence(), last)
		}
		last = r.lease.Fence()
		select {
		case extra := <-got:
			t.Fatalf("waiter %d acquired while waiter %d holds the lock", extra.who, r.who)
		default:
		}
		release = r.lease
	}
	return release
}
