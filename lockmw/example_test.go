package lockmw_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/lockmw"
)

// redisAddr is the Redis the examples use; TestMain points it at a
// redis-server of its own. The examples print nothing that depends on
// earlier runs (a fence is drawn from a counter seeded from the server
// clock), so they pass however often they run (-count=2).
var redisAddr = "localhost:6379"

// The README's quickstart: a client configured for locks, a lock around one
// job, then a lease held by hand, whose fence a store can check.
func Example() {
	client := redis.NewClient(&redis.Options{
		Addr: redisAddr,
		// Every Redis call lockmw makes is bounded by these timeouts (and by context
		// deadlines, with ContextTimeoutEnabled); keep them well below the lock TTL.
		// No retries inside go-redis: lockmw never lets it re-send its writes and
		// retries renewals itself, so client retries would only make an outage take
		// several timeouts to become lockmw.ErrUnavailable instead of one.
		DialTimeout:           300 * time.Millisecond,
		ReadTimeout:           300 * time.Millisecond,
		WriteTimeout:          300 * time.Millisecond,
		MaxRetries:            -1,
		DialerRetries:         1,
		PipelinePoolSize:      -1,
		ContextTimeoutEnabled: true,
	})
	defer client.Close()

	locker, err := lockmw.New(client, lockmw.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close() // runs before client.Close

	ctx := context.Background()
	// Do waits up to 5s for the lock, runs the func, and releases.
	err = locker.Do(ctx, "order:42", func(ctx context.Context) error {
		// ctx is cancelled with cause lockmw.ErrLost if the lock is lost.
		return nil
	}, lockmw.WithWait(5*time.Second), lockmw.WithName("order:{id}"))
	if err != nil {
		log.Fatal(err) // errors.Is(err, lockmw.ErrNotAcquired): still busy after 5s
	}

	// Or hold a lease yourself: Acquire waits, TryAcquire makes one attempt.
	lease, err := locker.TryAcquire(ctx, "order:42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	// Pass the fence to your store, as a BIGINT: UPDATE orders SET ...
	// WHERE id = 42 AND fence < $1 refuses a holder that lost the lock.
	fence := int64(lease.Fence())
	fmt.Println("holding order:42 with a fence:", fence > 0)
	// Output: holding order:42 with a fence: true
}

// A lock around one job, run once across every instance that calls this.
func ExampleLocker_Do() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	err = locker.Do(context.Background(), "report:daily", func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost: stop writing then.
		fmt.Println("writing the daily report")
		return nil
	}, lockmw.WithWait(5*time.Second))
	if errors.Is(err, lockmw.ErrNotAcquired) {
		fmt.Println("another instance is running the report")
	}
	// Output: writing the daily report
}

// Fail fast when the resource is busy, and tell the caller when to retry.
func ExampleLocker_TryAcquire() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()
	locker, err := lockmw.New(client, lockmw.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lease, err := locker.TryAcquire(ctx, "invoice:7", lockmw.WithName("invoice:{id}"))
	switch {
	case errors.Is(err, lockmw.ErrNotAcquired):
		wait, _ := lockmw.RetryAfter(err)
		fmt.Println("busy; retry in", wait)
		return
	case errors.Is(err, lockmw.ErrUnavailable):
		fmt.Println("redis is down:", err)
		return
	case err != nil:
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	// Pass the fence to the store so that a writer that lost the lock is
	// rejected: UPDATE invoices SET ... WHERE id = 7 AND fence < $1.
	fmt.Println("holding invoice:7 with a fence:", lease.Fence() > 0)

	// Meanwhile another instance (here a second Locker) finds it busy.
	other, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close()
	if _, err := other.TryAcquire(ctx, "invoice:7"); errors.Is(err, lockmw.ErrNotAcquired) {
		wait, _ := lockmw.RetryAfter(err) // at most the holder's TTL
		fmt.Println("busy elsewhere; retry within 5s:", wait <= 5*time.Second)
	}
	// Output:
	// holding invoice:7 with a fence: true
	// busy elsewhere; retry within 5s: true
}

// Code that locks the same key with a lease's context nests instead of
// deadlocking.
func ExampleLease_Context() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	outer, err := locker.Acquire(ctx, "cart:9")
	if err != nil {
		log.Fatal(err)
	}
	defer outer.Release(ctx)

	// A service called with the lease context locks the same cart.
	inner, err := locker.Acquire(outer.Context(), "cart:9")
	if err != nil {
		log.Fatal(err)
	}
	inner.Release(ctx) // the lock stays held until outer is released

	select {
	case <-outer.Context().Done():
		fmt.Println("lock lost:", context.Cause(outer.Context()))
	default:
		fmt.Println("still holding cart:9; the nested lease had its fence:", inner.Fence() == outer.Fence())
	}
	// Output: still holding cart:9; the nested lease had its fence: true
}

// Check the lease before each step that must run under the lock: its
// context ends when the watchdog's timer fires, which can be late on a
// loaded host, while Valid and Deadline read the clock.
func ExampleLease_Valid() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()
	locker, err := lockmw.New(client, lockmw.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "invoices:batch")
	if err != nil {
		log.Fatal(err)
	}
	for _, invoice := range []string{"A-1", "A-2"} {
		// Stop when the lease has ended or has too little left for a step.
		if !lease.Valid() || time.Until(lease.Deadline()) < time.Second {
			fmt.Println("lease ending; stopping before", invoice)
			break
		}
		fmt.Println("sending", invoice) // with lease.Fence(), for the store to check
	}
	lease.Release(ctx)
	fmt.Println("valid after release:", lease.Valid())
	// Output:
	// sending A-1
	// sending A-2
	// valid after release: false
}

// Locks on a Redis Cluster: every key of one lock shares a hash tag, so it
// lives on one master; renewals go to each master in one round trip.
// (Compiled, not run: it needs a Cluster.)
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
	})
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	_ = locker.Do(context.Background(), "invoice:7", func(ctx context.Context) error { return nil })
}

// Refuse a lock that no replica has acknowledged within 100ms. The Redis
// here has no replica, so the lock is refused.
func ExampleWithWaitReplicas() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()
	locker, err := lockmw.New(client, lockmw.WithWaitReplicas(1, 100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	lease, err := locker.TryAcquire(context.Background(), "payout:9")
	switch {
	case errors.Is(err, lockmw.ErrNotReplicated):
		fmt.Println("no replica acknowledged the lock in time; it was released")
	case err == nil:
		defer lease.Release(context.Background())
		fmt.Println("locked, and replicated")
	}
	// Output: no replica acknowledged the lock in time; it was released
}
