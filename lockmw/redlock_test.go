package lockmw_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// redlockClients returns one new client per master, closed at cleanup.
func redlockClients(t testing.TB, masters []*redistest.Server, opts ...func(*redis.Options)) []redis.UniversalClient {
	t.Helper()
	clients := make([]redis.UniversalClient, len(masters))
	for i, m := range masters {
		clients[i] = m.Client(t, opts...)
	}
	return clients
}

// dialOnce makes a client report a refused connection after one dial, not
// after five spaced 100ms apart.
func dialOnce(o *redis.Options) { o.DialerRetries = 1 }

// newRedlock returns a Redlock Locker over masters, on clients of its own
// that give up quickly on a dead or frozen master, closed at cleanup.
func newRedlock(t testing.TB, masters []*redistest.Server, opts ...lockmw.Option) *lockmw.Locker {
	t.Helper()
	l, err := lockmw.NewRedlock(redlockClients(t, masters, fastFailing, dialOnce), opts...)
	if err != nil {
		t.Fatalf("NewRedlock: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// occupy sets key's lock on srv to a foreign owner for ttl, as if another
// client had won that master, so that acquisitions win only the others.
func occupy(t testing.TB, srv *redistest.Server, key string, ttl time.Duration) {
	t.Helper()
	if err := srv.Client(t).Set(context.Background(), lockKey(key), "foreign-owner", ttl).Err(); err != nil {
		t.Fatal(err)
	}
}

// vacate deletes key's lock on srv, whoever holds it there.
func vacate(t testing.TB, srv *redistest.Server, key string) {
	t.Helper()
	if err := srv.Client(t).Del(context.Background(), lockKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestNewRedlockRejectsBadMasters(t *testing.T) {
	masters := redistest.StartN(t, 3)
	c := redlockClients(t, masters)
	var nilClient *redis.Client
	for _, tc := range []struct {
		name    string
		clients []redis.UniversalClient
		want    error
		says    string
	}{
		{"none", nil, lockmw.ErrInvalidOption, "got 0 clients"},
		{"one", c[:1], lockmw.ErrInvalidOption, "odd number, at least 3"},
		{"even", append(append([]redis.UniversalClient{}, c...), masters[0].Client(t, func(o *redis.Options) { o.Addr = "127.0.0.1:1" })), lockmw.ErrInvalidOption, "got 4 clients"},
		{"nil", []redis.UniversalClient{c[0], nil, c[2]}, lockmw.ErrNilClient, "client 1 of 3 is nil"},
		{"typed nil", []redis.UniversalClient{c[0], c[1], nilClient}, lockmw.ErrNilClient, "client 2 of 3 is nil"},
		{"same client", []redis.UniversalClient{c[0], c[1], c[0]}, lockmw.ErrInvalidOption, "clients 0 and 2 are the same client"},
		{"same master", []redis.UniversalClient{c[0], c[1], masters[1].Client(t)}, lockmw.ErrInvalidOption, "clients 1 and 2 both reach " + masters[1].Addr()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := lockmw.NewRedlock(tc.clients)
			if err == nil {
				_ = l.Close()
				t.Fatal("NewRedlock accepted it")
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error = %v, want %v saying %q", err, tc.want, tc.says)
			}
		})
	}
	// Bad options are reported too, after the masters were accepted.
	if _, err := lockmw.NewRedlock(c, lockmw.WithDriftFactor(2)); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Fatalf("WithDriftFactor(2): %v", err)
	}
	// Fair hand-off needs a queue on one deployment: refused, nothing taken.
	l := newRedlock(t, masters)
	if _, err := l.TryAcquire(context.Background(), "fair", lockmw.Fair()); !errors.Is(err, lockmw.ErrInvalidOption) {
		t.Fatalf("TryAcquire with Fair on Redlock = %v, want ErrInvalidOption", err)
	}
	for i, m := range masters {
		if keys := liveLockKeys(t, m); len(keys) > 0 {
			t.Errorf("master %d holds %v after a refused Fair acquisition", i, keys)
		}
	}
}

// A Redlock lease is held on every master once its first renewal (after
// TTL/3) has spread it from the quorum its acquisition took, excludes other
// Lockers, and is gone from every master after Release.
func TestRedlockAcquireRelease(t *testing.T) {
	masters := redistest.StartN(t, 3)
	l, rival := newRedlock(t, masters), newRedlock(t, masters)
	ctx := context.Background()
	lease, err := l.TryAcquire(ctx, "k", lockmw.WithLeaseTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// TryAcquire returns once a majority granted it; the renewal takes
	// the rest.
	for i, m := range masters {
		eventually(t, 5*time.Second, func() error {
			if m.Client(t).Exists(ctx, lockKey("k")).Val() != 1 {
				return fmt.Errorf("master %d: lock key missing", i)
			}
			return nil
		})
	}
	_, err = rival.TryAcquire(ctx, "k")
	if !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("rival TryAcquire = %v, want ErrNotAcquired", err)
	}
	if d, ok := lockmw.RetryAfter(err); !ok || d > 5*time.Second {
		t.Errorf("RetryAfter = %v, %v; want the holder's remaining TTL (<= 5s)", d, ok)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if lease.Context().Err() == nil {
		t.Error("lease context live after Release")
	}
	// Release returns once a majority deleted it; the rest follow.
	for i, m := range masters {
		eventually(t, 5*time.Second, func() error {
			if m.Client(t).Exists(ctx, lockKey("k")).Val() != 0 {
				return fmt.Errorf("master %d: lock key left after Release", i)
			}
			return nil
		})
	}
	lease2, err := rival.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("rival after release: %v", err)
	}
	if lease2.Fence() <= lease.Fence() {
		t.Errorf("fence %d after %d", lease2.Fence(), lease.Fence())
	}
	_ = lease2.Release(ctx)
}

// Lockers over the same masters exclude each other: a non-atomic counter
// updated under the lock ends exact, and no two holders are ever inside.
func TestRedlockMutualExclusion(t *testing.T) {
	t.Parallel() // its own servers; long, and mostly waiting
	masters := redistest.StartN(t, 3)
	assertMutualExclusion(t, 8, 15, func() *lockmw.Locker { return newRedlock(t, masters) })
}

// Fences strictly increase when successive holders win different
// majorities, whose masters' own counters disagree: the second round
// raises a quorum of counters to the fence handed out.
func TestRedlockFenceAcrossDifferentMajorities(t *testing.T) {
	masters := redistest.StartN(t, 3)
	l := newRedlock(t, masters)
	ctx := context.Background()
	var last uint64
	// Each holder finds one master taken by someone else, so it wins the
	// other two: {1,2}, {0,2}, {0,1}, then round again.
	for round := range 6 {
		blocked := masters[round%3]
		occupy(t, blocked, "fenced", time.Minute)
		lease, err := l.TryAcquire(ctx, "fenced")
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if lease.Fence() <= last {
			t.Fatalf("round %d: fence %d after %d", round, lease.Fence(), last)
		}
		last = lease.Fence()
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("round %d: release: %v", round, err)
		}
		vacate(t, blocked, "fenced")
	}
}

// The watchdog keeps a Redlock lease past its TTL on every master.
func TestRedlockWatchdogKeepsLease(t *testing.T) {
	masters := redistest.StartN(t, 3)
	l, rival := newRedlock(t, masters), newRedlock(t, masters)
	ctx := context.Background()
	const ttl = 2 * time.Second
	lease, err := l.Acquire(ctx, "kept", lockmw.WithLeaseTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	// A renewal reaches every master (a condition, not a span of time).
	for i, m := range masters {
		if !waitRenewedOn(t, m.Client(t), lease, 30*time.Second) {
			t.Fatalf("lease ended before master %d saw a renewal: %v", i, context.Cause(lease.Context()))
		}
	}
	if err := lease.Context().Err(); err != nil {
		t.Fatalf("lease ended: %v", context.Cause(lease.Context()))
	}
	if _, err := rival.TryAcquire(ctx, "kept"); !errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("rival = %v, want ErrNotAcquired", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// When a majority of masters lose the lock behind the holder's back, the
// next renewal cancels the lease with ErrLost; with only a minority losing
// it, the lease stays held.
func TestRedlockRenewalNeedsQuorum(t *testing.T) {
	masters := redistest.StartN(t, 3)
	l := newRedlock(t, masters)
	ctx := context.Background()
	const ttl = 2 * time.Second // renewals every 667 ms: room for a loaded machine's late timers

	minority, err := l.Acquire(ctx, "minority", lockmw.WithLeaseTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	vacate(t, masters[0], "minority")
	time.Sleep(3 * ttl / 2)
	if err := minority.Context().Err(); err != nil {
		t.Fatalf("lease lost with a majority still holding it: %v", context.Cause(minority.Context()))
	}
	if err := minority.Release(ctx); err != nil {
		t.Fatal(err)
	}

	majority, err := l.Acquire(ctx, "majority", lockmw.WithLeaseTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	vacate(t, masters[0], "majority")
	occupy(t, masters[1], "majority", time.Minute)
	waitDone(t, majority.Context(), 10*ttl, "lease lost on a majority")
	if r := lostReason(t, majority.Context()); r != lockmw.LostTaken {
		t.Errorf("reason = %q, want %q (one master holds another owner's token)", r, lockmw.LostTaken)
	}
	if err := majority.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
		t.Errorf("Release of a lost lease = %v, want ErrLost", err)
	}
	// The third master's copy is still ours and untouched by others; the
	// foreign one on master 1 was never deleted.
	if v := masters[1].Client(t).Get(ctx, lockKey("majority")).Val(); v != "foreign-owner" {
		t.Errorf("another owner's lock was touched: %q", v)
	}
}

// Close stops the Locker: later calls fail with ErrClosed and held leases
// end with ErrClosed.
func TestRedlockClose(t *testing.T) {
	masters := redistest.StartN(t, 3)
	l := newRedlock(t, masters)
	ctx := context.Background()
	lease, err := l.Acquire(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(lease.Context()), lockmw.ErrClosed) {
		t.Errorf("lease cause = %v, want ErrClosed", context.Cause(lease.Context()))
	}
	if _, err := l.TryAcquire(ctx, "c"); !errors.Is(err, lockmw.ErrClosed) {
		t.Errorf("TryAcquire after Close = %v", err)
	}
	for i, m := range masters {
		eventually(t, 5*time.Second, func() error {
			if m.Client(t).Exists(ctx, lockKey("c")).Val() != 0 {
				return fmt.Errorf("master %d: lock left after Close", i)
			}
			return nil
		})
	}
}

// mutexOp is one operation on a lock in a linearizability history: a
// client's successful acquisition, or the end of its holding (release, or
// the moment its lease context ended, whichever came first).
type mutexOp struct {
	key     string
	client  int
	acquire bool
}

// mutexModel is the sequential specification of a lock for porcupine: the
// state is the holding client, or -1 when free. An acquisition is legal only
// on a free lock, a release only by the holder. Each key is a lock of its
// own, checked on its own.
var mutexModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(mutexOp).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() any { return -1 },
	Step: func(state, input, _ any) (bool, any) {
		holder, op := state.(int), input.(mutexOp)
		switch {
		case op.acquire && holder == -1:
			return true, op.client
		case !op.acquire && holder == op.client:
			return true, -1
		}
		return false, holder
	},
	DescribeOperation: func(input, _ any) string {
		if op := input.(mutexOp); op.acquire {
			return fmt.Sprintf("acquire(%s, %d)", op.key, op.client)
		}
		return fmt.Sprintf("release(%s, %d)", input.(mutexOp).key, input.(mutexOp).client)
	},
}

// lockHistory records lock operations with times on one monotonic clock.
type lockHistory struct {
	mu   sync.Mutex
	base time.Time
	ops  []porcupine.Operation
}

func newLockHistory() *lockHistory { return &lockHistory{base: time.Now()} }

func (h *lockHistory) add(key string, client int, acquire bool, call, ret time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{
		ClientId: client,
		Input:    mutexOp{key: key, client: client, acquire: acquire},
		Call:     call.Sub(h.base).Nanoseconds(),
		Return:   ret.Sub(h.base).Nanoseconds(),
	})
}

// check reports whether the history is linearizable as a mutex; when it is
// not, it writes porcupine's visualization to a file named in the error.
func (h *lockHistory) check(t testing.TB) error {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	res, info := porcupine.CheckOperationsVerbose(mutexModel, h.ops, time.Minute)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Illegal:
		path := "(not written)"
		if f, err := os.CreateTemp("", "lockmw-history-*.html"); err == nil {
			_ = porcupine.Visualize(mutexModel, info, f)
			_ = f.Close()
			path = f.Name()
		}
		return fmt.Errorf("%d operations are not linearizable as a mutex: two holders overlap (visualization: %s)", len(h.ops), path)
	}
	return fmt.Errorf("linearizability check of %d operations gave %q", len(h.ops), res)
}

// The checker itself catches overlapping holders, and accepts a release and
// the next acquisition that run concurrently.
func TestMutexModelCatchesOverlap(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	broken := &lockHistory{base: at(0)}
	broken.add("k", 0, true, at(0), at(10))
	broken.add("k", 1, true, at(20), at(30)) // client 1 acquires while 0 holds
	broken.add("k", 0, false, at(40), at(50))
	broken.add("k", 1, false, at(60), at(70))
	if err := broken.check(t); err == nil {
		t.Fatal("overlapping holders passed the check")
	}

	fine := &lockHistory{base: at(0)}
	fine.add("k", 0, true, at(0), at(10))
	fine.add("k", 0, false, at(20), at(30))
	fine.add("k", 1, true, at(25), at(40)) // may take effect after 0's release
	fine.add("k", 1, false, at(50), at(60))
	fine.add("k", 0, true, at(55), at(80))
	fine.add("k", 0, false, at(90), at(95))
	fine.add("other", 1, true, at(0), at(10)) // another lock: no conflict with "k"
	fine.add("other", 1, false, at(90), at(95))
	if err := fine.check(t); err != nil {
		t.Fatalf("a correct history failed the check: %v", err)
	}
}

// A lock kept on a majority of five independent masters: it survives the
// loss of any two of them. Writes carry the fence, so a holder that lost
// the lock (paused, partitioned) cannot overwrite a newer holder's work.
func ExampleNewRedlock() {
	var clients []redis.UniversalClient
	for _, addr := range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379", "redis-d:6379", "redis-e:6379"} {
		c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 200 * time.Millisecond})
		defer c.Close()
		clients = append(clients, c)
	}
	locker, err := lockmw.NewRedlock(clients, lockmw.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "invoice:7", lockmw.WithWait(5*time.Second))
	if err != nil {
		log.Fatal(err) // ErrNotAcquired: still busy; ErrUnavailable: no majority answered
	}
	defer lease.Release(ctx)
	// Work under lease.Context(), and fence the write:
	// UPDATE invoices SET ... WHERE id = 7 AND fence < $1, with lease.Fence().
	fmt.Println("fence", lease.Fence())
}

// The watchdog renews Redlock leases in one pipeline per master per tick,
// not one round trip per lease and master, and keeps them all held. It waits
// for about two renewals per lease on every master (a count; renewals come
// every TTL/3), not for a span of wall-clock time, and the TTL is long enough
// that a late tick on a loaded machine does not end a lease.
func TestRedlockRenewalsBatchedPerMaster(t *testing.T) {
	masters := redistest.StartN(t, 3)
	clients := redlockClients(t, masters)
	hooks := make([]*pipelineCounter, len(clients))
	for i, c := range clients {
		hooks[i] = &pipelineCounter{}
		c.AddHook(hooks[i])
	}
	l, err := lockmw.NewRedlock(clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	const n, ttl = 1000, 6 * time.Second

	leases := acquireMany(t, l, n, ttl)
	type count struct{ pipes, cmds int64 }
	before := make([]count, len(hooks))
	for i, h := range hooks {
		before[i] = count{h.pipelines.Load(), h.commands.Load()}
	}
	// The bound is for a stuck watchdog.
	lockmwtest.Eventually(t, 60*time.Second, "two renewals per lease on every master", func() bool {
		for i, h := range hooks {
			if h.commands.Load()-before[i].cmds < 2*n {
				return false
			}
		}
		return true
	})
	for i, lease := range leases {
		if err := lease.Context().Err(); err != nil {
			t.Fatalf("lease %d ended: %v", i, context.Cause(lease.Context()))
		}
	}
	for i, h := range hooks {
		pipes, renewals := h.pipelines.Load()-before[i].pipes, h.commands.Load()-before[i].cmds
		if perTrip := renewals / max(pipes, 1); perTrip < 100 {
			t.Errorf("master %d: %d renewals in %d round trips (%d each): renewals are not batched", i, renewals, pipes, perTrip)
		}
		t.Logf("master %d: %d renewals in %d round trips", i, renewals, pipes)
	}
	for _, lease := range leases {
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
