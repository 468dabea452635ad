// Command quickstart shows lockmw in two acts: two instances (separate
// clients, as two processes would have) take turns on one lock, and then a
// holder stalls past its lease, its key expires, and it learns so through
// its lease context while the other instance takes over with a higher fence.
//
// With REDIS_ADDR set it uses that Redis; otherwise it starts an embedded
// in-process Redis, so it runs on a machine with no Redis installed:
//
//	go run ./examples/quickstart
//	REDIS_ADDR=localhost:6379 go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockmw/lockmw/examples/internal/demo"
	"github.com/lockmw/lockmw/lockmw"
)

func main() {
	addr, stop := demo.RedisAddr()
	defer stop()

	// Lost-lock warnings go to stderr; the story goes to stdout.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	a := newInstance("instance-a", addr, logger)
	b := newInstance("instance-b", addr, logger)
	defer a.close()
	defer b.close()
	ctx := context.Background()

	fmt.Println("== Act 1: two instances contend for one lock")
	var wg sync.WaitGroup
	for _, inst := range []*instance{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				inst.work(ctx, "report:daily", 50*time.Millisecond)
			}
		}()
	}
	wg.Wait()

	fmt.Println()
	fmt.Println("== Act 2: a holder stalls past its lease and notices")
	lease, err := a.locker.Acquire(ctx, "payment:7", lockmw.WithLeaseTTL(time.Second), lockmw.WithoutWatchdog())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s holds payment:7 (fence %d, 1s lease, no watchdog), then stalls for 3s\n", a.name, lease.Fence())
	start := time.Now()
	select {
	case <-lease.Context().Done():
		fmt.Printf("%s: lease context ended after %.2fs: %v\n", a.name,
			time.Since(start).Seconds(), context.Cause(lease.Context()))
	case <-time.After(3 * time.Second):
		log.Fatal("the lease context was never cancelled")
	}
	taken, err := b.locker.Acquire(ctx, "payment:7", lockmw.WithWait(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s now holds payment:7 (fence %d > %d: a store can reject %s's late writes)\n",
		b.name, taken.Fence(), lease.Fence(), a.name)
	if err := lease.Release(ctx); errors.Is(err, lockmw.ErrLost) {
		fmt.Printf("%s: Release reports %v; %s's lock is untouched\n", a.name, err, b.name)
	}
	if err := taken.Release(ctx); err != nil {
		log.Fatal(err)
	}
}

// instance is one service instance: its own Redis client and Locker.
type instance struct {
	name   string
	client *redis.Client
	locker *lockmw.Locker
}

func newInstance(name, addr string, logger *slog.Logger) *instance {
	client := demo.RedisClient(addr) // the client settings a lock needs
	locker, err := lockmw.New(client, lockmw.WithTTL(2*time.Second), lockmw.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	return &instance{name: name, client: client, locker: locker}
}

// work takes key, holds it for hold, releases it, and does as long of
// unlocked work.
func (in *instance) work(ctx context.Context, key string, hold time.Duration) {
	lease, err := in.locker.TryAcquire(ctx, key)
	if errors.Is(err, lockmw.ErrNotAcquired) {
		left, _ := lockmw.RetryAfter(err)
		fmt.Printf("%s waits: %s is busy (holder's lease has %v left)\n", in.name, key, left.Round(time.Millisecond))
		lease, err = in.locker.Acquire(ctx, key, lockmw.WithWait(10*time.Second))
	}
	if err != nil {
		log.Fatalf("%s: %v", in.name, err)
	}
	fmt.Printf("%s holds %s (fence %d)\n", in.name, key, lease.Fence())
	time.Sleep(hold) // the critical section
	fmt.Printf("%s releases %s\n", in.name, key)
	if err := lease.Release(ctx); err != nil {
		log.Fatalf("%s: %v", in.name, err)
	}
	time.Sleep(hold) // work that needs no lock
}

func (in *instance) close() {
	_ = in.locker.Close()
	_ = in.client.Close()
}
