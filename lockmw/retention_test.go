package lockmw_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/lockmwtest"
	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// fenceDeployment is one way of running Redis for the counter tests: how to
// make a Locker on it and how to delete a lock's fence counter everywhere
// it is kept.
type fenceDeployment struct {
	name string
	fair bool // Fair and hand-overs exist (not on Redlock)
	// locker returns a new Locker (as a separate process would have).
	locker func(t *testing.T, opts ...lockmw.Option) *lockmw.Locker
	// deleteCounter deletes key's fence counter and reports how many
	// copies it deleted.
	deleteCounter func(t *testing.T, key string) int64
	// dbsize sums DBSIZE over the servers.
	dbsize func(t *testing.T) int64
	// queued reports whether a waiter is queued behind key's holder (the
	// lock's value carries the queue mark); Fair deployments only.
	queued func(t *testing.T, key string) bool
	// addr is the single server's address ("" for the others).
	addr string
}

// queueMarked reports whether key's lock value on c carries the mark that
// fair waiters are queued (see scripts/grant.lua).
func queueMarked(c redis.Cmdable, key string) bool {
	return strings.Contains(c.Get(context.Background(), lockKey(key)).Val(), "+")
}

func fenceKey(key string) string { return lockKey(key) + ":fence" }

func singleFenceDeployment(t *testing.T, args ...string) fenceDeployment {
	srv := redistest.Start(t, redistest.WithArgs(args...))
	admin := srv.Client(t)
	return fenceDeployment{
		name: "redis", fair: true,
		locker: func(t *testing.T, opts ...lockmw.Option) *lockmw.Locker { return newLocker(t, srv, opts...) },
		deleteCounter: func(t *testing.T, key string) int64 {
			return admin.Del(context.Background(), fenceKey(key)).Val()
		},
		dbsize: func(t *testing.T) int64 { return admin.DBSize(context.Background()).Val() },
		queued: func(t *testing.T, key string) bool { return queueMarked(admin, key) },
		addr:   srv.Addr(),
	}
}

func clusterFenceDeployment(t *testing.T) fenceDeployment {
	cl := redistest.StartCluster(t)
	admin := cl.Client(t)
	return fenceDeployment{
		name: "cluster", fair: true,
		locker: func(t *testing.T, opts ...lockmw.Option) *lockmw.Locker {
			return newLockerOn(t, cl.Client(t), opts...)
		},
		deleteCounter: func(t *testing.T, key string) int64 {
			return admin.Del(context.Background(), fenceKey(key)).Val()
		},
		queued: func(t *testing.T, key string) bool { return queueMarked(admin, key) },
	}
}

func redlockFenceDeployment(t *testing.T, args ...string) fenceDeployment {
	masters := redistest.StartN(t, 3, redistest.WithArgs(args...))
	var admins []*redis.Client
	for _, m := range masters {
		admins = append(admins, m.Client(t))
	}
	return fenceDeployment{
		name: "redlock",
		locker: func(t *testing.T, opts ...lockmw.Option) *lockmw.Locker {
			return newRedlock(t, masters, opts...)
		},
		deleteCounter: func(t *testing.T, key string) int64 {
			var n int64
			for _, a := range admins {
				n += a.Del(context.Background(), fenceKey(key)).Val()
			}
			return n
		},
		dbsize: func(t *testing.T) int64 {
			var n int64
			for _, a := range admins {
				n += a.DBSize(context.Background()).Val()
			}
			return n
		},
	}
}

// A fence counter deleted between two holders (as eviction, a hand
// deletion or a restart without persistence would) still gives the second
// holder a higher fence, whichever way it gets the lock: an acquisition, a
// hand-over to a Fair waiter of another Locker, a transfer to a waiter of
// the same Locker; on one Redis, a Cluster and Redlock.
func TestFenceRisesAfterCounterDeleted(t *testing.T) {
	t.Parallel()
	deployments := []func(*testing.T) fenceDeployment{
		func(t *testing.T) fenceDeployment { return singleFenceDeployment(t) },
		clusterFenceDeployment,
		func(t *testing.T) fenceDeployment { return redlockFenceDeployment(t) },
	}
	for _, start := range deployments {
		d := start(t)
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l1, l2 := d.locker(t), d.locker(t)

			t.Run("acquire", func(t *testing.T) {
				const key = "deleted:acquire"
				last := uint64(0)
				for i := range 6 {
					lease, err := []*lockmw.Locker{l1, l2}[i%2].Acquire(ctx, key, lockmw.WithWait(5*time.Second))
					if err != nil {
						t.Fatal(err)
					}
					if lease.Fence() <= last {
						t.Fatalf("holder %d: fence %d after %d (counter deleted in between: %v)", i, lease.Fence(), last, i%2 == 1)
					}
					last = lease.Fence()
					if i%2 == 0 {
						// Deleted while held, or after the release.
						if n := d.deleteCounter(t, key); n == 0 {
							t.Fatalf("holder %d: no counter to delete", i)
						}
					}
					releaseOK(t, lease)
					if i%2 == 1 {
						d.deleteCounter(t, key)
					}
				}
			})
			if !d.fair {
				return
			}
			t.Run("fair hand-over", func(t *testing.T) {
				const key = "deleted:grant"
				holder, err := l1.Acquire(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan *lockmw.Lease, 1)
				go func() {
					lease, err := l2.Acquire(ctx, key, lockmw.Fair(), lockmw.WithWait(10*time.Second))
					if err != nil {
						t.Error(err)
					}
					got <- lease
				}()
				lockmwtest.Eventually(t, 5*time.Second, "the Fair waiter queued", func() bool { return d.queued(t, key) })
				d.deleteCounter(t, key)
				releaseOK(t, holder)
				next := <-got
				if next == nil {
					return
				}
				defer releaseOK(t, next)
				if next.Fence() <= holder.Fence() {
					t.Fatalf("Fair waiter handed the lock got fence %d after the holder's %d", next.Fence(), holder.Fence())
				}
			})
			t.Run("transfer", func(t *testing.T) {
				const key = "deleted:transfer"
				holder, err := l1.Acquire(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan *lockmw.Lease, 1)
				started := make(chan struct{})
				go func() {
					close(started)
					lease, err := l1.Acquire(ctx, key, lockmw.WithWait(10*time.Second))
					if err != nil {
						t.Error(err)
					}
					got <- lease
				}()
				<-started
				time.Sleep(50 * time.Millisecond) // let the waiter wait; either order passes
				d.deleteCounter(t, key)
				releaseOK(t, holder)
				next := <-got
				if next == nil {
					return
				}
				// Its own release hands on to nobody; draw once more after
				// another deletion.
				d.deleteCounter(t, key)
				releaseOK(t, next)
				if next.Fence() <= holder.Fence() {
					t.Fatalf("waiter of the same Locker got fence %d after the holder's %d", next.Fence(), holder.Fence())
				}
				third, err := l2.Acquire(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				defer releaseOK(t, third)
				if third.Fence() <= next.Fence() {
					t.Fatalf("next holder got fence %d after %d", third.Fence(), next.Fence())
				}
			})
		})
	}
}

// The control for the test above: counters that never expire
// (WithPermanentFences, as before expiry existed) count from 1 again after
// a deletion, so the next fence falls.
func TestPermanentFencesFallAfterCounterDeleted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l := newLocker(t, srv, lockmw.WithPermanentFences())
	ctx := context.Background()
	var fences []uint64
	for range 3 {
		lease, err := l.Acquire(ctx, "permanent")
		if err != nil {
			t.Fatal(err)
		}
		fences = append(fences, lease.Fence())
		releaseOK(t, lease)
	}
	pttl := srv.Client(t).PTTL(ctx, fenceKey("permanent")).Val()
	srv.Client(t).Del(ctx, fenceKey("permanent"))
	lease, err := l.Acquire(ctx, "permanent")
	if err != nil {
		t.Fatal(err)
	}
	releaseOK(t, lease)
	if fences[0] != 1 || fences[2] != 3 || pttl != -1 {
		t.Errorf("permanent fences %v, counter PTTL %v: want 1, 2, 3 and no expiry", fences, pttl)
	}
	if lease.Fence() != 1 {
		t.Errorf("after the counter was deleted: fence %d, want 1 (permanent counters start over)", lease.Fence())
	}
}

// Once every lock has been idle for the retention, nothing of lockmw is
// left in Redis: no lock, no fence counter, no queue, also of a waiter
// whose Locker lost its link and closed without leaving the queue.
func TestIdleLocksLeaveNothing(t *testing.T) {
	t.Parallel()
	const retention = 2 * time.Second
	for _, start := range []func(*testing.T) fenceDeployment{
		func(t *testing.T) fenceDeployment { return singleFenceDeployment(t) },
		func(t *testing.T) fenceDeployment { return redlockFenceDeployment(t) },
	} {
		d := start(t)
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			opts := []lockmw.Option{lockmw.WithTTL(time.Second), lockmw.WithRetention(retention)}
			l1, l2 := d.locker(t, opts...), d.locker(t, opts...)

			// Many distinct keys, as per-resource locking makes.
			for i := range 100 {
				lease, err := l1.TryAcquire(ctx, fmt.Sprintf("order:%d", i))
				if err != nil {
					t.Fatal(err)
				}
				releaseOK(t, lease)
			}
			// One contended key, waiters of both Lockers (Fair where the
			// store has it: a queue in Redis).
			var waitOpts []lockmw.AcquireOption
			if d.fair {
				waitOpts = append(waitOpts, lockmw.Fair())
			}
			var wg sync.WaitGroup
			for w := range 6 {
				wg.Go(func() {
					l := []*lockmw.Locker{l1, l2}[w%2]
					for range 5 {
						lease, err := l.Acquire(ctx, "contended", append(waitOpts, lockmw.WithWait(20*time.Second))...)
						if err != nil {
							t.Error(err)
							return
						}
						time.Sleep(2 * time.Millisecond)
						releaseOK(t, lease)
					}
				})
			}
			wg.Wait()
			if d.name == "redis" {
				leaveStrandedWaiter(t, d, opts)
			}
			if n := d.dbsize(t); n == 0 {
				t.Fatal("DBSIZE 0 right after the work: nothing to expire")
			}
			// The locks are released; the counters and queues go once
			// idle for the retention (Redis expires keys actively, a few
			// times a second).
			lockmwtest.Eventually(t, retention+5*time.Second, "DBSIZE 0 after the retention", func() bool {
				return d.dbsize(t) == 0
			})
		})
	}
}

// leaveStrandedWaiter leaves a Fair waiter's entry in the queue of a held
// lock, as a process that died while waiting would: the waiter's Locker
// reaches Redis through a proxy that is cut while it waits, and is closed
// while cut. The holder then releases; the hand-over skips the dead entry
// or not, the queue must expire all the same.
func leaveStrandedWaiter(t *testing.T, d fenceDeployment, opts []lockmw.Option) {
	t.Helper()
	ctx := context.Background()
	holder := d.locker(t, opts...)
	lease, err := holder.Acquire(ctx, "stranded")
	if err != nil {
		t.Fatal(err)
	}
	srvAddr := d.addr
	p := redistest.StartProxy(t, srvAddr)
	o := &redis.Options{Addr: p.Addr()}
	fastFailing(o)
	waiterClient := redis.NewClient(o)
	t.Cleanup(func() { _ = waiterClient.Close() })
	waiter, err := lockmw.New(waiterClient, opts...)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = waiter.Acquire(waitCtx, "stranded", lockmw.Fair())
	}()
	admin := redis.NewClient(&redis.Options{Addr: srvAddr})
	t.Cleanup(func() { _ = admin.Close() })
	lockmwtest.Eventually(t, 5*time.Second, "the waiter queued", func() bool {
		return admin.LLen(ctx, lockKey("stranded")+":q").Val() > 0
	})
	p.Cut(t)
	cancel()
	<-done
	_ = waiter.Close()
	if admin.LLen(ctx, lockKey("stranded")+":q").Val() == 0 {
		t.Fatal("the stranded waiter's entry left the queue: the test needs it there")
	}
	if pttl := admin.PTTL(ctx, lockKey("stranded")+":q").Val(); pttl <= 0 {
		t.Errorf("queue PTTL %v, want an expiry", pttl)
	}
	releaseOK(t, lease)
}

// WithRetention and WithPermanentFences: bad values are refused by name.
func TestRetentionOptions(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		opts []lockmw.Option
		want string
	}{
		{[]lockmw.Option{lockmw.WithRetention(time.Millisecond)}, "WithRetention(1ms)"},
		{[]lockmw.Option{lockmw.WithRetention(-time.Hour)}, "WithRetention(-1h0m0s)"},
		{[]lockmw.Option{lockmw.WithTTL(5 * time.Second), lockmw.WithRetention(2 * time.Second)}, "shorter than the lease TTL"},
	} {
		_, err := lockmw.New(srv.Client(t), tc.opts...)
		if !errors.Is(err, lockmw.ErrInvalidOption) || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("New with %s: %v, want ErrInvalidOption naming it", tc.want, err)
		}
	}
	l := newLocker(t, srv, lockmw.WithRetention(time.Hour))
	lease, err := l.TryAcquire(context.Background(), "retained")
	if err != nil {
		t.Fatal(err)
	}
	defer releaseOK(t, lease)
	pttl := srv.Client(t).PTTL(context.Background(), fenceKey("retained")).Val()
	if pttl <= 59*time.Minute || pttl > time.Hour {
		t.Errorf("counter PTTL %v, want the retention (1h)", pttl)
	}
	if lease.Fence() > 1<<63-1 || lease.Fence() < 1e15 {
		t.Errorf("fence %d: want a server-clock seed in microseconds that fits a signed 64-bit column", lease.Fence())
	}
}

// waitChecked waits for the eviction check's closing Debug record.
func waitChecked(t *testing.T, logs *lockmwtest.Logs) {
	t.Helper()
	lockmwtest.Eventually(t, 10*time.Second, "the maxmemory-policy check", func() bool {
		return len(logs.Find(slog.LevelDebug, "checked maxmemory-policy")) > 0
	})
}

// A Redis that may evict keys (here allkeys-lru with a small maxmemory)
// gets one warning from New and from NewRedlock; a noeviction one none.
// Under memory pressure that evicts the fence counter, fences still rise.
func TestEvictionPolicyWarnedAndFencesRiseUnderEviction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("noeviction", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		logs := &lockmwtest.Logs{}
		newLocker(t, srv, lockmw.WithLogger(slog.New(logs)))
		waitChecked(t, logs)
		if w := logs.Find(slog.LevelDebug, "may evict"); len(w) != 0 {
			t.Errorf("warned on a noeviction Redis: %v", w[0].Message)
		}
	})
	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		masters := redistest.StartN(t, 3)
		if err := masters[1].Client(t).ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
			t.Fatal(err)
		}
		logs := &lockmwtest.Logs{}
		newRedlock(t, masters, lockmw.WithLogger(slog.New(logs)))
		waitChecked(t, logs)
		w := logs.Find(slog.LevelDebug, "may evict")
		if len(w) != 1 || !strings.Contains(lockmwtest.Text(w[0]), "master 1 ") || strings.Contains(lockmwtest.Text(w[0]), "master 0") {
			t.Fatalf("warnings %v, want one naming master 1 (volatile-lru) only", lockmwtest.Texts(w))
		}
	})
	t.Run("allkeys-lru", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, redistest.WithArgs("--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"))
		logs := &lockmwtest.Logs{}
		l := newLocker(t, srv, lockmw.WithLogger(slog.New(logs)))
		waitChecked(t, logs)
		w := logs.Find(slog.LevelDebug, "may evict")
		if len(w) != 1 || !strings.Contains(lockmwtest.Text(w[0]), "allkeys-lru") {
			t.Fatalf("warnings %v, want one naming allkeys-lru", lockmwtest.Texts(w))
		}

		admin := srv.Client(t)
		junk := strings.Repeat("x", 64<<10)
		var last uint64
		evicted := 0
		for round := 0; round < 60 && evicted < 3; round++ {
			lease, err := l.Acquire(ctx, "evicted", lockmw.WithWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if lease.Fence() <= last {
				t.Fatalf("round %d: fence %d after %d (%d evictions of the counter so far)", round, lease.Fence(), last, evicted)
			}
			last = lease.Fence()
			releaseOK(t, lease)
			// Fill memory past maxmemory: Redis evicts, and sometimes the
			// counter.
			pipe := admin.Pipeline()
			for i := range 128 {
				pipe.Set(ctx, fmt.Sprintf("junk:%d:%d", round, i), junk, 0)
			}
			_, _ = pipe.Exec(ctx)
			if admin.Exists(ctx, fenceKey("evicted")).Val() == 0 {
				evicted++
			}
		}
		if evicted == 0 {
			t.Fatal("the counter was never evicted: the test did not exercise eviction")
		}
		t.Logf("counter evicted %d times, last fence %d", evicted, last)
	})
}

// releaseOK releases lease, failing the test on an error.
func releaseOK(t *testing.T, lease *lockmw.Lease) {
	t.Helper()
	if err := lease.Release(context.Background()); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// oldVersion is what a lockmw version from before counters expired sends
// for an acquisition (SET NX PX, INCR, PTTL in one pipeline) and a release
// (compare-and-delete), on a raw client.
type oldVersion struct{ c *redis.Client }

var oldRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func (o oldVersion) lockOnce(t *testing.T, key string) uint64 {
	t.Helper()
	ctx := context.Background()
	token := fmt.Sprintf("old-%d", time.Now().UnixNano())
	var set *redis.BoolCmd
	var incr *redis.IntCmd
	_, err := o.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		set = p.SetNX(ctx, lockKey(key), token, time.Second)
		incr = p.Incr(ctx, fenceKey(key))
		p.PTTL(ctx, lockKey(key))
		return nil
	})
	if err != nil || !set.Val() {
		t.Fatalf("old version's acquisition: taken %v, %v", set.Val(), err)
	}
	if err := oldRelease.Run(ctx, o.c, []string{lockKey(key)}, token).Err(); err != nil {
		t.Fatal(err)
	}
	return uint64(incr.Val())
}

// Upgrading from a version whose counters never expire: old and new
// versions side by side keep fences rising, from the old counters on, as
// long as the rolling upgrade ends within the retention (doc.go, Redis
// keys: Upgrading). Past that, an old version alone finds an expired
// counter and starts it at 1: why the upgrade has that deadline.
func TestUpgradeFromCountersWithoutExpiry(t *testing.T) {
	t.Parallel()
	const retention = 2 * time.Second
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	old := oldVersion{srv.Client(t)}
	const key = "upgrade"

	var last uint64
	rising := func(who string, f uint64) {
		t.Helper()
		if f <= last {
			t.Fatalf("%s drew fence %d after %d", who, f, last)
		}
		last = f
	}
	for range 3 {
		rising("old version", old.lockOnce(t, key))
	}
	if pttl := admin.PTTL(ctx, fenceKey(key)).Val(); pttl != -1 {
		t.Fatalf("old counter PTTL %v, want none", pttl)
	}
	l := newLocker(t, srv, lockmw.WithTTL(time.Second), lockmw.WithRetention(retention))
	for i := range 6 {
		if i%2 == 0 {
			lease, err := l.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			rising("new version", lease.Fence())
			releaseOK(t, lease)
		} else {
			rising("old version", old.lockOnce(t, key))
		}
		if pttl := admin.PTTL(ctx, fenceKey(key)).Val(); pttl <= 0 || pttl > retention {
			t.Fatalf("after round %d the counter's PTTL is %v, want the retention: the new version gives old counters an expiry", i, pttl)
		}
	}
	if last < 1e15 {
		t.Fatalf("last fence %d: the new version did not seed the old counter from the clock", last)
	}

	// The deadline: the counter expires once idle for the retention, and
	// an old version alone would start over.
	lockmwtest.Eventually(t, retention+5*time.Second, "the counter expired", func() bool {
		return admin.Exists(ctx, fenceKey(key)).Val() == 0
	})
	if f := old.lockOnce(t, key); f != 1 {
		t.Fatalf("old version after the counter expired: fence %d, want 1 (what the upgrade deadline prevents)", f)
	}
	// A new version finds that counter (below the floor) and seeds it
	// again, above every fence before.
	lease, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseOK(t, lease)
	rising("new version after the old one's 1", lease.Fence())
}
