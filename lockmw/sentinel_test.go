package lockmw_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/internal/testkit/redistest"
	"github.com/lockmw/lockmw/lockmw"
)

// lockmw works through a Sentinel failover client (redis.NewFailoverClient),
// including across a real failover: a master and its replica watched by 3
// Sentinels (quorum 2); the master is killed and the Sentinels promote the
// replica. Leases that outlive their validity during the outage end with
// ErrLost before a new master exists; a lease that is still live after the
// failover is backed by its key on the new master (a rival cannot take it);
// and the same client and Locker acquire again once go-redis has switched.
func TestSentinelFailoverClient(t *testing.T) {
	t.Parallel() // its own servers; long, and mostly waiting
	const masterName = "lockmw-master"
	ctx := context.Background()
	began := time.Now()

	master := redistest.Start(t)
	replica := redistest.Start(t, redistest.WithReplicaOf(master))
	sentinels := redistest.StartSentinels(t, 3, masterName, master, 2)
	addrs := make([]string, len(sentinels))
	for i, s := range sentinels {
		addrs[i] = s.Addr()
	}
	setup := time.Since(began)

	failoverClient := func() *redis.Client {
		c := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:    masterName,
			SentinelAddrs: addrs,
			DialTimeout:   200 * time.Millisecond,
			DialerRetries: 1, // a refused dial fails at once instead of after 5 tries
			ReadTimeout:   500 * time.Millisecond,
			WriteTimeout:  500 * time.Millisecond,
		})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	client := failoverClient()
	l := newLockerOn(t, client)
	// A second process, in effect: its own failover client and Locker.
	rival := newLockerOn(t, failoverClient())
	onMaster, onReplica := master.Client(t), replica.Client(t)

	// Plain acquire and release through the failover client: the lock lives
	// on the master, excludes others, and fences increase.
	first, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire through the failover client: %v", err)
	}
	if v, err := onMaster.Get(ctx, lockKey("k")).Result(); err != nil || v == "" {
		t.Fatalf("GET %s on the master = %q, %v; want the owner token", lockKey("k"), v, err)
	}
	mustBusy(t, rival, "k")
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	second, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire after Release: %v", err)
	}
	if second.Fence() <= first.Fence() {
		t.Fatalf("fence %d after fence %d, want it to increase", second.Fence(), first.Fence())
	}
	if err := second.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}

	// The watchdog keeps a lease past its TTL through the failover client.
	const shortTTL = 600 * time.Millisecond
	short, err := l.Acquire(ctx, "short", lockmw.WithLeaseTTL(shortTTL))
	if err != nil {
		t.Fatalf("Acquire short: %v", err)
	}
	// Renewals reach the master through the failover client (a condition,
	// not a span of time).
	if !waitRenewedOn(t, onMaster, short, 30*time.Second) {
		t.Fatalf("lease with the watchdog ended (TTL %v): %v", shortTTL, context.Cause(short.Context()))
	}
	mustBusy(t, rival, "short")

	// A lease long enough to outlive the failover (validity ~9.9s; the
	// failover takes ~2.5s).
	long, err := l.Acquire(ctx, "long")
	if err != nil {
		t.Fatalf("Acquire long: %v", err)
	}
	// Replication is asynchronous: make sure the replica has every fence
	// counter and lock key before its master dies. Without this, the last
	// writes can be lost in the failover, and fences go back.
	if n, err := onMaster.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on the master = %d, %v; want 1", n, err)
	}

	master.Kill(t)
	killed := time.Now()

	// The short lease's validity ends long before any new master can exist
	// (Sentinels need over a second just to agree the master is down), so
	// it must end with ErrLost, not be carried over. (The bound is for a
	// stuck watchdog: a loaded machine runs the deadline's timer late.)
	waitDone(t, short.Context(), 30*time.Second, "short lease whose master was killed")
	shortLost := time.Since(killed)
	if cause := context.Cause(short.Context()); !errors.Is(cause, lockmw.ErrLost) {
		t.Fatalf("short lease ended with %v, want ErrLost", cause)
	}

	// Wait for the Sentinels to promote the replica.
	for _, s := range sentinels {
		for s.MasterAddr(t) != replica.Addr() {
			if time.Since(killed) > 60*time.Second { // stuck, not slow
				t.Fatalf("sentinel %s still reports master %s %v after the kill", s.Addr(), s.MasterAddr(t), time.Since(killed))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	promoted := time.Since(killed)

	// The same client and Locker take locks again once go-redis has
	// switched to the new master; fences continue from the replicated
	// counter.
	var third *lockmw.Lease
	eventually(t, 30*time.Second, func() (err error) {
		third, err = l.TryAcquire(ctx, "k")
		return err
	})
	switched := time.Since(killed)
	if third.Fence() <= second.Fence() {
		t.Fatalf("fence %d after the failover, %d before: want it to increase", third.Fence(), second.Fence())
	}
	if v, err := onReplica.Get(ctx, lockKey("k")).Result(); err != nil || v == "" {
		t.Fatalf("GET %s on the new master = %q, %v; want the owner token", lockKey("k"), v, err)
	}
	rivalMustNotSteal(t, rival, third)
	if err := third.Release(ctx); err != nil {
		t.Fatalf("Release after the failover: %v", err)
	}
	if err := short.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
		t.Fatalf("Release of the short lease = %v, want ErrLost", err)
	}

	// The long lease either survived, backed by its key on the new master,
	// or ended with ErrLost; never live without the key.
	if long.Context().Err() == nil {
		rivalMustNotSteal(t, rival, long)
	}
	// Kept: the watchdog renews it on the new master.
	longKept := long.Context().Err() == nil && waitRenewedOn(t, onReplica, long, lockmw.DefaultTTL)
	if longKept {
		if err := long.Release(ctx); err != nil {
			t.Fatalf("Release of the long lease after the failover: %v", err)
		}
	} else {
		if cause := context.Cause(long.Context()); !errors.Is(cause, lockmw.ErrLost) {
			t.Fatalf("long lease ended with %v, want ErrLost", cause)
		}
		if err := long.Release(ctx); !errors.Is(err, lockmw.ErrLost) {
			t.Fatalf("Release of the lost long lease = %v, want ErrLost", err)
		}
	}
	// Either way the key is free now.
	lease, err := rival.TryAcquire(ctx, "long")
	if err != nil {
		t.Fatalf("rival TryAcquire(\"long\") after its release: %v", err)
	}
	_ = lease.Release(ctx)

	t.Logf("setup (master, replica, 3 sentinels meshed) %v; after the kill: short lease lost at %v, "+
		"sentinels promoted the replica at %v, failover client acquired at %v; long lease kept: %v; total %v",
		setup.Round(time.Millisecond), shortLost.Round(time.Millisecond), promoted.Round(time.Millisecond),
		switched.Round(time.Millisecond), longKept, time.Since(began).Round(time.Millisecond))
}

// rivalMustNotSteal checks, from rival, that the lock of held is busy. It
// retries while rival's client is still switching to the new master
// (ErrUnavailable), for up to 10 seconds. If rival does acquire the lock,
// held must already have ended (lost, and reported so, before the rival got
// it); a rival holding the lock while held is live fails the test.
func rivalMustNotSteal(t *testing.T, rival *lockmw.Locker, held *lockmw.Lease) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		stolen, err := rival.TryAcquire(ctx, held.Key())
		switch {
		case err == nil:
			live := held.Context().Err() == nil
			_ = stolen.Release(ctx)
			if live {
				t.Fatalf("a rival acquired %q on the new master while the original lease was still live", held.Key())
			}
			if cause := context.Cause(held.Context()); !errors.Is(cause, lockmw.ErrLost) {
				t.Fatalf("lease on %q ended with %v before a rival acquired it, want ErrLost", held.Key(), cause)
			}
			return
		case errors.Is(err, lockmw.ErrNotAcquired):
			return
		case !errors.Is(err, lockmw.ErrUnavailable) || time.Now().After(deadline):
			t.Fatalf("rival TryAcquire(%q) = %v, want ErrNotAcquired", held.Key(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRenewedOn polls the PTTL of lease's key on c until it jumps back up,
// that is until a renewal landed on that server, and reports true. It
// reports false if the lease ends first. It fails the test if the key is
// missing while the lease is live, or if no renewal lands within limit.
func waitRenewedOn(t *testing.T, c *redis.Client, lease *lockmw.Lease, limit time.Duration) bool {
	t.Helper()
	ctx := context.Background()
	key := lockKey(lease.Key())
	deadline := time.Now().Add(limit)
	var last time.Duration
	for {
		pttl, err := c.PTTL(ctx, key).Result()
		if lease.Context().Err() != nil {
			return false
		}
		if err != nil || pttl <= 0 {
			t.Fatalf("PTTL %s on %s = %v, %v while the lease is live: its key is missing", key, c.Options().Addr, pttl, err)
		}
		if last > 0 && pttl > last+100*time.Millisecond {
			return true
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease on %q not renewed on %s within %v (PTTL %v)", lease.Key(), c.Options().Addr, limit, pttl)
		}
		last = pttl
		time.Sleep(20 * time.Millisecond)
	}
}
