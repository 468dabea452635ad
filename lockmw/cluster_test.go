package lockmw_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// renewRecorder is a go-redis hook for the node clients of a cluster client:
// it records, per node, the pipelined round trips that carried renewals,
// how many renewals each carried, and the renewals refused with NOSCRIPT.
type renewRecorder struct {
	sha, source string

	mu       sync.Mutex
	batches  map[string][]int // node address -> renewals per round trip
	noscript map[string]int   // node address -> NOSCRIPT replies to renewals
	failures []error          // other errors on renewals
}

func newRenewRecorder(t *testing.T) *renewRecorder {
	t.Helper()
	src, err := os.ReadFile("internal/redisstore/scripts/renew.lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	r := &renewRecorder{sha: hex.EncodeToString(sum[:]), source: string(src)}
	r.reset()
	return r
}

func (r *renewRecorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = map[string][]int{}
	r.noscript = map[string]int{}
	r.failures = nil
}

// renewals returns how many renewals reached the node at addr since the
// last reset, in how many round trips, and its NOSCRIPT replies.
func (r *renewRecorder) renewals(addr string) (n, trips, noscript int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.batches[addr] {
		n += x
	}
	return n, len(r.batches[addr]), r.noscript[addr]
}

func (r *renewRecorder) isRenewal(c redis.Cmder) bool {
	args := c.Args()
	if len(args) < 2 {
		return false
	}
	name := strings.ToLower(fmt.Sprint(args[0]))
	return (name == "evalsha" && args[1] == r.sha) || (name == "eval" && args[1] == r.source)
}

// hook returns the hook to add to the node client for addr.
func (r *renewRecorder) hook(addr string) redis.Hook { return renewHook{r, addr} }

type renewHook struct {
	r    *renewRecorder
	addr string
}

func (h renewHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h renewHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h renewHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		n := 0
		h.r.mu.Lock()
		defer h.r.mu.Unlock()
		for _, c := range cmds {
			if !h.r.isRenewal(c) {
				continue
			}
			n++
			switch err := c.Err(); {
			case err == nil:
			case redis.HasErrorPrefix(err, "NOSCRIPT"):
				h.r.noscript[h.addr]++
			case redis.HasErrorPrefix(err, "ASK"), redis.HasErrorPrefix(err, "MOVED"):
				// A redirection, which the cluster client follows.
			default:
				h.r.failures = append(h.r.failures, fmt.Errorf("%s: %w", h.addr, err))
			}
		}
		if n > 0 {
			h.r.batches[h.addr] = append(h.r.batches[h.addr], n)
		}
		return err
	}
}

// recordedClient returns a cluster client whose node clients report to rec.
func recordedClient(t *testing.T, c *redistest.Cluster, rec *renewRecorder) *redis.ClusterClient {
	t.Helper()
	return c.Client(t, func(o *redis.ClusterOptions) {
		o.NewClient = func(opt *redis.Options) *redis.Client {
			nc := redis.NewClient(opt)
			nc.AddHook(rec.hook(opt.Addr))
			return nc
		}
	})
}

// clusterKeys returns perMaster lock keys for each master of c: keys[i]
// are served by master i.
func clusterKeys(t *testing.T, c *redistest.Cluster, perMaster int) [][]string {
	t.Helper()
	keys := make([][]string, len(c.Masters()))
	for i, found := 0, 0; found < perMaster*len(keys); i++ {
		k := fmt.Sprintf("order:%d", i)
		// Every key of a lock carries the hash tag {k}: its slot is k's.
		o := c.Owner(c.Slot(t, lockKey(k)))
		if len(keys[o]) < perMaster {
			keys[o] = append(keys[o], k)
			found++
		}
	}
	return keys
}

// Locks on all three masters of a real cluster are acquired, exclude other
// Lockers, are kept past their TTL by renewals that cost one round trip per
// node per tick (not one per lease), and are released.
func TestClusterAcquireRenewReleaseBatchedPerNode(t *testing.T) {
	t.Parallel() // its own servers; long, and mostly waiting
	c := redistest.StartCluster(t)
	rec := newRenewRecorder(t)
	l := newLockerOn(t, recordedClient(t, c, rec))
	rival := newLockerOn(t, c.Client(t))
	ctx := context.Background()
	// TTLs here are long enough for renewals to be answered in time on a
	// loaded machine (the tests share two cores with other work).
	const perMaster, ttl = 10, 3 * time.Second
	keys := clusterKeys(t, c, perMaster)

	var leases []*lockmw.Lease
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 3*perMaster)
	for _, onMaster := range keys {
		for _, k := range onMaster {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lease, err := l.Acquire(ctx, k, lockmw.WithLeaseTTL(ttl))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				leases = append(leases, lease)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Acquire on the cluster: %v", err)
	}
	for i, srv := range c.Masters() {
		node := srv.Client(t)
		for _, k := range keys[i] {
			if n, err := node.Exists(ctx, lockKey(k)).Result(); err != nil || n != 1 {
				t.Fatalf("lock %s is not on master %d, which serves its slot: EXISTS = %d, %v", k, i, n, err)
			}
		}
		mustBusy(t, rival, keys[i][0])
	}

	rec.reset()
	// Past the TTL: only renewals keep the locks. The test waits for two
	// renewals per lease on every master (a count: renewals come every
	// TTL/3), not for a span of wall-clock time; the bound is for a stuck
	// watchdog.
	eventually(t, 60*time.Second, func() error {
		for i, addr := range c.Addrs() {
			if n, _, _ := rec.renewals(addr); n < 2*perMaster {
				return fmt.Errorf("master %d: %d renewals of its %d leases, want at least 2 each", i, n, perMaster)
			}
		}
		return nil
	})
	for _, lease := range leases {
		if err := lease.Context().Err(); err != nil {
			t.Fatalf("lease %s ended while held: %v", lease.Key(), context.Cause(lease.Context()))
		}
	}
	rec.mu.Lock()
	renewals, trips := 0, 0
	for i, addr := range c.Addrs() {
		b := rec.batches[addr]
		n := 0
		for _, x := range b {
			n += x
		}
		t.Logf("master %d: %d renewals in %d round trips %v", i, n, len(b), b)
		renewals += n
		trips += len(b)
	}
	failures := rec.failures
	rec.mu.Unlock()
	if len(failures) > 0 {
		t.Errorf("renewals failed: %v", failures)
	}
	// One round trip per node per tick carries all that node's leases that
	// are due; a round trip per lease would make this ratio 1.
	if trips == 0 || renewals < trips*perMaster/2 {
		t.Errorf("%d renewals took %d round trips (%.1f per trip); want them batched per node (about %d per trip)",
			renewals, trips, float64(renewals)/float64(max(trips, 1)), perMaster)
	}

	first := leases[0]
	for _, lease := range leases {
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release %s: %v", lease.Key(), err)
		}
	}
	for i, srv := range c.Masters() {
		if n, _ := srv.Client(t).Exists(ctx, lockKey(keys[i][0])).Result(); n != 0 {
			t.Errorf("lock %s still on master %d after Release", keys[i][0], i)
		}
	}
	next, err := rival.TryAcquire(ctx, first.Key())
	if err != nil {
		t.Fatalf("TryAcquire after Release: %v", err)
	}
	if next.Fence() <= first.Fence() {
		t.Errorf("fence went from %d to %d", first.Fence(), next.Fence())
	}
	_ = next.Release(ctx)
}

// A restarted master has lost its keys and its script cache: leases on it
// are lost (ErrLost), leases on the other masters are untouched, and a new
// lease on it is renewed past NOSCRIPT (the script is resent in full).
func TestClusterNoscriptAfterMasterRestart(t *testing.T) {
	t.Parallel() // its own servers; long, and mostly waiting
	c := redistest.StartCluster(t)
	rec := newRenewRecorder(t)
	l := newLockerOn(t, recordedClient(t, c, rec))
	ctx := context.Background()
	const ttl = 3 * time.Second // room for late renewals on a loaded machine
	keys := clusterKeys(t, c, 1)
	leases := make([]*lockmw.Lease, len(keys))
	for i := range keys {
		var err error
		if leases[i], err = l.Acquire(ctx, keys[i][0], lockmw.WithLeaseTTL(ttl)); err != nil {
			t.Fatal(err)
		}
	}

	restarted := c.Masters()[1]
	restarted.Restart(t)
	waitDone(t, leases[1].Context(), 10*ttl, "lease on the restarted master")
	lostReason(t, leases[1].Context())
	c.WaitHealthy(t)
	for _, i := range []int{0, 2} {
		if err := leases[i].Context().Err(); err != nil {
			t.Fatalf("lease on master %d ended when master 1 restarted: %v", i, context.Cause(leases[i].Context()))
		}
	}

	// The restart emptied the master's script cache, but the renewal that
	// found lease 1 lost may have loaded the renewal script again (with
	// EVAL after NOSCRIPT), depending on whether its deadline or the
	// master's return came first: flush it, so that the next lease's first
	// renewal on it meets NOSCRIPT whatever the timing.
	if err := restarted.Client(t).ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rec.reset()
	var again *lockmw.Lease
	eventually(t, 10*time.Second, func() (err error) {
		again, err = l.Acquire(ctx, keys[1][0], lockmw.WithLeaseTTL(ttl))
		return err
	})
	if again.Fence() != 1 {
		t.Logf("fence %d on the restarted master (its counter was lost with its keys)", again.Fence())
	}
	// Wait for the NOSCRIPT renewal and one after it (counts; the bound is
	// for a stuck watchdog).
	eventually(t, 60*time.Second, func() error {
		if _, trips, noscript := rec.renewals(restarted.Addr()); noscript == 0 || trips < 2 {
			return fmt.Errorf("%d renewal round trips on the restarted master, %d NOSCRIPT", trips, noscript)
		}
		return nil
	})
	if err := again.Context().Err(); err != nil {
		t.Fatalf("lease on the restarted master ended: %v", context.Cause(again.Context()))
	}
	_, trips, noscript := rec.renewals(restarted.Addr())
	rec.mu.Lock()
	failures := rec.failures
	rec.mu.Unlock()
	if noscript == 0 {
		t.Errorf("no renewal on the restarted master met NOSCRIPT; the test did not exercise the resend")
	}
	if trips < 2 {
		t.Errorf("%d renewal round trips on the restarted master, want the NOSCRIPT one and later ones", trips)
	}
	if len(failures) > 0 {
		t.Errorf("renewals failed: %v", failures)
	}
	for _, lease := range []*lockmw.Lease{leases[0], leases[2], again} {
		if err := lease.Release(ctx); err != nil {
			t.Errorf("Release %s: %v", lease.Key(), err)
		}
	}
}

// Moving the slot of a lock between masters while it is held and renewed,
// and while other Lockers keep trying to take it, is invisible to users: no
// error but ErrNotAcquired, never two holders, fences still increase, and
// the holder keeps its lock through the ASK and MOVED phases.
func TestClusterReshardingWhileHeldAndContended(t *testing.T) {
	t.Parallel() // its own servers; long, and mostly waiting
	c := redistest.StartCluster(t)
	rec := newRenewRecorder(t)
	holder := newLockerOn(t, recordedClient(t, c, rec))
	// The holder renews every ttl/3, so each phase of ttl/2 below sees a
	// renewal.
	const key, ttl, phase = "stock:7", time.Second, 500 * time.Millisecond
	slot := c.Slot(t, lockKey(key))
	home := c.Owner(slot)
	ctx := context.Background()

	var (
		inside    atomic.Int32 // holders right now, as the holders themselves see it
		mu        sync.Mutex
		lastFence uint64
		problems  []string
		grants    atomic.Int64
	)
	enter := func(who string, fence uint64) {
		if n := inside.Add(1); n != 1 {
			mu.Lock()
			problems = append(problems, fmt.Sprintf("%s entered with %d holders", who, n))
			mu.Unlock()
		}
		mu.Lock()
		if fence <= lastFence {
			problems = append(problems, fmt.Sprintf("%s got fence %d after %d", who, fence, lastFence))
		}
		lastFence = fence
		mu.Unlock()
	}

	lease, err := holder.Acquire(ctx, key, lockmw.WithLeaseTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	enter("holder", lease.Fence())

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		l := newLockerOn(t, c.Client(t))
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := fmt.Sprintf("contender %d", w)
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Attempts retry through a migrating slot for a quarter of
				// this TTL (at most 1s), longer than the second resharding
				// below, which real reshardings take milliseconds for.
				le, err := l.Acquire(ctx, key, lockmw.WithWait(20*time.Millisecond), lockmw.WithLeaseTTL(4*time.Second))
				if errors.Is(err, lockmw.ErrNotAcquired) {
					continue
				}
				if err != nil {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("%s: Acquire: %v", who, err))
					mu.Unlock()
					continue
				}
				enter(who, le.Fence())
				grants.Add(1)
				time.Sleep(time.Millisecond) // the critical section
				inside.Add(-1)
				if err := le.Release(ctx); err != nil {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("%s: Release: %v", who, err))
					mu.Unlock()
				}
			}
		}()
	}

	// Held and renewed through each phase of a resharding.
	renewalsOnto := func(addr string) int {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		n := 0
		for _, b := range rec.batches[addr] {
			n += b
		}
		return n
	}
	away := (home + 1) % 3
	m := c.BeginMigration(t, slot, away)
	time.Sleep(phase) // MIGRATING: the keys are still on the source
	if n := m.MoveKeys(t); n != 2 {
		t.Errorf("moved %d keys of the lock's slot, want 2 (lock and fence)", n)
	}
	before := renewalsOnto(c.Addrs()[away])
	time.Sleep(phase) // keys on the target: ASK redirections
	if renewalsOnto(c.Addrs()[away]) == before {
		t.Errorf("no renewal reached the target master while the slot was being imported")
	}
	m.Finish(t)
	time.Sleep(phase) // MOVED
	if err := lease.Context().Err(); err != nil {
		t.Fatalf("holder lost the lock during the resharding: %v", context.Cause(lease.Context()))
	}
	inside.Add(-1)
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release after the resharding: %v", err)
	}

	// The lock now changes hands among the contenders; move its slot back
	// meanwhile.
	deadline := time.Now().Add(10 * time.Second)
	for grants.Load() < 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	grantsBefore := grants.Load()
	// While the slot of a free lock migrates, Redis refuses the acquire
	// script (TRYAGAIN: the lock key and the fence counter are not on one
	// node); attempts retry through it for up to 1s here, far longer than a
	// real resharding takes per slot.
	m = c.BeginMigration(t, slot, home)
	time.Sleep(phase / 4)
	m.MoveKeys(t)
	time.Sleep(phase / 4)
	m.Finish(t)
	time.Sleep(phase)
	close(stop)
	wg.Wait()

	if grants.Load() < 5 || grants.Load() == grantsBefore {
		t.Errorf("contenders took the lock %d times (%d before the second resharding); want it to keep changing hands", grants.Load(), grantsBefore)
	}
	rec.mu.Lock()
	failures := rec.failures
	rec.mu.Unlock()
	if len(failures) > 0 {
		t.Errorf("renewals failed during the resharding: %v", failures)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// A slot left half-migrated (a stalled resharding) makes acquisitions of its
// locks fail with ErrUnavailable, never ErrNotAcquired, after a bounded
// retry; they succeed again once the migration is finished.
func TestClusterStalledMigrationIsUnavailable(t *testing.T) {
	c := redistest.StartCluster(t)
	l := newLockerOn(t, c.Client(t))
	ctx := context.Background()
	const key = "stalled"
	lease, err := l.TryAcquire(ctx, key) // creates the fence counter
	if err != nil {
		t.Fatal(err)
	}
	first := lease.Fence()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	slot := c.Slot(t, lockKey(key))
	m := c.BeginMigration(t, slot, (c.Owner(slot)+1)%3)
	_, err = within2(t, 10*time.Second, func() (*lockmw.Lease, error) {
		return l.TryAcquire(ctx, key, lockmw.WithLeaseTTL(200*time.Millisecond))
	})
	if !errors.Is(err, lockmw.ErrUnavailable) || errors.Is(err, lockmw.ErrNotAcquired) {
		t.Fatalf("TryAcquire on a stalled migration: %v, want ErrUnavailable", err)
	}
	m.Finish(t)
	lease, err = l.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after the migration finished: %v", err)
	}
	if lease.Fence() != first+1 {
		t.Errorf("fence %d, want %d: the counter moved with the slot", lease.Fence(), first+1)
	}
	_ = lease.Release(ctx)
}

// within2 is within for a call returning a lease.
func within2(t *testing.T, limit time.Duration, call func() (*lockmw.Lease, error)) (*lockmw.Lease, error) {
	t.Helper()
	var lease *lockmw.Lease
	err := within(t, limit, func() (err error) { lease, err = call(); return err })
	if lease != nil {
		_ = lease.Release(context.Background())
	}
	return lease, err
}

// On a cluster whose masters have one replica each, WithWaitReplicas(1)
// waits on the master of each lock: locks are on their master's replica when
// acquired, and pausing one replica fails (and rolls back) only the locks of
// its master.
func TestClusterWaitReplicasPerMaster(t *testing.T) {
	c := redistest.StartCluster(t, redistest.WithClusterReplicas(1))
	l := newLockerOn(t, c.Client(t), lockmw.WithWaitReplicas(1, time.Second))
	ctx := context.Background()
	keys := clusterKeys(t, c, 2)
	readOnly := func(o *redis.Options) {
		o.OnConnect = func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }
	}
	for i := range keys {
		lease, err := l.TryAcquire(ctx, keys[i][0])
		if err != nil {
			t.Fatalf("master %d: TryAcquire: %v", i, err)
		}
		replica := c.Replicas(i)[0].Client(t, readOnly)
		if n, err := replica.Exists(ctx, lockKey(keys[i][0])).Result(); err != nil || n != 1 {
			t.Errorf("master %d: lock not on its replica when acquired: EXISTS = %d, %v", i, n, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	c.Replicas(1)[0].Pause(t)
	defer c.Replicas(1)[0].Resume(t)
	for i := range keys {
		lease, err := l.TryAcquire(ctx, keys[i][1])
		if i != 1 {
			if err != nil {
				t.Errorf("master %d (replica running): TryAcquire: %v", i, err)
			} else {
				_ = lease.Release(ctx)
			}
			continue
		}
		if !errors.Is(err, lockmw.ErrNotReplicated) {
			t.Fatalf("master 1 (replica paused): TryAcquire = %v, want ErrNotReplicated", err)
		}
		if n, err := c.Masters()[1].Client(t).Exists(ctx, lockKey(keys[i][1])).Result(); err != nil || n != 0 {
			t.Errorf("master 1: unacknowledged lock left behind: EXISTS = %d, %v", n, err)
		}
	}
}

// Waiters on a cluster wake on the release notification (sharded pub/sub
// on the lock's master), not on the holder's TTL: with a 30s TTL a waiter on
// each master gets its lock within seconds of the release.
func TestClusterWaitersWakeOnRelease(t *testing.T) {
	c := redistest.StartCluster(t)
	holder := newLockerOn(t, c.Client(t))
	waiter := newLockerOn(t, c.Client(t))
	ctx := context.Background()
	const ttl = 30 * time.Second
	for i, onMaster := range clusterKeys(t, c, 1) {
		key := onMaster[0]
		lease, err := holder.Acquire(ctx, key, lockmw.WithLeaseTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := waiter.Acquire(ctx, key, lockmw.WithWait(ttl/2))
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		// Let the waiter subscribe and find the lock busy; a release before
		// that would be found by its first attempt and prove nothing.
		time.Sleep(300 * time.Millisecond)
		select {
		case err := <-got:
			t.Fatalf("master %d: waiter returned while the lock was held: %v", i, err)
		default:
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("master %d: waiter: %v", i, err)
			}
		case <-time.After(ttl / 3):
			t.Fatalf("master %d: waiter not woken by the release within %v (its TTL fallback is %v)", i, ttl/3, ttl)
		}
	}
}

// Fair hand-over works on every master of a cluster: waiters of two Lockers
// queue in the lock's slot and get the lock in arrival order, each told by
// a sharded message (the 30 s TTL fallback would exceed their wait).
func TestClusterFairHandOver(t *testing.T) {
	c := redistest.StartCluster(t)
	admin := c.Client(t)
	lockers := []*lockmw.Locker{newLockerOn(t, c.Client(t)), newLockerOn(t, c.Client(t))}
	holder := newLockerOn(t, c.Client(t))
	ctx := context.Background()
	const ttl = 30 * time.Second
	for m, onMaster := range clusterKeys(t, c, 1) {
		key := onMaster[0]
		lease, err := holder.Acquire(ctx, key, lockmw.Fair(), lockmw.WithLeaseTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			who   int
			lease *lockmw.Lease
			err   error
		}
		got := make(chan result, 4)
		for i := range 4 {
			go func() {
				l, err := lockers[i%2].Acquire(ctx, key, lockmw.Fair(), lockmw.WithLeaseTTL(ttl), lockmw.WithWait(ttl/2))
				got <- result{i, l, err}
			}()
			eventually(t, 5*time.Second, func() error {
				n, err := admin.LLen(ctx, queueKey(key)).Result()
				if err != nil {
					return err
				}
				if n != int64(i+1) {
					return fmt.Errorf("master %d: queue holds %d, want %d", m, n, i+1)
				}
				return nil
			})
		}
		for want := range 4 {
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-got
			if r.err != nil {
				t.Fatalf("master %d: waiter %d: %v", m, r.who, r.err)
			}
			if r.who != want {
				t.Fatalf("master %d: hand-over %d went to waiter %d", m, want, r.who)
			}
			lease = r.lease
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := admin.Exists(ctx, queueKey(key), lockKey(key)).Result(); err != nil || n != 0 {
			t.Fatalf("master %d: %d of queue and lock keys left (%v)", m, n, err)
		}
	}
}

// On a cluster with one master paused, concurrent acquisitions of its locks
// each fail after one timeout (those queued behind a round trip that timed
// out are failed with it), and those of the other masters' locks, queued
// behind the same round trips, are sent and succeed.
func TestClusterPausedMasterFailsOnlyItsQueuedAcquisitions(t *testing.T) {
	c := redistest.StartCluster(t)
	const perMaster = 20
	keys := clusterKeys(t, c, perMaster)
	paused := map[string]bool{}
	for _, k := range keys[0] {
		paused[lockKey(k)] = true
	}
	trips := newTripRecorder(t, func(k string) bool { return paused[k] })
	client := c.Client(t, func(o *redis.ClusterOptions) {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 300*time.Millisecond, time.Second, time.Second
		o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled = -1, 1, true
	})
	client.AddHook(trips)
	l := newLockerOn(t, client)
	ctx := context.Background()
	for _, onMaster := range keys { // warm: a connection to each master, the scripts loaded
		lease, err := l.TryAcquire(ctx, onMaster[0])
		if err != nil {
			t.Fatal(err)
		}
		releaseOK(t, lease)
	}
	c.Masters()[0].Pause(t)
	defer c.Masters()[0].Resume(t)

	// The paused master's acquisitions first: the first round trips carry
	// them, and the others queue; then the other masters', which queue
	// behind the same round trips.
	errs := make([][]error, len(keys))
	leases := make([][]*lockmw.Lease, len(keys))
	var wg sync.WaitGroup
	for m, onMaster := range keys {
		errs[m], leases[m] = make([]error, len(onMaster)), make([]*lockmw.Lease, len(onMaster))
		for i, k := range onMaster {
			wg.Go(func() { leases[m][i], errs[m][i] = l.TryAcquire(ctx, k) })
		}
		if m == 0 {
			eventually(t, 10*time.Second, func() error {
				if n := trips.started.Load(); n < 4 {
					return fmt.Errorf("%d round trips with the paused master's acquisitions started, want 4", n)
				}
				return nil
			})
		}
	}
	wg.Wait()
	for m := range keys {
		for i, err := range errs[m] {
			switch {
			case m == 0 && !errors.Is(err, lockmw.ErrUnavailable):
				t.Errorf("TryAcquire(%s) on the paused master = %v, want ErrUnavailable", keys[m][i], err)
			case m != 0 && err != nil:
				t.Errorf("TryAcquire(%s) on master %d, not paused = %v, want a lease", keys[m][i], m, err)
			case m != 0:
				releaseOK(t, leases[m][i])
			}
		}
	}
	inARow, all := trips.timeoutsInARow()
	t.Logf("%d round trips with acquisitions on the paused master timed out, at most %d in a row", all, inARow)
	if inARow != 1 {
		t.Errorf("%d acquisitions at once on a paused master waited out %d timeouts in a row, want 1", perMaster, inARow)
	}
}
