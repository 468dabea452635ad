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

// A lock around one job, run once across every instance that calls this.
func ExampleLocker_Do() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	err = locker.Do(context.Background(), "report:daily", func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost: stop writing then.
		return nil
	}, lockmw.WithWait(5*time.Second))
	if errors.Is(err, lockmw.ErrNotAcquired) {
		fmt.Println("another instance is running the report")
	}
}

// Fail fast when the resource is busy, and tell the caller when to retry.
func ExampleLocker_TryAcquire() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	locker, err := lockmw.New(client, lockmw.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lease, err := locker.TryAcquire(ctx, "order:42", lockmw.WithName("order:{id}"))
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
	// rejected: UPDATE orders SET ... WHERE id = 42 AND fence < $1.
	fmt.Println("fence", lease.Fence())
}

// Code that locks the same key with a lease's context nests instead of
// deadlocking.
func ExampleLease_Context() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	locker, err := lockmw.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	outer, err := locker.Acquire(ctx, "order:42")
	if err != nil {
		log.Fatal(err)
	}
	defer outer.Release(ctx)

	// A service called with the lease context locks the same order.
	inner, err := locker.Acquire(outer.Context(), "order:42")
	if err != nil {
		log.Fatal(err)
	}
	inner.Release(ctx) // the lock stays held until outer is released

	select {
	case <-outer.Context().Done():
		fmt.Println("lock lost:", context.Cause(outer.Context()))
	default:
		fmt.Println("still holding order:42 with fence", outer.Fence())
	}
}

// Locks on a Redis Cluster: every key of one lock shares a hash tag, so it
// lives on one master; renewals go to each master in one round trip.
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

// Refuse a lock that no replica has acknowledged within 100ms.
func ExampleWithWaitReplicas() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
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
	}
}
